package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PrivilegeError says which role lacks what on which object, and the
// statements that would give it. Capture reports it instead of the
// server's 42501 so that it is never taken for a data error.
type PrivilegeError struct {
	// Role may not do Lacks ("create triggers on t", …) on Object.
	Role, Object, Lacks string
	// Fixes are statements (or settings) any one of which lets capture work.
	Fixes []string
	Err   error
}

// Error is the sentence the runner records and logs.
func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("role %s may not %s; fix: %s", quoteIdent(e.Role), e.Lacks, strings.Join(e.Fixes, " — or — "))
}

// Unwrap is the server's error.
func (e *PrivilegeError) Unwrap() error { return e.Err }

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func isPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// tableRights are what the current role may do with a table.
type tableRights struct {
	Role, Owner      string
	Owns, CanTrigger bool
}

// rightsOn reads the current role's rights on tb.
func rightsOn(ctx context.Context, q Querier, tb Table) (tableRights, error) {
	var r tableRights
	err := q.QueryRow(ctx, `SELECT current_user::text, pg_get_userbyid(c.relowner)::text, pg_has_role(c.relowner, 'USAGE'),
			has_table_privilege(c.oid, 'TRIGGER')
		FROM pg_class c WHERE c.oid = $1`, tb.OID).Scan(&r.Role, &r.Owner, &r.Owns, &r.CanTrigger)
	if err != nil {
		return r, fmt.Errorf("read the privileges on %s: %w", tb.Ident().Sanitize(), err)
	}
	return r, nil
}

// publishError is the privilege error of a role that may not add tb to
// publication pub.
func publishError(r tableRights, tb Table, pub string, err error) *PrivilegeError {
	t := tb.Ident().Sanitize()
	return &PrivilegeError{Role: r.Role, Object: t, Lacks: "add " + t + " to publication " + quoteIdent(pub) + " (only the owner of a table may)",
		Fixes: []string{
			fmt.Sprintf("as the owner %s: CREATE PUBLICATION <name> FOR TABLE %s (or ALTER PUBLICATION <name> ADD TABLE %s), then run trellis-repl with --publication <name>", quoteIdent(r.Owner), t, t),
			fmt.Sprintf("GRANT %s TO %s; (membership in the owning role: see the README's privilege setups for its risk)", quoteIdent(r.Owner), quoteIdent(r.Role)),
			"--capture=trigger with GRANT TRIGGER ON " + t + " TO " + quoteIdent(r.Role) + ";",
		}, Err: err}
}

// triggerError is the privilege error of a role that may not create
// triggers on tb.
func triggerError(r tableRights, tb Table, err error) *PrivilegeError {
	t := tb.Ident().Sanitize()
	return &PrivilegeError{Role: r.Role, Object: t, Lacks: "create triggers on " + t,
		Fixes: []string{fmt.Sprintf("GRANT TRIGGER ON %s TO %s;", t, quoteIdent(r.Role))}, Err: err}
}

// Capturable says which capture paths the current role's privileges allow
// for tables: publishing them (it owns every one) and triggers on them
// (it owns or has TRIGGER on every one), and names a table that blocks
// publishing ("" when none does).
func Capturable(ctx context.Context, q Querier, tables []Table) (publish, trigger bool, blocker string, err error) {
	publish, trigger = true, true
	for _, tb := range tables {
		r, err := rightsOn(ctx, q, tb)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // gone: its transform is paused, and nothing captures it
		}
		if err != nil {
			return false, false, "", err
		}
		if !r.Owns && publish {
			publish, blocker = false, tb.Ident().Sanitize()+" (owned by "+quoteIdent(r.Owner)+")"
		}
		trigger = trigger && (r.Owns || r.CanTrigger)
	}
	return publish, trigger, blocker, nil
}
