package trellis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestAlterTransform: ALTER TRANSFORM refuses a changed type, a dropped
// column another transform reads, a clash, a missing column and an edit
// of more than computed columns, changing nothing; an accepted edit (a
// row transform's columns added, re-expressed, cancelled; an aggregate's
// projection) starts a column build, shown in status, during which keys the
// build passed keep changing, survives a restart of the runner, bumps the version, and
// ends live with every target equal to its query; a dropped column is gone
// once built, and DROP then ADD replaces a column with a new type (ADR
// 0041). With the planted bug column_build_skips_new_changes the changes
// during the build are written with the old expression and the comparison
// fails.
func TestAlterTransform(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testAlterTransform)
}

func testAlterTransform(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	ctx := context.Background()
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, customer int NOT NULL, amount numeric(12,2) NOT NULL)`)
	e.exec(`INSERT INTO orders SELECT g, g % 50, g % 97 FROM generate_series(1, 150000) g`)
	e.apply(`CREATE TRANSFORM big AS SELECT id, customer, amount FROM orders WHERE amount > 5;
CREATE TRANSFORM per_customer AS SELECT customer, sum(amount) AS total, count(*) AS n, sum(amount) / count(*) AS mean FROM orders GROUP BY customer;
CREATE TRANSFORM big_reader AS SELECT id, customer FROM big`)
	e.start()
	e.converge("after the build")

	def := func(name string) trellis.Definition {
		t.Helper()
		ds, err := e.tr.Definitions(ctx, name)
		if err != nil || len(ds) != 1 {
			t.Fatalf("definition of %s: %v %v", name, ds, err)
		}
		return ds[0]
	}
	before := def("big")
	for _, c := range []struct {
		sql  string
		code trellis.ErrorCode
		want string
	}{
		{`ALTER TRANSFORM big ALTER amount AS amount::text`, trellis.CodeValidation, `column "amount" is numeric(12,2) and its new expression is text`},
		{`ALTER TRANSFORM big DROP customer`, trellis.CodeConflict, `big_reader reads big.customer`},
		{`ALTER TRANSFORM big ADD customer AS 1`, trellis.CodeConflict, `already has a column "customer"`},
		{`ALTER TRANSFORM big DROP nope`, trellis.CodeNotFound, `has no column "nope"`},
		{`ALTER TRANSFORM big ADD n AS count(*)`, trellis.CodeValidation, `GROUP BY`},
		{`ALTER TRANSFORM big ADD n AS row_number() OVER (ORDER BY id)`, trellis.CodeValidation, `changes more than its computed columns`},
		{`ALTER TRANSFORM per_customer ADD biggest AS max(amount)`, trellis.CodeValidation, `changes more than its computed columns`},
		{`ALTER TRANSFORM nothere ADD x AS 1`, trellis.CodeNotFound, `does not exist`},
	} {
		_, err := e.tr.Apply(ctx, c.sql)
		if trellis.CodeOf(err) != c.code || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: %v, want a %s error containing %q", c.sql, err, c.code, c.want)
		}
	}
	if after := def("big"); after.SQL != before.SQL || strings.Join(after.Columns, ",") != strings.Join(before.Columns, ",") || after.Version != 1 {
		t.Fatalf("refused edits changed big: %+v", after)
	}
	if n := e.queryInt(`SELECT count(*) FROM pg_attribute WHERE attrelid = 'big'::regclass AND attnum > 0 AND NOT attisdropped`); n != int64(len(before.Columns)) {
		t.Fatalf("refused edits left big with %d columns", n)
	}

	res, err := e.tr.Apply(ctx, `ALTER TRANSFORM big ADD doubled AS amount * 2, ALTER amount AS amount + 1, ADD z AS 1, DROP z;
ALTER TRANSFORM per_customer ALTER mean AS round(sum(amount) / count(*), 2), ADD total2 AS sum(amount) * 2`)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Action != "altered" || !strings.Contains(strings.Join(res[0].Notes, "; "), "added: doubled; changed: amount") {
		t.Fatalf("ALTER result: %+v", res[0])
	}
	// Keys the build has passed (its first chunk: the lowest keys) change
	// again while it goes on, and only in its first part, so that their
	// last change is drained while it still runs: they must get the new
	// expression.
	deadline := time.Now().Add(convergeTimeout)
	passed := 0
	for i := 0; ; i++ {
		st := statusOf(t, e, "big")
		if st.State == "live" {
			break
		}
		if st.State == "backfilling" && st.Build != nil && st.Build.RowsDone > 0 && st.Build.RowsDone <= 60000 {
			e.exec(fmt.Sprintf(`UPDATE orders SET amount = amount + 1 WHERE id <= 50 AND id %% 3 = %d`, i%3))
			passed++
		}
		if time.Now().After(deadline) {
			t.Fatalf("the column build did not end: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if passed == 0 {
		t.Fatal("status never showed the column build under way (backfilling, rows done); make the table larger")
	}
	e.converge("after the column builds")
	if d := def("big"); d.Version != 2 || strings.Join(d.Columns, ",") != "id,customer,amount,doubled" {
		t.Fatalf("big after ALTER: version %d, columns %v", d.Version, d.Columns)
	}

	// DROP then ADD replaces a column, with a new type; a plain DROP goes
	// once built.
	// The runner stops in the middle of the builds and starts again: they
	// go on from their saved cursors.
	e.apply(`ALTER TRANSFORM big DROP doubled, ADD doubled AS (amount * 2)::text;
ALTER TRANSFORM per_customer DROP total2`)
	e.exec(`UPDATE orders SET amount = amount + 1 WHERE id % 7 = 0`)
	e.stop()
	e.start()
	e.converge("after replacing a column and dropping another")
	if got := e.queryString(`SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'big'::regclass AND attname = 'doubled'`); got != "text" {
		t.Fatalf("big.doubled is %s after its replacement, want text", got)
	}
	if n := e.queryInt(`SELECT count(*) FROM pg_attribute WHERE attrelid = 'per_customer'::regclass AND attname = 'total2' AND NOT attisdropped`); n != 0 {
		t.Fatal("per_customer.total2 is still there after its column build")
	}
}
