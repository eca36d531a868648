package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-repl/trellis-repl/decode"
	"github.com/trellis-repl/trellis-repl/internal/retry"
)

// Config configures Run.
type Config struct {
	// DSN is a normal libpq connection string (URL or keyword/value). Run
	// uses it as is for a short catalog check at each connect (unless
	// Catalog is set), and with replication=database added for the
	// streaming connection.
	DSN string
	// Catalog, when set, runs that check instead of a connection of its
	// own: a runner's connection budget has no share for it (ADR 0028).
	Catalog     Querier
	Slot        string
	Publication string
	// StartLSN is called at each (re)connect and returns where to resume:
	// the consumer's durable received position. 0 resumes at the slot's
	// confirmed_flush_lsn.
	StartLSN func() uint64
	// FlushLSN returns the LSN safe to confirm: everything before it is
	// durable on the consumer's side. It is called from the status timer
	// goroutine, so it must be safe for concurrent use. The slot is never
	// confirmed beyond it; nil or 0 confirms nothing.
	FlushLSN func() uint64
	// StatusInterval is how often a standby status update is sent. Default
	// 1s; never more than wal_sender_timeout/3.
	StatusInterval time.Duration
	// Logger receives connection lifecycle messages; nil discards.
	Logger *slog.Logger
	// BackoffMin and BackoffMax bound the exponential delay between
	// reconnects (defaults 100ms and 10s); a connection that stayed up for
	// BackoffReset (default 30s) resets the delay to BackoffMin.
	BackoffMin   time.Duration
	BackoffMax   time.Duration
	BackoffReset time.Duration
	// InternalErrorLimit is how many sessions in a row may end with the
	// server's internal error (SQLSTATE XX000) before Run reports the slot
	// undecodable (default 5).
	InternalErrorLimit int
	// Streaming, when set, is called each time the server accepts
	// START_REPLICATION; Interrupted each time a session ends with an
	// error (before Run retries it or returns it). A health check follows
	// the stream through them.
	Streaming   func()
	Interrupted func(err error)

	// session replaces runSession in tests of the retry policy.
	session func(ctx context.Context, cfg *Config, sink decode.Sink, log *slog.Logger) error
	// streaming is called by a session once the server accepted
	// START_REPLICATION: a failure episode is over.
	streaming func()
}

func (c Config) withDefaults() Config {
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.InternalErrorLimit <= 0 {
		c.InternalErrorLimit = 5
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Second
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = c.BackoffMin
	}
	if c.BackoffReset <= 0 {
		c.BackoffReset = 30 * time.Second
	}
	if c.StartLSN == nil {
		c.StartLSN = func() uint64 { return 0 }
	}
	if c.FlushLSN == nil {
		c.FlushLSN = func() uint64 { return 0 }
	}
	return c
}

