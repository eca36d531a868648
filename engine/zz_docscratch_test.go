package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-repl/trellis-repl/internal/catalog"
	"github.com/trellis-repl/trellis-repl/internal/pgtest"
)

func TestZZDocParse(t *testing.T) {
	for _, s := range []string{
		"SELECT DISTINCT * FROM t",
		"SELECT d.name, count(*) AS n FROM f JOIN d ON d.id = f.d GROUP BY name",
		"SELECT name, count(*) AS n FROM f JOIN d ON d.id = f.d GROUP BY d.name",
		"SELECT d.name, count(*) AS n FROM f JOIN d ON d.id = f.d GROUP BY d.name",
		"SELECT region, region || '!' AS r, count(*) AS n FROM t GROUP BY region, region || '!'",
		"SELECT k, count(DISTINCT v) AS c, sum(v) FILTER (WHERE v > 0) AS s FROM t GROUP BY k",
		"SELECT k, sum(a)/sum(b) AS r FROM t GROUP BY k HAVING count(*) > 1",
		"SELECT k, round(avg(a), 2) AS r FROM t GROUP BY k",
		"SELECT a FROM t NATURAL JOIN u",
		"SELECT a FROM t, LATERAL (SELECT b FROM u WHERE u.x = t.a) s",
		"SELECT a FROM t JOIN LATERAL (SELECT b FROM u WHERE u.x = t.a) s ON true",
		"SELECT a FROM t ORDER BY a",
		"SELECT DISTINCT a, b FROM t",
		"SELECT t.a, s.b FROM t LEFT JOIN (SELECT b FROM u) s ON s.b = t.a",
		"SELECT a FROM (SELECT a FROM t UNION SELECT a FROM u) s",
		"SELECT a FROM (SELECT a, row_number() OVER () AS r FROM t) s",
		"SELECT a FROM (SELECT * FROM t) s",
		"SELECT * FROM t",
		"SELECT * FROM t LIMIT 1",
		"SELECT k, jsonb_object_agg(a, b ORDER BY c) AS o FROM t GROUP BY k",
		"SELECT k, jsonb_object_agg(a, b) AS o FROM t GROUP BY k",
		"SELECT k, array_agg(DISTINCT a ORDER BY a) AS o FROM t GROUP BY k",
		"SELECT k, json_agg(a) AS o FROM t GROUP BY k",
		"SELECT k, string_agg(DISTINCT a, ',') AS o FROM t GROUP BY k",
		"SELECT a FROM ONLY t",
		"SELECT 100.0 * sum(a) / sum(b) AS r FROM t",
		"SELECT count(*) AS n FROM t HAVING count(*) > 5",
		"SELECT DISTINCT k, count(*) AS n FROM t GROUP BY k",
		"SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY n DESC LIMIT 5",
		"SELECT a, sum(a) OVER () AS s FROM t",
		"SELECT a FROM t WHERE a IN (SELECT b FROM u)",
		"SELECT a FROM t WHERE now() > a",
		"SELECT a FROM (t JOIN u ON t.a = u.b) JOIN v ON v.c = u.b",
		"SELECT t.a FROM t JOIN (u JOIN v ON v.c = u.b) ON u.b = t.a",
		"SELECT k, min(a) FILTER (WHERE b) AS m FROM t GROUP BY k",
		"SELECT k, sum(a) AS s, count(*) AS n FROM t GROUP BY k HAVING sum(a) > 10",
		"SELECT k, sum(a) AS s FROM t GROUP BY k ORDER BY s",
		"SELECT lower(k) AS lk, count(*) AS n FROM t GROUP BY lower(k)",
		"SELECT k, count(*) AS n FROM t GROUP BY 1",
		"SELECT a FROM t WHERE a = ANY (ARRAY[1,2])",
		"SELECT a, b FROM t CROSS JOIN u",
	} {
		sts, err := ParseStatements("CREATE TRANSFORM x AS " + s)
		if err != nil {
			t.Logf("REFUSED %s\n   %v", s, err)
			continue
		}
		q := sts[0].Query
		t.Logf("OK %s\n   star=%v orderby=%v agg=%v groupby=%v having=%q rewritten=%s", s, q.Star, q.OrderBy, q.Aggregate, q.GroupBy, q.Having, q.Rewritten)
	}
}

