package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// selfCPU is this process's user plus system CPU time so far (every
// thread; children not included).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user plus system CPU time of process pid, from
// /proc/<pid>/stat; ok is false when the process is not visible (it
// exited, or the server runs on another machine).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields are
	// counted after its closing parenthesis (state is field 3, utime 14).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * time.Second / clockTicks, true
}

// backendCPU tracks the CPU of a set of server backends over a window.
type backendCPU struct {
	start map[int]time.Duration
	// visible is false when a backend's /proc entry could not be read:
	// the server is not on this machine.
	visible bool
}

// backendPIDs are the pids of the sessions whose application_name starts
// with prefix.
func backendPIDs(ctx context.Context, conn *pgx.Conn, prefix string) ([]int, error) {
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, $1)`, prefix)
	if err != nil {
		return nil, fmt.Errorf("bench: list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("bench: list backends: %w", err)
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, nil
}

// startBackendCPU reads the CPU of the backends named by prefix now.
func startBackendCPU(ctx context.Context, conn *pgx.Conn, prefix string) (*backendCPU, error) {
	pids, err := backendPIDs(ctx, conn, prefix)
	if err != nil {
		return nil, err
	}
	b := &backendCPU{start: map[int]time.Duration{}, visible: true}
	for _, pid := range pids {
		c, ok := procCPU(pid)
		if !ok {
			b.visible = false
			continue
		}
		b.start[pid] = c
	}
	return b, nil
}

// since is the CPU the backends named by prefix used since start: a
// backend that started meanwhile counts whole, one that exited is lost.
// ok is false when the backends' /proc entries are not visible.
func (b *backendCPU) since(ctx context.Context, conn *pgx.Conn, prefix string) (time.Duration, bool, error) {
	pids, err := backendPIDs(ctx, conn, prefix)
	if err != nil {
		return 0, false, err
	}
	if !b.visible || len(pids) == 0 {
		return 0, false, nil
	}
	var total time.Duration
	for _, pid := range pids {
		c, ok := procCPU(pid)
		if !ok {
			return 0, false, nil
		}
		total += c - b.start[pid]
	}
	return total, true, nil
}