// permanentError marks a session error that a reconnect cannot cure: the
// decoder refused a message, or the sink failed.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Run streams the slot until ctx ends or a permanent error occurs, feeding
// every pgoutput message through a decode.Decoder into sink. It reconnects
// with exponential backoff when the connection or server goes away (a new
// Decoder per connection: the server re-sends Relation messages and open
// transactions then), and returns:
//   - ctx.Err() when ctx ends;
//   - *SlotLostError when the slot or publication is missing, the slot
//     was invalidated, or it confirmed beyond StartLSN (a disruption);
//   - *UnavailableError when the server or role cannot stream at all;
//   - a sink or decode error (wrapped; *decode.KeyError among them).
//
// A slot held by another process (55006) is retried, and logged. The slot
// and publication must exist (EnsurePublication, then EnsureSlot) before
// Run starts: a missing one is a *SlotLostError, not something Run creates.
// After Run returns, the server's walsender may hold the slot for a moment
// longer.
func Run(ctx context.Context, cfg Config, sink decode.Sink) error {
	if err := ValidateSlotName(cfg.Slot); err != nil {
		return err
	}
	if cfg.Publication == "" {
		return errors.New("replication: Config.Publication is empty")
	}
	if sink == nil {
		return errors.New("replication: nil sink")
	}
	if _, err := pgconn.ParseConfig(cfg.DSN); err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("slot", cfg.Slot)
	backoff := cfg.BackoffMin
	internal := 0 // consecutive sessions ended by the server's internal error
	session := runSession
	if cfg.session != nil {
		session = cfg.session
	}
	// One warning per episode of failures, not one per attempt.
	lost := retry.NewEpisode(log, "replication connection lost; reconnecting", "replication connection recovered")
	busy := retry.NewEpisode(log, "replication slot is in use by another process; retrying", "replication slot acquired")
	cfg.streaming = func() {
		lost.Recover()
		busy.Recover()
		if cfg.Streaming != nil {
			cfg.Streaming()
		}
	}
	for {
		began := time.Now()
		err := session(ctx, &cfg, sink, log)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && cfg.Interrupted != nil {
			cfg.Interrupted(err)
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		if p := classify(err, cfg.Slot, cfg.Publication); p != nil {
			return p
		}
		if pgCode(err) == "XX000" {
			// An internal error while decoding repeats at the same WAL
			// position on every attempt; retrying forever would hide it.
			if internal++; internal >= cfg.InternalErrorLimit {
				return &SlotLostError{Kind: SlotUndecodable, Slot: cfg.Slot, Publication: cfg.Publication,
					Detail: fmt.Sprintf("%d attempts in a row failed", internal), Err: err}
			}
		} else {
			internal = 0
		}
		if time.Since(began) >= cfg.BackoffReset {
			backoff = cfg.BackoffMin
		}
		if pgCode(err) == "55006" {
			busy.Fail(err, backoff)
		} else {
			lost.Fail(err, backoff)
		}
		if !retry.Sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, cfg.BackoffMax)
	}
}

// serverFacts is what one connection needs to know before streaming.
type serverFacts struct {
	version          int
	walSenderTimeout time.Duration // 0 = disabled
}

