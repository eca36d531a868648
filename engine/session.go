package engine

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Session is a connection to PostgreSQL that appliers take turns on. A
// runner keeps a fixed number of them, its connection budget's share for
// re-deriving (ADR 0028), and lends one to a transform for a batch or a
// build step: the transform's Applier is attached to it for the turn
// (Applier.Attach) and detached after. A session remembers what it was
// prepared for: the settings every applier needs, once; per transform, its
// search_path and recorded settings (ADR 0037) and its temporary tables,
// named after the transform so that
// several transforms' tables live side by side. A transform that comes
// back to a session it used recently pays nothing to start its turn.
type Session struct {
	conn       *pgx.Conn
	cfg        *pgx.ConnConfig
	version    int
	searchPath string
	// defaults are the recorded settings' values the session opened with
	// (after the appliers' pins); settings what they are now. A transform
	// without recorded settings runs under the defaults.
	defaults map[string]string
	settings map[string]string
	// prepared are the transforms whose temporary tables exist on the
	// session, least recently used first (at most maxPrepared), each with
	// the applier it was prepared for: a new applier (a worker started
	// again, after a RESUME that re-typed the stored columns the tables
	// are made like) has them made again.
	prepared []prepared
}

// prepared is one transform's temporary tables on a session.
type prepared struct {
	id    int64
	by    *Applier
	temps []string
}

// maxPrepared is how many transforms' temporary tables a session keeps.
// They are not ON COMMIT DELETE ROWS (forTransform): each commit would
// truncate every one of them, so their number would have to stay small.
const maxPrepared = 256

