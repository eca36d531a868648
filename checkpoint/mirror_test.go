package checkpoint

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// mirrorCapEnv, when set, is the mirror bound every store a test opens
// uses; TestUnderMirrorCaps sets it for a re-run of the package's tests.
const mirrorCapEnv = "TRELLIS_TEST_STORE_MIRROR_CAP"

// memBudgetEnv, when set, is the store-wide bound on in-memory entries
// every store a test opens uses (ADR 0029).
const memBudgetEnv = "TRELLIS_TEST_STORE_MEM_BUDGET"

// testMemBudget is the in-memory bound of the stores tests open.
func testMemBudget(t testing.TB) int {
	v := os.Getenv(memBudgetEnv)
	if v == "" {
		return defaultMemBudget
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", memBudgetEnv, v, err)
	}
	return n
}

// testMirrorCap is the mirror bound of the stores tests open.
func testMirrorCap(t testing.TB) int {
	v := os.Getenv(mirrorCapEnv)
	if v == "" {
		return defaultMirrorCap
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", mirrorCapEnv, v, err)
	}
	return n
}

// underCaps reports whether this run is one of TestUnderMirrorCaps'
// re-runs.
func underCaps() bool { return os.Getenv(mirrorCapEnv) != "" || os.Getenv(memBudgetEnv) != "" }

// TestUnderMirrorCaps runs every other test of the package again with no
// mirror (every dirty set read from Pebble, as a catch-up's are), with a
// tiny one (sets going in and out of their mirror all the time), and with
// a tiny store-wide budget (mirrors and watches dropped all the time, so
// Done reads its entries; ADR 0029): the store must behave the same
// whichever copy it reads (ADR 0016).
func TestUnderMirrorCaps(t *testing.T) {
	if underCaps() {
		t.Skip("already a re-run")
	}
	if testing.Short() {
		t.Skip("short")
	}
	for _, env := range []string{mirrorCapEnv + "=0", mirrorCapEnv + "=3", memBudgetEnv + "=5"} {
		t.Run(env, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", ".", "-test.skip", "TestUnderMirrorCaps|TestCommitSpillMillion|TestMemoryBudget", "-test.count", "1")
			cmd.Env = append(os.Environ(), env)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("tests with %s: %v\n%s", env, err, out)
			}
		})
	}
}

// TestMirrorFollowsStore checks the mirror against a full Pebble scan
// after every step of a sequence that goes over the bound and back.
func TestMirrorFollowsStore(t *testing.T) {
	s, err := open(t.TempDir(), Options{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	lsn := uint64(0)
	rec := func(names ...string) {
		t.Helper()
		var keys []DirtyKey
		for _, n := range names {
			keys = append(keys, dk(1, 1, n))
		}
		lsn += 10
		if err := s.Record(lsn, uint32(lsn), keys, []TableRef{{Transform: 1, Table: 9}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, wantMirror bool) {
		t.Helper()
		s.mu.Lock()
		m, has := s.mirrors[1]
		s.mu.Unlock()
		if has != wantMirror {
			t.Fatalf("%s: has mirror %v, want %v", step, has, wantMirror)
		}
		if !has {
			return
		}
		scan := map[string]mirrorEntry{}
		it, err := s.db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		pfx := dirtyPrefix(1)
		for it.SeekGE(pfx); it.Valid() && len(it.Key()) > len(pfx) && string(it.Key()[:len(pfx)]) == string(pfx); it.Next() {
			lsn, ver, err := decodeValue(it.Value())
			if err != nil {
				t.Fatal(err)
			}
			scan[string(it.Key())] = mirrorEntry{lsn: lsn, ver: ver, stored: true}
		}
		_ = it.Close()
		if fmt.Sprint(scan) != fmt.Sprint(map[string]mirrorEntry(m)) {
			t.Fatalf("%s: mirror %v, store %v", step, m, scan)
		}
	}
	check("empty, nothing taken", false)
	b := mustTake(t, s, 1, 0) // a full Take of an empty set starts the mirror
	check("after the first take", true)
	rec("a", "b")
	check("two keys and a marker", true)
	rec("b", "c", "d") // 4 keys + 1 marker > 4
	check("over the bound", false)
	if err := s.Done(1, b); err != nil {
		t.Fatal(err)
	}
	b = mustTake(t, s, 1, 2)
	if b.All {
		t.Fatal("a take of 2 of 4 keys says All")
	}
	if err := s.Done(1, b); err != nil {
		t.Fatal(err)
	}
	check("partly drained, still read from the store", false)
	b = mustTake(t, s, 1, 0)
	rec("e") // marked between the take and its Done: in the watch
	check("rebuilt from the scan and the watch", true)
	if err := s.Done(1, b); err != nil {
		t.Fatal(err)
	}
	check("after done", true)
	if got := keyNames(t, mustTake(t, s, 1, 0)); fmt.Sprint(got) != "[e]" {
		t.Fatalf("left after done: %v", got)
	}
}
