package trellis

// dump.go owns schema dumps (ADR 0040): Dump writes the instance's
// definitions as a script `apply -f` replays, in dependency order;
// RestoreSQL is the section appended to a `pg_dump --schema-only` file so
// that restoring the pair gives a working instance; applyRestored is what
// Open does with the definitions a restore queued.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/engine"
	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/define"
	"github.com/trellis-repl/trellis-repl/internal/terr"
)

// Dump returns the instance's definitions as a script that `trellis-repl
// apply -f` (or Apply) replays to recreate them on another database with
// the same source tables: one CREATE TRANSFORM per transform, names
// qualified, each after every transform whose target it reads; a
// redefinition still building is written in place of the definition it
// replaces, and a transform a user paused is paused again at the end.
// Inner levels are not written: their owner's definition makes them.
func (t *Trellis) Dump(ctx context.Context) (string, error) {
	var script string
	err := t.bounded(ctx, "Dump", func(ctx context.Context, tx pgx.Tx) error {
		ts, err := t.cat.List(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		script, err = dumpScript(t.cat.Schema, ts)
		return err
	})
	return script, err
}

// dumpScript renders ts as a replayable script.
func dumpScript(schema string, ts []*catalog.Transform) (string, error) {
	order, err := dumpOrder(ts)
	if err != nil {
		return "", err
	}
	var b, paused strings.Builder
	fmt.Fprintf(&b, "-- trellis-repl definitions of instance %s (replay with `trellis-repl apply -f`)\n", schema)
	if len(order) == 0 {
		b.WriteString("-- (no transforms)\n")
	}
	for _, d := range order {
		p, err := engine.Decode(d.def.Plan)
		if err != nil {
			return "", terr.Wrap(terr.Internal, err, "transform %q has an unreadable plan: %v", d.tr.Name, err)
		}
		name := define.QuoteName(d.tr.Schema, d.tr.Name)
		if d.def != d.tr {
			fmt.Fprintf(&b, "-- %s is being redefined: the definition below replaces it once built\n", name)
		}
		opt := ""
		if p.NoSourceIndex {
			opt = " WITHOUT SOURCE INDEX"
		}
		fmt.Fprintf(&b, "CREATE TRANSFORM %s%s AS %s;\n", name, opt, d.def.Definition)
		if d.tr.State == catalog.StatePaused && d.tr.PausedBy == "user" {
			fmt.Fprintf(&paused, "PAUSE TRANSFORM %s;\n", name)
		}
	}
	b.WriteString(paused.String())
	return b.String(), nil
}

// dumped is one transform of a dump: tr is the transform users name,
// def the row whose definition recreates it (tr, or its redefinition).
type dumped struct {
	tr, def *catalog.Transform
}

// dumpOrder lists the transforms users defined, each after those whose
// targets it (or one of its inner levels) reads, else in creation order.
func dumpOrder(ts []*catalog.Transform) ([]dumped, error) {
	plans := map[int64]*engine.Plan{}
	byID := map[int64]*catalog.Transform{}
	for _, tr := range ts {
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			return nil, terr.Wrap(terr.Internal, err, "transform %q has an unreadable plan: %v", tr.Name, err)
		}
		plans[tr.ID], byID[tr.ID] = p, tr
	}
	// root is the transform a user names for a row: itself, the owner of
	// an inner level, the transform a redefinition replaces.
	var root func(tr *catalog.Transform) *catalog.Transform
	root = func(tr *catalog.Transform) *catalog.Transform {
		switch {
		case tr.Owner != 0 && byID[tr.Owner] != nil:
			return root(byID[tr.Owner])
		case tr.Replaces != 0 && byID[tr.Replaces] != nil:
			return root(byID[tr.Replaces])
		}
		return tr
	}
	entries := map[int64]*dumped{}
	var ids []int64
	for _, tr := range ts {
		if tr.Owner == 0 && tr.Replaces == 0 {
			entries[tr.ID] = &dumped{tr: tr, def: tr}
			ids = append(ids, tr.ID)
		}
	}
	for _, tr := range ts {
		if tr.Owner == 0 && tr.Replaces != 0 {
			if e := entries[root(tr).ID]; e != nil {
				e.def = tr
			}
		}
	}
	// What each row's target belongs to, and what each user transform
	// reads through the rows that make it now (its definition's and the
	// levels of that definition).
	owner := map[string]int64{}
	for _, tr := range ts {
		owner[plans[tr.ID].Target.Ident()] = root(tr).ID
	}
	deps := map[int64][]int64{}
	for _, id := range ids {
		e := entries[id]
		for _, tr := range ts {
			if tr != e.def && tr.Owner != e.def.ID {
				continue // not the definition in force, nor one of its levels
			}
			for _, src := range plans[tr.ID].Sources {
				if up, ok := owner[src.Ident()]; ok && up != id && !slices.Contains(deps[id], up) {
					deps[id] = append(deps[id], up)
				}
			}
		}
	}
	var out []dumped
	done := map[int64]bool{}
	for len(out) < len(ids) {
		progressed := false
		for _, id := range ids {
			if done[id] {
				continue
			}
			ready := true
			for _, d := range deps[id] {
				ready = ready && (done[d] || entries[d] == nil)
			}
			if ready {
				done[id], progressed = true, true
				out = append(out, *entries[id])
			}
		}
		if !progressed {
			return nil, terr.New(terr.Internal, "the transforms' reads form a cycle, which definitions refuse; `trellis-repl definitions` lists them")
		}
	}
	return out, nil
}