func TestZZDocPlan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cat := catalog.New("trellis")
	if err := cat.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE fact (id int PRIMARY KEY, d1 int, v int, x xid, j json, p point, jb jsonb, ts timestamptz);
		CREATE TABLE dim (id int PRIMARY KEY, name text, r int);
		CREATE TABLE nopk (a int, b int);
		CREATE TABLE ri (a int NOT NULL, b int); CREATE UNIQUE INDEX ri_a ON ri (a); ALTER TABLE ri REPLICA IDENTITY USING INDEX ri_a;
		CREATE TABLE parent (id int PRIMARY KEY, v int); CREATE TABLE child () INHERITS (parent);
		CREATE TABLE pt (id int PRIMARY KEY, v int) PARTITION BY RANGE (id); CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (100);
		CREATE VIEW vw AS SELECT * FROM fact;
		CREATE FUNCTION stab(int) RETURNS int STABLE LANGUAGE sql AS 'SELECT $1';
		CREATE FUNCTION imm(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1'`); err != nil {
		t.Fatal(err)
	}
	var vol string
	conn.QueryRow(ctx, "SELECT string_agg(oid::regprocedure::text || '=' || provolatile::text, ', ') FROM pg_proc WHERE oid IN ('date(timestamptz)'::regprocedure, 'timezone(text,timestamptz)'::regprocedure, 'timestamptz_pl_interval(timestamptz,interval)'::regprocedure, 'to_char(timestamptz,text)'::regprocedure, 'age(timestamp)'::regprocedure)").Scan(&vol)
	t.Logf("date(timestamptz) provolatile %s", vol)
	tx0, _ := conn.Begin(ctx)
	_, e0 := tx0.Exec(ctx, "CREATE TEMPORARY VIEW zzv AS SELECT id, ts::date AS d, (ts + interval '1 day') AS e FROM fact")
	t.Logf("view err %v", e0)
	rows, e1 := tx0.Query(ctx, "SELECT d.refclassid::regclass::text, d.refobjid, coalesce((SELECT p.oid::regprocedure::text||' '||p.provolatile::text FROM pg_proc p WHERE p.oid = d.refobjid AND d.refclassid = 'pg_proc'::regclass), '') FROM pg_depend d JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid WHERE r.ev_class = 'zzv'::regclass")
	t.Logf("q err %v", e1)
	for rows.Next() {
		var a, c string
		var b uint32
		rows.Scan(&a, &b, &c)
		t.Logf("dep %v %s %d %s", e0, a, b, c)
	}
	rows.Close()
	tx0.Rollback(ctx)
	var code string
	_, e := conn.Exec(ctx, "SELECT jsonb_object_agg(k, v) FROM (VALUES (NULL::text, 1)) s(k, v)")
	t.Logf("null key: %v", e)
	var js string
	conn.QueryRow(ctx, "SELECT jsonb_object_agg(k, v)::text FROM (VALUES ('a', 1), ('a', 2)) s(k, v)").Scan(&js)
	t.Logf("dup keys: %s %s", js, code)
	for i, s := range []string{
		"SELECT id, v FROM parent",
		"SELECT id, v FROM ONLY parent",
		"SELECT id, v FROM pt",
		"SELECT ctid, id FROM fact",
		"SELECT id, xmin FROM fact",
		"SELECT id, stab(v) AS s FROM fact",
		"SELECT id, imm(v) AS s FROM fact",
		"SELECT id, v::text::timestamptz AS s FROM fact",
		"SELECT a, b FROM nopk",
		"SELECT a, b FROM ri",
		"SELECT id FROM vw",
		"SELECT x, count(*) AS n FROM fact GROUP BY x",
		"SELECT j::text AS jt, count(*) AS n FROM fact GROUP BY j::text",
		"SELECT j, count(*) AS n FROM fact GROUP BY j",
		"SELECT p, count(*) AS n FROM fact GROUP BY p",
		"SELECT jb, count(*) AS n FROM fact GROUP BY jb",
		"SELECT id, j, p FROM fact",
		"SELECT f.id FROM fact f FULL JOIN dim d ON d.id = f.d1 WHERE f.v > 1",
		"SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE f.v > 1",
		"SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.id IS NULL",
		"SELECT f.id, d.name FROM fact f NATURAL LEFT JOIN dim d",
		"SELECT f.id, d.name FROM fact f LEFT JOIN dim d USING (id) WHERE v > 1",
		"SELECT f.id, d.name FROM fact f LEFT JOIN dim d USING (id) WHERE id > 1",
		"SELECT v AS name, count(*) AS n FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY name",
		"SELECT d1 AS v2, count(*) AS n FROM fact GROUP BY v2",
		"SELECT * FROM fact f JOIN dim d ON d.id = f.d1",
		"SELECT f.*, d.name FROM fact f JOIN dim d ON d.id = f.d1",
		"SELECT * FROM fact JOIN dim USING (id)",
		"SELECT DISTINCT * FROM dim",
		"SELECT d.name, count(*) AS n FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name",
		"SELECT f.v, sum(d.r) AS n FROM fact f, dim d WHERE d.r = f.v GROUP BY f.v",
		"SELECT id, v FROM nosuch",
		"SELECT id, ts::date AS d FROM fact",
		"SELECT id, ts::text AS d FROM fact",
		"SELECT id, age(ts::timestamp) AS d FROM fact",
		"SELECT id, to_char(ts, 'YYYY') AS d FROM fact",
		"SELECT a FROM (SELECT * FROM dim) s(a)",
		"SELECT s.name FROM (SELECT * FROM dim) s",
		"SELECT f.id, s.name FROM fact f LEFT JOIN (SELECT d.id, d.name, e.r FROM dim d, dim e WHERE e.id = d.r) s ON s.id = f.d1",
		"SELECT f.id, s.name FROM fact f LEFT JOIN (SELECT d.id, d.name FROM dim d) s ON s.id = f.d1",
		"SELECT f.id, d.name FROM fact f LEFT JOIN dim d USING (id) WHERE f.id > 1",
		"SELECT a.id, b.id AS bid FROM dim a JOIN dim b ON b.id = a.r",
		"SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 LEFT JOIN dim e ON e.id = d.r",
		"SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 JOIN dim e ON e.id = f.v",
		"SELECT d1, count(*) AS a, count(v) AS b, sum(v) AS c, sum(v::float8) AS d, avg(v) AS e, avg(v::numeric) AS f, min(v) AS g, max(v) AS h, bool_and(v > 1) AS i, bit_or(v) AS k, count(DISTINCT v) AS l, count(*) FILTER (WHERE v > 1) AS m, string_agg(v::text, ',' ORDER BY v) AS n, jsonb_object_agg(id, v) AS o, sum(v::bigint) AS q FROM fact GROUP BY d1",
		"SELECT d1, sum(v) / count(*) AS r, max(v) AS mx FROM fact GROUP BY d1 HAVING min(v) > 0",
	} {
		name := "zz" + strconv.Itoa(i)
		sts, err := ParseStatements("CREATE TRANSFORM " + name + " AS " + s)
		if err != nil {
			t.Logf("PARSE-REFUSED %s\n   %v", s, err)
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, err := PlanCreate(ctx, tx, cat.Schema, "public", &sts[0])
		if err != nil {
			tx.Rollback(ctx)
			t.Logf("PLAN-REFUSED %s\n   %v", s, err)
			continue
		}
		raw, _ := p.Encode()
		id, err := cat.Insert(ctx, tx, &catalog.Transform{Schema: "public", Name: name, Definition: sts[0].Query.SQL, Shape: p.Shape, Plan: raw, SourceTable: p.Sources[0].From, SourceOID: p.Sources[0].OID})
		if err != nil {
			tx.Rollback(ctx)
			t.Fatal(err)
		}
		if err := Install(ctx, tx, p, id); err != nil {
			tx.Rollback(ctx)
			t.Logf("INSTALL-REFUSED %s\n   %v", s, err)
			continue
		}
		tx.Rollback(ctx)
		modes := []string{}
		for _, a := range p.Aggs {
			modes = append(modes, a.Name+":"+a.Mode)
		}
		t.Logf("OK %s\n   def=%s shape=%s state=%v modes=%v probes=%v cover=%v", s, sts[0].Query.SQL, p.Shape, p.State != nil, modes, p.Probes, p.Cover)
	}
}