// preflight reads the server version and wal_sender_timeout on a normal
// connection (some managed servers refuse SHOW on replication connections)
// and turns a missing slot or publication, a lost slot, or a slot that
// confirmed more than the consumer has (start, when not 0) into a typed
// error before START_REPLICATION hides it behind a less clear one or
// silently skips changes.
func preflight(ctx context.Context, cfg *Config, start uint64) (serverFacts, error) {
	conn := cfg.Catalog
	if conn == nil {
		own, err := pgx.Connect(ctx, cfg.DSN)
		if err != nil {
			return serverFacts{}, fmt.Errorf("replication: connect: %w", err)
		}
		defer func() {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			own.Close(closeCtx)
		}()
		conn = own
	}
	var (
		f         serverFacts
		wstMillis int64
		pubExists bool
		slotType  *string
		walStatus *string
		confirmed *string
	)
	err := conn.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int,
		       (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'),
		       EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2),
		       (SELECT slot_type FROM pg_replication_slots WHERE slot_name = $1),
		       (SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1),
		       (SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1)`,
		cfg.Slot, cfg.Publication).Scan(&f.version, &wstMillis, &pubExists, &slotType, &walStatus, &confirmed)
	if err != nil {
		return serverFacts{}, fmt.Errorf("replication: read server settings: %w", err)
	}
	f.walSenderTimeout = time.Duration(wstMillis) * time.Millisecond
	confirmedLSN, err := parseLSN(confirmed)
	if err != nil {
		return serverFacts{}, err
	}
	switch {
	case slotType == nil:
		return f, &SlotLostError{Kind: SlotMissing, Slot: cfg.Slot, Publication: cfg.Publication}
	case walStatus != nil && *walStatus == "lost":
		return f, &SlotLostError{Kind: SlotInvalidated, Slot: cfg.Slot, Publication: cfg.Publication}
	case !pubExists:
		return f, &SlotLostError{Kind: PublicationMissing, Slot: cfg.Slot, Publication: cfg.Publication}
	case start != 0 && uint64(confirmedLSN) > start:
		return f, &SlotLostError{Kind: SlotAhead, Slot: cfg.Slot, Publication: cfg.Publication,
			Detail: fmt.Sprintf("resume at %s, slot confirmed %s", pglogrepl.LSN(start), confirmedLSN)}
	}
	return f, nil
}

// statusInterval caps the configured interval at wal_sender_timeout/3 (0 =
// the timeout is disabled), so a lost update or two never gets us dropped.
func statusInterval(configured, walSenderTimeout time.Duration) time.Duration {
	if walSenderTimeout > 0 && configured > walSenderTimeout/3 {
		return max(walSenderTimeout/3, time.Millisecond)
	}
	return configured
}

// connectReplication opens a replication=database connection. Session
// timeouts a role or database may set are switched off, as they would kill
// a healthy stream.
func connectReplication(ctx context.Context, dsn string) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("replication: parse DSN: %w", err)
	}
	pc.RuntimeParams["replication"] = "database"
	for _, k := range []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"} {
		if _, ok := pc.RuntimeParams[k]; !ok {
			pc.RuntimeParams[k] = "0"
		}
	}
	if _, ok := pc.RuntimeParams["application_name"]; !ok {
		pc.RuntimeParams["application_name"] = "trellis-repl"
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("replication: open replication connection: %w", err)
	}
	return conn, nil
}

// pluginArgs are pgoutput's START_REPLICATION options: proto 2 with
// streaming of large in-progress transactions where the server has it
// (PostgreSQL 14+), else proto 1.
func pluginArgs(version int, pub string) []string {
	// publication_names is split as an identifier list by the server, so
	// the name is double-quoted inside the single-quoted literal.
	names := strings.ReplaceAll(pgx.Identifier{pub}.Sanitize(), "'", "''")
	if version >= 140000 {
		return []string{"proto_version '2'", "publication_names '" + names + "'", "streaming 'on'"}
	}
	return []string{"proto_version '1'", "publication_names '" + names + "'"}
}

// session is one replication connection.
//
// Concurrency: pgconn.PgConn is not safe for concurrent use. Reading its
// source (pgx v5.13) shows that a CopyData written through
// Frontend().SendUnbufferedEncodedCopyData touches only the write buffer
// and the net.Conn, while ReceiveMessage touches only the read side, so an
// overlap would probably work — but nothing documents it, and a
// context-cancelled ReceiveMessage sets a deadline on the whole net.Conn,
// which would break a write in flight. So the two never overlap: mu guards
// every use of conn. The receive loop holds mu only inside ReceiveMessage,
// which a read deadline bounds to pollTimeout (a read timeout leaves the
// connection usable: pgconn keeps the partial message and does not close on
// timeouts), and releases it while it decodes and calls the sink. The
// status timer therefore waits at most pollTimeout for mu, and keeps
// sending while the sink is slow — the point of having a timer at all: a
// busy consumer must not get the walsender to drop us after
// wal_sender_timeout.
type session struct {
	conn        *pgconn.PgConn
	cfg         *Config
	log         *slog.Logger
	pollTimeout time.Duration

	mu       sync.Mutex    // serializes all use of conn
	received atomic.Uint64 // highest WAL position received (write)
	sendErr  atomic.Pointer[error]
}

// writeTimeout bounds one status-update write, so a dead peer cannot hold
// mu (and with it the receive loop) forever.
const writeTimeout = 10 * time.Second

func runSession(ctx context.Context, cfg *Config, sink decode.Sink, log *slog.Logger) error {
	start := cfg.StartLSN()
	facts, err := preflight(ctx, cfg, start)
	if err != nil {
		return err
	}
	interval := statusInterval(cfg.StatusInterval, facts.walSenderTimeout)
	conn, err := connectReplication(ctx, cfg.DSN)
	if err != nil {
		return err
	}
	closeCtx, cancelClose := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancelClose()
	defer conn.Close(closeCtx)

	args := pluginArgs(facts.version, cfg.Publication)
	err = pglogrepl.StartReplication(ctx, conn, pgx.Identifier{cfg.Slot}.Sanitize(), pglogrepl.LSN(start),
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
	if err != nil {
		return fmt.Errorf("replication: START_REPLICATION at %s: %w", pglogrepl.LSN(start), err)
	}
	log.Info("replication stream started", "start_lsn", pglogrepl.LSN(start).String(), "options", strings.Join(args, ", "), "status_interval", interval)
	if cfg.streaming != nil {
		cfg.streaming()
	}

	s := &session{
		conn:        conn,
		cfg:         cfg,
		log:         log,
		pollTimeout: min(max(interval/4, 10*time.Millisecond), 250*time.Millisecond),
	}
	s.received.Store(start)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.statusLoop(done, interval)
	}()
	defer func() {
		close(done)
		wg.Wait()
		// Best effort: leave the slot at the latest durable position.
		_ = s.sendStatus()
	}()
	return s.receiveLoop(ctx, sink)
}

func (s *session) receiveLoop(ctx context.Context, sink decode.Sink) error {
	dec := decode.NewDecoder(sink, s.log)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p := s.sendErr.Load(); p != nil {
			return fmt.Errorf("replication: send standby status: %w", *p)
		}
		msg, err := s.receive()
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("replication: receive: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("replication: %w", err)
				}
				walEnd := uint64(pkm.ServerWALEnd)
				s.noteReceived(walEnd)
				// Everything before walEnd was sent; with no transaction or
				// stream block half-received, nothing before it is pending.
				if !dec.InTxn() && !dec.InStream() {
					if err := sink.Idle(ctx, walEnd); err != nil {
						return &permanentError{fmt.Errorf("replication: sink idle at %s: %w", pglogrepl.LSN(walEnd), err)}
					}
				}
				if pkm.ReplyRequested {
					if err := s.sendStatus(); err != nil {
						return fmt.Errorf("replication: send standby status: %w", err)
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("replication: %w", err)
				}
				if err := dec.Decode(ctx, xld.WALData); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return &permanentError{fmt.Errorf("replication: at %s: %w", xld.WALStart, err)}
				}
				s.noteReceived(uint64(xld.WALStart))
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.NoticeResponse:
			s.log.Info("server notice", "message", m.Message, "detail", m.Detail)
		case *pgproto3.CopyDone:
			return errors.New("replication: the server ended the replication stream")
		}
	}
}

// receive waits at most pollTimeout for one message; see session.
func (s *session) receive() (pgproto3.BackendMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.conn.Conn().SetReadDeadline(time.Now().Add(s.pollTimeout)); err != nil {
		return nil, err
	}
	// context.Background: cancellation is handled by the read deadline
	// and the loop's ctx check, never by pgconn's context watcher (which
	// would set a deadline on writes too).
	return s.conn.ReceiveMessage(context.Background())
}

func (s *session) noteReceived(lsn uint64) {
	for {
		cur := s.received.Load()
		if lsn <= cur || s.received.CompareAndSwap(cur, lsn) {
			return
		}
	}
}

func (s *session) statusLoop(done <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if err := s.sendStatus(); err != nil {
				s.sendErr.Store(&err)
				return
			}
		}
	}
}

// sendStatus sends a standby status update: write = the last received
// position, flush = apply = FlushLSN(). It encodes the message itself
// rather than call pglogrepl.SendStandbyStatusUpdate, which silently
// replaces a zero flush with write (that would confirm WAL the consumer
// has not made durable); a zero flush is ignored by the walsender.
func (s *session) sendStatus() error {
	flush := s.cfg.FlushLSN()
	write := max(s.received.Load(), flush)
	buf := encodeStatus(write, flush, flush, time.Now())
	s.mu.Lock()
	defer s.mu.Unlock()
	nc := s.conn.Conn()
	if err := nc.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	err := s.conn.Frontend().SendUnbufferedEncodedCopyData(buf)
	_ = nc.SetWriteDeadline(time.Time{})
	if err != nil {
		return err
	}
	s.log.Debug("standby status sent", "write", pglogrepl.LSN(write).String(), "flush", pglogrepl.LSN(flush).String())
	return nil
}

// pgEpochUnixMicros is 2000-01-01 UTC, PostgreSQL's timestamp epoch.
const pgEpochUnixMicros = 946684800 * 1000000

// encodeStatus builds the CopyData of a Standby Status Update ('r').
func encodeStatus(write, flush, apply uint64, now time.Time) []byte {
	data := make([]byte, 0, 34)
	data = append(data, pglogrepl.StandbyStatusUpdateByteID)
	data = binary.BigEndian.AppendUint64(data, write)
	data = binary.BigEndian.AppendUint64(data, flush)
	data = binary.BigEndian.AppendUint64(data, apply)
	data = binary.BigEndian.AppendUint64(data, uint64(now.UnixMicro()-pgEpochUnixMicros))
	data = append(data, 0) // no reply requested
	buf, _ := (&pgproto3.CopyData{Data: data}).Encode(nil)
	return buf
}