// RestoreSQL is the section `trellis-repl dump --append-to FILE` appends
// to a `pg_dump --schema-only` file: restored after it (psql -f), it
// drops what the dump restored of the instance (its schema, with the
// capture triggers and functions; the targets; its publication), installs
// the catalog empty at this binary's version and queues the definitions
// (Dump) in it. The first Open of the restored database that may write
// applies them, and Run builds every transform over the restored rows.
// Views on targets are not restored with them: create them again after.
func (t *Trellis) RestoreSQL(ctx context.Context) (string, error) {
	var out string
	err := t.bounded(ctx, "RestoreSQL", func(ctx context.Context, tx pgx.Tx) error {
		ts, err := t.cat.List(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "read the catalog: %v", err)
		}
		script, err := dumpScript(t.cat.Schema, ts)
		if err != nil {
			return err
		}
		out = restoreSection(t.cat, ts, script)
		return nil
	})
	return out, err
}

// restoreSection renders the SQL of RestoreSQL.
func restoreSection(cat catalog.Catalog, ts []*catalog.Transform, script string) string {
	var b strings.Builder
	s := pgx.Identifier{cat.Schema}.Sanitize()
	fmt.Fprintf(&b, "\n-- trellis-repl: restore instance %s (catalog version %d).\n", cat.Schema, catalog.Current())
	b.WriteString("-- Drops what the dump above restored of the instance, installs its catalog empty and queues\n")
	b.WriteString("-- its definitions: the first Open of this database that may write (trellis-repl run, apply)\n")
	b.WriteString("-- applies them, and the runner builds every transform. Views on targets must be made again.\n")
	b.WriteString("SET client_min_messages = warning;\n")
	fmt.Fprintf(&b, "DROP SCHEMA IF EXISTS %s CASCADE;\n", s)
	var dropped []string
	for _, tr := range ts {
		p, err := engine.Decode(tr.Plan)
		if err != nil {
			continue // dumpScript refused it already
		}
		for _, r := range []*engine.Rel{&p.Target, p.Ledger, p.State} {
			if r != nil && r.Schema != cat.Schema && !slices.Contains(dropped, r.Ident()) {
				dropped = append(dropped, r.Ident())
			}
		}
	}
	for _, d := range dropped {
		fmt.Fprintf(&b, "DROP TABLE IF EXISTS %s;\n", d)
	}
	fmt.Fprintf(&b, "DROP PUBLICATION IF EXISTS %s;\n", pgx.Identifier{cat.PublicationName()}.Sanitize())
	b.WriteString(cat.InstallSQL())
	tag := "$trellis_restore$"
	for strings.Contains(script, tag) {
		tag = tag[:len(tag)-1] + "_$"
	}
	fmt.Fprintf(&b, "INSERT INTO %s (script) VALUES (%s\n%s%s);\n", cat.T("restore_scripts"), tag, script, tag)
	b.WriteString("RESET client_min_messages;\n")
	return b.String()
}

// applyRestored applies, in one transaction, the definition scripts a
// restore queued (RestoreSQL), and deletes them: the instance then has
// its transforms, which Run builds over the restored rows. A script that
// fails stays queued, and the error says how to give it up.
func (t *Trellis) applyRestored(ctx context.Context) error {
	return t.inTx(ctx, func(tx pgx.Tx) error {
		if err := t.lockDefinitions(ctx, tx); err != nil {
			return err
		}
		scripts, err := t.cat.TakeRestoreScripts(ctx, tx)
		if err != nil {
			return terr.Wrap(terr.Unavailable, err, "%v", err)
		}
		for _, r := range scripts {
			sts, err := engine.ParseStatements(r.Script)
			if err == nil {
				_, err = t.applyStatements(ctx, tx, sts)
			}
			if err != nil {
				return terr.Wrap(terr.CodeOf(err), err, "the definitions a restore queued (%s, id %d) do not apply: %v; fix the database they read, or give them up with DELETE FROM %s WHERE id = %d",
					t.cat.T("restore_scripts"), r.ID, err, t.cat.T("restore_scripts"), r.ID)
			}
		}
		return nil
	})
}
