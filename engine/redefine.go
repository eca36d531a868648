package engine

import (
	"context"
	"fmt"
	"strings"
)

// Redefinition (CREATE OR REPLACE TRANSFORM): the new definition builds
// into a shadow table while the old target serves; once it is live, Swap
// replaces the old target by the shadow in one transaction. Readers block
// on the old table's lock for the swap and then see the new table whole,
// never a partial or empty one. Grants, indexes the user added and views
// that read the target are carried to the new table; what cannot be (a
// column it read is gone) is reported, and checked already when the
// redefinition is applied (CheckCarry).

// dependentView is a view or materialized view that reads a target.
type dependentView struct {
	name    string // qualified, quoted
	kind    string // "v" or "m"
	def     string
	grants  []string
	comment *string
}

// carried is what a target has that its replacement must get again.
type carried struct {
	views   []dependentView // in creation order
	indexes []struct{ name, def string }
	grants  []string // GRANT statements for the target
	comment *string
}

// ownIndexComment marks the indexes trellis-repl creates on a target, so
// a swap carries only the ones the user added.
const ownIndexComment = "trellis-repl: lineage index"

// collectCarried reads what the target t has: dependent views (those of
// views too), user indexes, grants and its comment.
func collectCarried(ctx context.Context, db DB, t string) (*carried, error) {
	c := &carried{}
	var err error
	if c.grants, err = grantsOn(ctx, db, t); err != nil {
		return nil, err
	}
	if err := db.QueryRow(ctx, `SELECT obj_description($1::regclass, 'pg_class')`, t).Scan(&c.comment); err != nil {
		return nil, fmt.Errorf("read comment of %s: %w", t, err)
	}
	rows, err := db.Query(ctx, `SELECT quote_ident(ci.relname), pg_get_indexdef(i.indexrelid) FROM pg_index i
		JOIN pg_class ci ON ci.oid = i.indexrelid
		WHERE i.indrelid = $1::regclass
		  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
		  AND obj_description(i.indexrelid, 'pg_class') IS DISTINCT FROM $2
		ORDER BY ci.relname`, t, ownIndexComment)
	if err != nil {
		return nil, fmt.Errorf("read indexes of %s: %w", t, err)
	}
	for rows.Next() {
		var x struct{ name, def string }
		if err := rows.Scan(&x.name, &x.def); err != nil {
			rows.Close()
			return nil, err
		}
		c.indexes = append(c.indexes, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Views reading the target, then views reading those, level by level.
	seen := map[string]bool{}
	frontier := []string{t}
	for len(frontier) > 0 {
		var next []string
		for _, rel := range frontier {
			rows, err := db.Query(ctx, `SELECT DISTINCT v.oid::regclass::text, v.relkind::text, pg_get_viewdef(v.oid), obj_description(v.oid, 'pg_class')
				FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class
				WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
				  AND d.refobjid = $1::regclass AND v.oid <> $1::regclass ORDER BY 1`, rel)
			if err != nil {
				return nil, fmt.Errorf("read views on %s: %w", rel, err)
			}
			for rows.Next() {
				var v dependentView
				if err := rows.Scan(&v.name, &v.kind, &v.def, &v.comment); err != nil {
					rows.Close()
					return nil, err
				}
				if seen[v.name] {
					// Read by a view found earlier too: it must come after it.
					for i := range c.views {
						if c.views[i].name == v.name {
							c.views = append(c.views[:i], c.views[i+1:]...)
							break
						}
					}
				}
				seen[v.name] = true
				c.views = append(c.views, v)
				next = append(next, v.name)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
		frontier = next
	}
	for i := range c.views {
		if c.views[i].grants, err = grantsOn(ctx, db, c.views[i].name); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// grantsOn lists the GRANT statements that recreate the privileges others
// hold on a relation (table-level and per column).
func grantsOn(ctx context.Context, db DB, rel string) ([]string, error) {
	rows, err := db.Query(ctx, `
		SELECT format('GRANT %s ON %s TO %s%s', a.privilege_type, $1::text,
		       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
		       CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
		FROM pg_class c, aclexplode(c.relacl) a
		WHERE c.oid = $1::regclass AND a.grantee <> c.relowner
		UNION ALL
		SELECT format('GRANT %s (%s) ON %s TO %s%s', a.privilege_type, quote_ident(att.attname), $1::text,
		       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
		       CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
		FROM pg_class c JOIN pg_attribute att ON att.attrelid = c.oid AND att.attnum > 0 AND NOT att.attisdropped,
		     aclexplode(att.attacl) a
		WHERE c.oid = $1::regclass AND a.grantee <> c.relowner
		ORDER BY 1`, rel)
	if err != nil {
		return nil, fmt.Errorf("read grants on %s: %w", rel, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// attempt runs one statement in a savepoint and reports its error as a
// note (the statement's effect is kept when it succeeds).
func attempt(ctx context.Context, db DB, what, sql string) (string, error) {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_carry`); err != nil {
		return "", err
	}
	if _, err := db.Exec(ctx, sql); err != nil {
		if _, rerr := db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_carry`); rerr != nil {
			return "", rerr
		}
		return what + " was not carried over: " + pgMessage(err), nil
	}
	_, err := db.Exec(ctx, `RELEASE SAVEPOINT trellis_carry`)
	return "", err
}

// pgMessage is PostgreSQL's sentence for an error, or the error's text.
func pgMessage(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, " (SQLSTATE"); i > 0 {
		msg = msg[:i]
	}
	return strings.TrimPrefix(msg, "ERROR: ")
}

// Swap replaces old's target by new's (built into a shadow table) in the
// caller's transaction and returns what was not carried over. Afterwards
// new.Target names the old target's table; old's ledger and state are gone.
func Swap(ctx context.Context, db DB, old, new *Plan) ([]string, error) {
	oldT := old.Target.Ident()
	if _, err := db.Exec(ctx, "LOCK TABLE "+oldT+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return nil, fmt.Errorf("lock %s for the swap: %w", oldT, err)
	}
	c, err := collectCarried(ctx, db, oldT)
	if err != nil {
		return nil, err
	}
	for i := len(c.views) - 1; i >= 0; i-- {
		kind := "VIEW"
		if c.views[i].kind == "m" {
			kind = "MATERIALIZED VIEW"
		}
		if _, err := db.Exec(ctx, "DROP "+kind+" IF EXISTS "+c.views[i].name+" CASCADE"); err != nil {
			return nil, fmt.Errorf("drop view %s for the swap: %w", c.views[i].name, err)
		}
	}
	if err := Uninstall(ctx, db, old); err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, "ALTER TABLE "+new.Target.Ident()+" RENAME TO "+ident(old.Target.Name)); err != nil {
		return nil, fmt.Errorf("rename %s to %s: %w", new.Target.Ident(), oldT, err)
	}
	new.Target.Name = old.Target.Name
	var notes []string
	note := func(what, sql string) error {
		n, err := attempt(ctx, db, what, sql)
		if n != "" {
			notes = append(notes, n)
		}
		return err
	}
	for _, ix := range c.indexes {
		if err := note("index "+ix.name, ix.def); err != nil {
			return nil, err
		}
	}
	for _, g := range c.grants {
		if err := note("privilege ("+g+")", g); err != nil {
			return nil, err
		}
	}
	if c.comment != nil {
		if _, err := db.Exec(ctx, "COMMENT ON TABLE "+oldT+" IS "+quoteLiteral(*c.comment)); err != nil {
			return nil, err
		}
	}
	failed := map[string]bool{}
	for _, v := range c.views {
		kind := "VIEW"
		if v.kind == "m" {
			kind = "MATERIALIZED VIEW"
		}
		n, err := attempt(ctx, db, strings.ToLower(kind)+" "+v.name, "CREATE "+kind+" "+v.name+" AS "+strings.TrimSuffix(strings.TrimSpace(v.def), ";"))
		if err != nil {
			return nil, err
		}
		if n != "" {
			notes = append(notes, n)
			failed[v.name] = true
			continue
		}
		for _, g := range v.grants {
			if err := note("privilege ("+g+")", g); err != nil {
				return nil, err
			}
		}
		if v.comment != nil {
			if _, err := db.Exec(ctx, "COMMENT ON "+kind+" "+v.name+" IS "+quoteLiteral(*v.comment)); err != nil {
				return nil, err
			}
		}
	}
	return notes, nil
}

// CheckCarry says, when a redefinition is applied, what its swap will not
// be able to carry over: it performs the swap against the freshly built
// (empty) shadow inside a savepoint and undoes it.
func CheckCarry(ctx context.Context, db DB, old, new *Plan) ([]string, error) {
	if _, err := db.Exec(ctx, `SAVEPOINT trellis_check_carry`); err != nil {
		return nil, err
	}
	trial := *new
	notes, err := Swap(ctx, db, old, &trial)
	if _, rerr := db.Exec(ctx, `ROLLBACK TO SAVEPOINT trellis_check_carry`); rerr != nil && err == nil {
		err = rerr
	}
	return notes, err
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
