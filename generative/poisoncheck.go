package generative

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/selfcheck"
)

// The oracle of poison rows (ADR 0013). A transform whose re-derive can
// fail on row data — a row transform of one table with a CHECK on its
// target or a division in a select item — must, once converged, hold
// exactly the keys of the source rows that pass its WHERE and fail (a held
// key whose row was corrected or deleted since is re-derived and
// released; one never changed again stays held), and its target without
// the held keys must equal its query without the failing rows. What
// fails is read from what the database has, not from the generator: the
// target's CHECK constraints from the catalog (a transform dropped and
// created again has none) and the divisions from the plan's select items.

// keySep joins a key's values into one text (no generated value holds it).
const keySep = "\x1f"

// poisonCheck is how one transform's re-derive may fail on row data.
type poisonCheck struct {
	p *engine.Plan
	// checks are the target's CHECK expressions (over its column names).
	checks []string
	// inner selects, per source row passing the WHERE, every target
	// column (divisions guarded by nullif) and __zero, whether a division
	// divides by zero.
	inner string
}

// poisonOf reads how the transform of plan p may fail on row data: nil
// when it cannot (no CHECK on its target and no division in its select
// items, or not a row transform of one table, which generated programs
// never poison).
func poisonOf(ctx context.Context, conn *pgx.Conn, p *engine.Plan) (*poisonCheck, error) {
	if p.Shape != engine.ShapeRow || p.Multi() {
		return nil, nil
	}
	pc := &poisonCheck{p: p}
	rows, err := conn.Query(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'c' ORDER BY conname`, p.Target.Ident())
	if err != nil {
		return nil, fmt.Errorf("read the CHECK constraints of %s: %w", p.Target.Ident(), err)
	}
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			rows.Close()
			return nil, err
		}
		def = strings.TrimSuffix(strings.TrimPrefix(def, "CHECK "), " NOT VALID")
		pc.checks = append(pc.checks, def)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var items, zeros []string
	for _, c := range p.Cols {
		safe, z := guardDivisions(c.Expr)
		zeros = append(zeros, z...)
		items = append(items, safe+" AS "+pgx.Identifier{c.Name}.Sanitize())
	}
	if len(pc.checks) == 0 && len(zeros) == 0 {
		return nil, nil
	}
	zero := "false"
	if len(zeros) > 0 {
		zero = "coalesce(" + strings.Join(zeros, " OR ") + ", false)"
	}
	pc.inner = "SELECT " + strings.Join(items, ", ") + ", " + zero + ` AS "__zero" FROM ` + p.FromSQL()
	if p.Where != "" {
		pc.inner += " WHERE " + p.Where
	}
	return pc, nil
}

// guardDivisions rewrites every division by a parenthesized expression in
// x as a division by nullif(…, 0) and returns the rewritten expression and,
// per division, the condition that it divides by zero.
func guardDivisions(x string) (string, []string) {
	var b strings.Builder
	var zeros []string
	for i := 0; i < len(x); i++ {
		switch x[i] {
		case '\'', '"':
			// Copy a quoted literal or identifier whole.
			j := i + 1
			for j < len(x) && x[j] != x[i] {
				j++
			}
			b.WriteString(x[i:min(j+1, len(x))])
			i = j
			continue
		case '/':
			j := i + 1
			for j < len(x) && x[j] == ' ' {
				j++
			}
			if j < len(x) && x[j] == '(' {
				if end := closingParen(x, j); end > 0 {
					den := x[j : end+1]
					b.WriteString("/ nullif(" + den + ", 0)")
					zeros = append(zeros, "("+den+" = 0)")
					i = end
					continue
				}
			}
		}
		b.WriteByte(x[i])
	}
	return b.String(), zeros
}

// closingParen is the index of the parenthesis closing the one at open,
// -1 if none does.
func closingParen(x string, open int) int {
	depth := 0
	for i := open; i < len(x); i++ {
		switch x[i] {
		case '\'', '"':
			q := x[i]
			for i++; i < len(x) && x[i] != q; i++ {
			}
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// poisoned is true of a row of inner (as q) that the engine cannot write:
// a division by zero, or a CHECK it fails (NULL passes).
func (pc *poisonCheck) poisoned() string {
	parts := []string{`q."__zero"`}
	for _, c := range pc.checks {
		parts = append(parts, "NOT coalesce("+c+", true)")
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// keyExpr is a row's key as one text (its values joined by keySep), over
// the identity columns of the target or of inner.
func (pc *poisonCheck) keyExpr(qual string) string {
	parts := make([]string, len(pc.p.Identity))
	for i, c := range pc.p.Identity {
		parts[i] = qual + pgx.Identifier{c}.Sanitize() + "::text"
	}
	return "concat_ws(chr(31), " + strings.Join(parts, ", ") + ")"
}

// compare checks the transform against its held keys (each joined by
// keySep): they must be exactly the keys of its failing rows, and its
// target without them must equal its query without those rows. It returns
// what differs.
func (pc *poisonCheck) compare(ctx context.Context, conn *pgx.Conn, name string, held []string) ([]string, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, "SELECT "+pc.keyExpr("q.")+" FROM ("+pc.inner+") AS q WHERE "+pc.poisoned())
	if err != nil {
		return nil, fmt.Errorf("the failing rows of %s: %w", name, err)
	}
	want := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		want[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("the failing rows of %s: %w", name, err)
	}
	have := map[string]bool{}
	for _, k := range held {
		have[k] = true
	}
	var problems []string
	if missing, extra := setDiff(want, have), setDiff(have, want); len(missing)+len(extra) > 0 {
		problems = append(problems, fmt.Sprintf("%s holds the wrong keys (its failing rows' keys: %s; held: %s):\n    failing, not held %d %v\n    held, not failing %d %v",
			name, keyList(want), keyList(have), len(missing), missing, len(extra), extra))
	}
	vis := make([]string, len(pc.p.Visible))
	for i, c := range pc.p.Visible {
		vis[i] = pgx.Identifier{c}.Sanitize()
	}
	cols := strings.Join(vis, ", ")
	query := "SELECT " + cols + " FROM (" + pc.inner + ") AS q WHERE NOT " + pc.poisoned()
	target := "SELECT " + cols + " FROM " + pc.p.Target.Ident() + " WHERE NOT (" + pc.keyExpr("") + " = ANY($1::text[]))"
	keys := append([]string{}, held...)
	var d selfcheck.Diff
	if d.Missing, d.MissingSample, err = exceptAllArgs(ctx, tx, query, target, keys); err != nil {
		return nil, fmt.Errorf("compare %s without its held keys: %w", name, err)
	}
	if d.Extra, d.ExtraSample, err = exceptAllArgs(ctx, tx, target, query, keys); err != nil {
		return nil, fmt.Errorf("compare %s without its held keys: %w", name, err)
	}
	if !d.Equal() {
		problems = append(problems, fmt.Sprintf("%s without its held keys differs from its plan query without the failing rows (%s):\n    missing %d %v\n    extra   %d %v",
			name, query, d.Missing, d.MissingSample, d.Extra, d.ExtraSample))
	}
	return problems, nil
}

// exceptAllArgs counts the rows of left EXCEPT ALL right (both may read
// $1, keys) and samples a few, as selfcheck does.
func exceptAllArgs(ctx context.Context, tx pgx.Tx, left, right string, keys []string) (int64, []string, error) {
	sql := fmt.Sprintf(`WITH d AS MATERIALIZED ((%s) EXCEPT ALL (%s))
SELECT (SELECT count(*) FROM d),
       ARRAY(SELECT s.r FROM (SELECT d::text AS r FROM d) AS s ORDER BY s.r LIMIT %d)`, left, right, selfcheck.SampleSize)
	var n int64
	var sample []string
	if err := tx.QueryRow(ctx, sql, keys).Scan(&n, &sample); err != nil {
		return 0, nil, err
	}
	if len(sample) == 0 {
		sample = nil
	}
	return n, sample, nil
}

// heldKeys lists, per transform name, the keys it holds (each joined by
// keySep).
func (r *run) heldKeys(ctx context.Context) (map[string][]string, error) {
	es, err := r.tr.PoisonedSince(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("held keys: %w", err)
	}
	out := map[string][]string{}
	for _, e := range es {
		out[e.Transform] = append(out[e.Transform], strings.Join(e.Key, keySep))
	}
	return out, nil
}

// setDiff is a's keys not in b, sorted, rendered for a message.
func setDiff(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, showKey(k))
		}
	}
	sort.Strings(out)
	return out
}

func keyList(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, showKey(k))
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, " ")
}

// showKey renders a joined key as the engine's key text does.
func showKey(k string) string {
	vs := strings.Split(k, keySep)
	if len(vs) == 1 {
		return oneLine(vs[0], 40)
	}
	for i, v := range vs {
		vs[i] = oneLine(v, 40)
	}
	return "(" + strings.Join(vs, ", ") + ")"
}