// OpenSession connects a session and applies the settings every applier
// runs with; name is its application_name.
func OpenSession(ctx context.Context, cfg *pgx.ConnConfig, name string) (*Session, error) {
	cfg = cfg.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = name
	// Unnamed statements are planned at every execution. A named prepared
	// statement without parameters keeps the plan made when the target was
	// empty: a hash over the whole table to join a few thousand keys.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	s := &Session{conn: conn, cfg: cfg}
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('search_path')`).Scan(&s.version, &s.searchPath); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("read server version: %w", err)
	}
	for _, kv := range sessionSettings {
		if _, err := conn.Exec(ctx, `SELECT set_config($1, $2, false)`, kv[0], kv[1]); err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("set %s: %w", kv[0], err)
		}
	}
	defaults, err := recordSettings(ctx, conn)
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	s.defaults, s.settings = map[string]string{}, map[string]string{}
	for _, d := range defaults {
		s.defaults[d.Name], s.settings[d.Name] = d.Value, d.Value
	}
	return s, nil
}

// Conn is the session's connection.
func (s *Session) Conn() *pgx.Conn { return s.conn }

// Version is the server's version number (server_version_num).
func (s *Session) Version() int { return s.version }

// Prepared reports whether transform id's temporary tables exist on the
// session: a pool lends it to that transform by preference. Not safe
// while the session is lent.
func (s *Session) Prepared(id int64) bool {
	return slices.IndexFunc(s.prepared, func(p prepared) bool { return p.id == id }) >= 0
}

// Close ends the session.
func (s *Session) Close(ctx context.Context) error { return s.conn.Close(ctx) }

// prepare readies the session for a's transform: its search_path, and its
// temporary tables unless they exist (dropping the least recently used
// transform's beyond maxPrepared).
func (s *Session) prepare(ctx context.Context, a *Applier) error {
	if s.searchPath != a.Plan.SearchPath {
		if _, err := s.conn.Exec(ctx, `SELECT set_config('search_path', $1, false)`, a.Plan.SearchPath); err != nil {
			return fmt.Errorf("set search_path: %w", err)
		}
		s.searchPath = a.Plan.SearchPath
	}
	if err := s.applySettings(ctx, a.Plan.Settings); err != nil {
		return err
	}
	i := slices.IndexFunc(s.prepared, func(p prepared) bool { return p.id == a.ID })
	if i >= 0 && s.prepared[i].by == a {
		p := s.prepared[i]
		s.prepared = append(slices.Delete(s.prepared, i, i+1), p)
		return nil
	}
	if i >= 0 {
		// Prepared for another applier, whose plan may differ: its
		// tables go, and are made again.
		if err := s.drop(ctx, s.prepared[i]); err != nil {
			return err
		}
		s.prepared = slices.Delete(s.prepared, i, i+1)
	}
	for len(s.prepared) >= maxPrepared {
		if err := s.drop(ctx, s.prepared[0]); err != nil {
			return err
		}
		s.prepared = s.prepared[1:]
	}
	for _, q := range a.Stmts.Setup {
		if _, err := s.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("prepare applier session for %s: %w", a.Plan.Target.Name, err)
		}
	}
	s.prepared = append(s.prepared, prepared{id: a.ID, by: a, temps: a.Stmts.temps})
	return nil
}

// applySettings sets the session to a transform's recorded settings, or
// back to its defaults for those the transform did not record; only what
// differs is set.
func (s *Session) applySettings(ctx context.Context, recorded []Setting) error {
	want := make(map[string]string, len(s.defaults))
	for k, v := range s.defaults {
		want[k] = v
	}
	for _, r := range recorded {
		want[r.Name] = r.Value
	}
	var changed [][2]string
	for _, name := range recordedSettings {
		if v, ok := want[name]; ok && s.settings[name] != v {
			changed = append(changed, [2]string{name, v})
		}
	}
	if err := setConfig(ctx, s.conn, changed, false); err != nil {
		return fmt.Errorf("apply the definition's settings: %w", err)
	}
	for _, kv := range changed {
		s.settings[kv[0]] = kv[1]
	}
	return nil
}

// drop drops one transform's temporary tables.
func (s *Session) drop(ctx context.Context, p prepared) error {
	for _, t := range p.temps {
		if _, err := s.conn.Exec(ctx, "DROP TABLE IF EXISTS pg_temp."+t); err != nil {
			return fmt.Errorf("drop the temporary tables of transform %d: %w", p.id, err)
		}
	}
	return nil
}

// tempName matches the temporary tables statements name: qualified where
// statements read them, bare where Setup creates them.
var tempName = regexp.MustCompile(`(pg_temp\.|TEMP TABLE IF NOT EXISTS )__trellis_([a-z]+[0-9]*)\b`)

// forTransform makes s fit a session several transforms share: its
// temporary tables are named after transform id (__trellis_k becomes
// __trellis_<id>_k), and they live as long as the session rather than
// being emptied at every commit (ON COMMIT DELETE ROWS truncates every
// such table of the session at each commit, whichever transform's it
// is); the applier empties its own at the start of each transaction
// (Clear).
func (s *Statements) forTransform(id int64) {
	rename := func(q *string) {
		*q = tempName.ReplaceAllString(*q, fmt.Sprintf("${1}__trellis_%d_${2}", id))
	}
	var clear []string
	for i := range s.Setup {
		for _, m := range tempName.FindAllStringSubmatch(s.Setup[i], -1) {
			t := fmt.Sprintf("__trellis_%d_%s", id, m[2])
			s.temps = append(s.temps, t)
			clear = append(clear, fmt.Sprintf("__d%d AS (DELETE FROM pg_temp.%s)", len(clear), t))
		}
		rename(&s.Setup[i])
		s.Setup[i] = strings.Replace(s.Setup[i], " ON COMMIT DELETE ROWS", "", 1)
	}
	if len(clear) > 0 {
		s.Clear = "WITH " + strings.Join(clear, ", ") + " SELECT 1"
	}
	rename(&s.LoadKeys)
	rename(&s.LoadBounds)
	rename(&s.AnalyzeKeys)
	for i := range s.LoadSource {
		rename(&s.LoadSource[i])
	}
	for i := range s.Analyze {
		rename(&s.Analyze[i])
	}
	for i := range s.Apply {
		rename(&s.Apply[i].SQL)
		rename(&s.Apply[i].EmptyClause)
	}
	for i := range s.Enum {
		rename(&s.Enum[i].First)
		rename(&s.Enum[i].After)
	}
	for i := range s.Reconcile {
		rename(&s.Reconcile[i])
	}
	if r := s.RangeBuild; r != nil {
		for _, q := range []*string{&r.Next, &r.Stored, &r.Copy, &r.Changes, &r.LedgerStored, &r.LedgerCopy} {
			rename(q)
		}
	}
}
