package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/fault"
)

// Drift is how the database no longer matches a transform's plan after DDL
// on what it reads (issue: DDL drift): a source dropped, renamed or
// replaced, its key changed, a column it reads dropped or renamed (the
// definition no longer plans), or a column it stores retyped.
type Drift struct {
	// Kind is the capture_failure kind it pauses with: "capture" for DDL
	// on what the transform reads, "halt" when the definition fails to
	// plan for another reason (a function it calls dropped).
	Kind string
	// Error names the change and the fix.
	Error string
	// Columns are the columns involved (source columns for a dropped or
	// renamed one, stored columns for a type change).
	Columns []string
	// Retype lists the stored columns whose type must follow the source;
	// set only when that is the whole drift (RESUME re-types them).
	Retype []Retype
}

// Retype is one stored column whose type no longer is what the
// definition computes.
type Retype struct {
	Table  Rel
	Column string
	From   string
	To     string
	// set is the plan's type of the column, updated once the table
	// follows; also are the same column's copies in other stored tables
	// (an aggregate's group column in its target or state table).
	set  *string
	also []storedCol
}

// storedCol is a column of a stored table.
type storedCol struct {
	table  Rel
	column string
}

// undefinedColumn finds the column a 42703 message names.
var undefinedColumn = regexp.MustCompile(`column "?([^" ]+?)"? does not exist`)

// CheckDrift compares the plan with the database now. It reads only (the
// describe runs in a savepoint) and returns nil when nothing drifted.
func CheckDrift(ctx context.Context, db DB, name string, p *Plan) (*Drift, error) {
	if d, err := viewDrift(ctx, db, name, p); d != nil || err != nil {
		return d, err
	}
	for _, src := range p.Tables() {
		d, err := sourceDrift(ctx, db, name, src)
		if d != nil || err != nil {
			return d, err
		}
	}
	rt, err := storedTypes(ctx, db, p)
	var pe *pgconn.PgError
	// Only what no retry cures is drift: a lost session or a cancel is
	// the caller's to retry.
	if errors.As(err, &pe) && fault.Classify(err) == fault.Halt {
		d := &Drift{Kind: catalog.FailureHalt, Error: fmt.Sprintf("transform %q: its definition no longer plans: %s (SQLSTATE %s); restore what it reads or calls (then RESUME TRANSFORM %s), or CREATE OR REPLACE TRANSFORM %s with a definition for the new schema",
			name, pe.Message, pe.Code, name, name)}
		if m := undefinedColumn.FindStringSubmatch(pe.Message); pe.Code == "42703" && m != nil {
			d.Kind = catalog.FailureCapture
			col := m[1]
			if i := strings.LastIndexByte(col, '.'); i >= 0 {
				col = col[i+1:]
			}
			d.Columns = []string{col}
		}
		return d, nil
	}
	if err != nil {
		return nil, err
	}
	if len(rt) == 0 {
		return nil, nil
	}
	d := &Drift{Kind: catalog.FailureCapture, Retype: rt}
	var what []string
	for _, r := range rt {
		d.Columns = append(d.Columns, r.Column)
		what = append(what, fmt.Sprintf("%s.%s from %s to %s", r.Table.Ident(), pgx.Identifier{r.Column}.Sanitize(), r.From, r.To))
	}
	d.Error = fmt.Sprintf("transform %q: a source column it reads changed type, so stored columns must follow: %s; RESUME TRANSFORM %s re-types them (rewriting those tables) and rebuilds",
		name, strings.Join(what, ", "), name)
	return d, nil
}

