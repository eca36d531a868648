package trellis_test

import (
	"context"
	"testing"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// TestPartitionAttachDetach: ATTACH PARTITION of a table with rows and
// DETACH PARTITION change a partitioned source's rows without a row
// change; corrections re-derive the rows of that partition (listed in
// correcting_nodes meanwhile), AwaitConverged waits for them, and every
// target, including one over a partition used directly, equals its query.
// Writes to an attached partition are captured afterwards.
func TestPartitionAttachDetach(t *testing.T) {
	t.Parallel()
	eachModeParallel(t, testPartitionAttachDetach)
}

func testPartitionAttachDetach(t *testing.T, mode string) {
	e := newEnv(t, trellis.Config{Capture: mode})
	e.exec(`CREATE TABLE m (id int, r int, v int, PRIMARY KEY (id, r)) PARTITION BY LIST (r)`)
	e.exec(`CREATE TABLE m0 PARTITION OF m FOR VALUES IN (0)`)
	e.exec(`CREATE TABLE m1 PARTITION OF m FOR VALUES IN (1)`)
	e.exec(`INSERT INTO m SELECT g, g % 2, g FROM generate_series(1, 40) g`)
	e.apply(`CREATE TRANSFORM mt AS SELECT id, r, v FROM m WHERE v > 3;
		CREATE TRANSFORM mr AS SELECT r, count(*) AS n, sum(v) AS s FROM m GROUP BY r;
		CREATE TRANSFORM direct AS SELECT id, v FROM m1`)
	e.start()
	e.converge("built")
	// Writes through the root reach the transform over the partition.
	e.exec(`UPDATE m SET v = v + 1 WHERE id < 20`)
	e.exec(`INSERT INTO m VALUES (41, 1, 41), (42, 0, 42)`)
	e.exec(`DELETE FROM m WHERE id = 3`)
	e.exec(`UPDATE m1 SET v = v + 1 WHERE id > 30`)
	e.converge("after writes through the root")

	// A table with rows attached: its rows join the targets.
	e.exec(`CREATE TABLE m2 (id int, r int, v int, PRIMARY KEY (id, r))`)
	e.exec(`INSERT INTO m2 SELECT g, 2, g FROM generate_series(100, 6099) g`)
	e.exec(`ANALYZE m2`)
	e.exec(`ALTER TABLE m ATTACH PARTITION m2 FOR VALUES IN (2)`)
	seen := false
	deadline := time.Now().Add(waitTimeout)
	for !seen && time.Now().Before(deadline) {
		st, err := e.tr.Status(context.Background(), "mr")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st[0].CorrectingNodes {
			if c.Node == "m2" && c.Kind == "attach" && !c.Since.IsZero() {
				seen = true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !seen {
		t.Log("the correction of m2 ended before status showed it")
	}
	e.converge("after ATTACH PARTITION")
	if n := e.queryInt(`SELECT n FROM mr WHERE r = 2`); n != 6000 {
		t.Fatalf("mr counts %d rows of the attached partition, want 6000", n)
	}
	// Writes to it are captured.
	e.exec(`UPDATE m2 SET v = v + 1 WHERE id < 200`)
	e.exec(`INSERT INTO m VALUES (7000, 2, 7)`)
	e.converge("after writes to the attached partition")

	// Detached: its rows leave the targets; the transform over m1 itself
	// goes on when m1 is detached.
	e.exec(`ALTER TABLE m DETACH PARTITION m2`)
	e.converge("after DETACH PARTITION")
	e.exec(`ALTER TABLE m DETACH PARTITION m1`)
	e.exec(`UPDATE m1 SET v = v + 100 WHERE id < 10`)
	e.converge("after DETACH of the partition read directly")
	// Attached again, then dropped while attached.
	e.exec(`ALTER TABLE m ATTACH PARTITION m1 FOR VALUES IN (1)`)
	e.converge("after ATTACH again")
	e.exec(`DROP TABLE m2`)
	e.exec(`CREATE TABLE m3 PARTITION OF m FOR VALUES IN (3)`)
	e.exec(`INSERT INTO m SELECT g, 3, g FROM generate_series(1, 50) g`)
	e.converge("after a new partition")
	e.exec(`DROP TABLE m3`)
	e.converge("after DROP of a partition")
	if st, err := e.tr.Status(context.Background(), "mr"); err != nil || len(st[0].CorrectingNodes) != 0 || st[0].State != "live" {
		t.Fatalf("mr at the end: %+v, %v", st, err)
	}
}