// sourceDrift checks one source's identity and key.
func sourceDrift(ctx context.Context, db DB, name string, src Source) (*Drift, error) {
	var schema, rel string
	var now uint32
	err := db.QueryRow(ctx, `SELECT n.nspname, c.relname, coalesce(to_regclass($2)::oid, 0) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, src.OID, src.Ident()).Scan(&schema, &rel, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := db.QueryRow(ctx, `SELECT coalesce(to_regclass($1)::oid, 0)`, src.Ident()).Scan(&now); err != nil {
			return nil, err
		}
		if now != 0 {
			return &Drift{Kind: catalog.FailureCapture, Error: fmt.Sprintf("transform %q: its source table %s was dropped and created again (a new table under the old name); DROP TRANSFORM %s and CREATE it again over the new table",
				name, src.Ident(), name)}, nil
		}
		return &Drift{Kind: catalog.FailureCapture, Error: fmt.Sprintf("transform %q: its source table %s was dropped; restore it and DROP TRANSFORM %s and CREATE it again, or DROP TRANSFORM %s",
			name, src.Ident(), name, name)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up source %s: %w", src.Ident(), err)
	}
	if schema != src.Schema || rel != src.Name {
		return &Drift{Kind: catalog.FailureCapture, Error: fmt.Sprintf("transform %q: its source table %s was renamed to %s; rename it back (then RESUME TRANSFORM %s), or CREATE OR REPLACE TRANSFORM %s over the new name",
			name, src.Ident(), pgx.Identifier{schema, rel}.Sanitize(), name, name)}, nil
	}
	key, err := sourceKey(ctx, db, src.OID)
	if err != nil {
		return nil, err
	}
	same := len(key) == len(src.Key)
	for i := 0; same && i < len(key); i++ {
		same = key[i].Name == src.Key[i].Name && key[i].Type == src.Key[i].Type
	}
	if !same {
		var cols []string
		for _, k := range src.Key {
			cols = append(cols, k.Name)
		}
		for _, k := range key {
			if !slices.Contains(cols, k.Name) {
				cols = append(cols, k.Name)
			}
		}
		return &Drift{Kind: catalog.FailureCapture, Columns: cols, Error: fmt.Sprintf("transform %q: the primary key of its source table %s changed (was %s); restore it (then RESUME TRANSFORM %s), or DROP TRANSFORM %s and CREATE it again",
			name, src.Ident(), keyNames(src.Key), name, name)}, nil
	}
	return nil, nil
}

func keyNames(cols []Col) string {
	var out []string
	for _, c := range cols {
		out = append(out, c.Name+" "+c.Type)
	}
	return "(" + strings.Join(out, ", ") + ")"
}

// storedTypes describes what the definition computes for each stored
// column — the target's visible columns from the query itself, and for an
// aggregate the ledger's group and argument columns from their
// expressions — and lists those whose stored type differs. The describe
// runs under the plan's search_path inside a savepoint.
func storedTypes(ctx context.Context, db DB, p *Plan) (out []Retype, err error) {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_drift`); err != nil {
		return nil, err
	}
	defer func() {
		if _, rerr := db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_drift`); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if _, err := db.Exec(ctx, `SELECT set_config('search_path', $1, true)`, p.SearchPath); err != nil {
		return nil, err
	}
	if err := p.ApplySettings(ctx, db); err != nil {
		return nil, err
	}
	type stored struct {
		table Rel
		set   *string
		name  string
		typ   string
		also  []storedCol
	}
	var want []stored
	var exprs []string
	if p.Shape == ShapeRow {
		for i := range p.Visible {
			want = append(want, stored{p.Target, &p.Cols[i].Type, p.Cols[i].Name, p.Cols[i].Type, nil})
		}
		outs, err := describe(ctx, db, p.QuerySQL())
		if err != nil {
			return nil, err
		}
		for i, w := range want {
			if i < len(outs) && outs[i].name != w.typ {
				out = append(out, Retype{Table: w.table, Column: w.name, From: w.typ, To: outs[i].name, set: w.set})
			}
		}
		return out, nil
	}
	outs, err := describe(ctx, db, p.QuerySQL())
	if err != nil {
		return nil, err
	}
	// The target's visible columns have the query's types: a projection
	// over the state, or the groups and aggregates themselves.
	for i, name := range p.Visible {
		var set *string
		switch {
		case p.State != nil && i < len(p.Project):
			set = &p.Project[i].Type
		default:
			for j := range p.Groups {
				if p.Groups[j].Name == name {
					set = &p.Groups[j].Type
				}
			}
			for j := range p.Aggs {
				if p.Aggs[j].Name == name {
					set = &p.Aggs[j].Type
				}
			}
		}
		if set != nil && i < len(outs) && outs[i].name != *set {
			out = append(out, Retype{Table: p.Target, Column: name, From: *set, To: outs[i].name, set: set})
		}
	}
	// A state table's aggregates kept by deltas follow their argument.
	if p.State != nil {
		for j := range p.Aggs {
			a := &p.Aggs[j]
			if a.Arg < 0 || a.Mode == ModeRecompute {
				continue
			}
			ts, err := describe(ctx, db, "SELECT "+a.Func+"("+p.Args[a.Arg].Expr+") FROM "+p.FromSQL())
			if err != nil {
				return nil, err
			}
			if ts[0].name != a.Type {
				out = append(out, Retype{Table: *p.State, Column: a.Name, From: a.Type, To: ts[0].name, set: &a.Type})
			}
		}
	}
	for i := range p.Groups {
		g := &p.Groups[i]
		// Its copy in the target (or state) table follows with it; a
		// visible group column in the target is also checked above.
		want = append(want, stored{*p.Ledger, &g.Type, fmt.Sprintf("__g%d", i), g.Type, []storedCol{{p.aggTarget(), g.Name}}})
		exprs = append(exprs, g.Expr)
	}
	for i := range p.Args {
		want = append(want, stored{*p.Ledger, &p.Args[i].Type, p.Args[i].Name, p.Args[i].Type, nil})
		exprs = append(exprs, p.Args[i].Expr)
	}
	if len(exprs) == 0 {
		return nil, nil
	}
	// Grouping-set columns read the sets' VALUES list (ADR 0031).
	outs, err = describe(ctx, db, "SELECT "+strings.Join(exprs, ", ")+" FROM "+p.FromSQL()+p.setsJoin())
	if err != nil {
		return nil, err
	}
	for i, w := range want {
		if outs[i].name != w.typ {
			out = append(out, Retype{Table: w.table, Column: w.name, From: w.typ, To: outs[i].name, set: w.set, also: w.also})
		}
	}
	return out, nil
}

// ApplyRetype makes the stored columns of d.Retype follow their new types
// (ALTER TABLE … TYPE, rewriting the table where PostgreSQL must) and the
// plan with them; an aggregate's group columns change in the ledger and in
// its target and state table. The caller saves the plan and rebuilds.
func ApplyRetype(ctx context.Context, db DB, p *Plan, d *Drift) error {
	for _, r := range d.Retype {
		for _, c := range append([]storedCol{{r.Table, r.Column}}, r.also...) {
			var has bool
			if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)`,
				c.table.Ident(), c.column).Scan(&has); err != nil {
				return err
			}
			if !has {
				continue
			}
			col := pgx.Identifier{c.column}.Sanitize()
			if _, err := db.Exec(ctx, `ALTER TABLE `+c.table.Ident()+` ALTER COLUMN `+col+` TYPE `+r.To+` USING `+col+`::`+r.To); err != nil {
				return fmt.Errorf("re-type %s.%s to %s: %w", c.table.Ident(), col, r.To, err)
			}
		}
		*r.set = r.To
	}
	return nil
}
