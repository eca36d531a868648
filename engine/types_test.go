package engine

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// TestKeyTypes keeps row, aggregate and join transforms exact over keys
// and values of the types people use: every integer width, numeric,
// text/varchar/char, uuid, timestamptz/timestamp/date/time/interval,
// boolean, jsonb, an enum, an array and a domain.
func TestKeyTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn, conn, cat := catalogDB(t, ctx)
	if _, err := conn.Exec(ctx, `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); CREATE DOMAIN posint AS int CHECK (VALUE > 0)`); err != nil {
		t.Fatal(err)
	}
	// One table per key type; value columns of every type; a dimension
	// joined on the same type.
	types := []struct{ name, typ, gen string }{
		{"i2", "smallint", "(%d %% 300)::smallint"},
		{"i4", "integer", "%d * 7"},
		{"i8", "bigint", "%d::bigint * 100000000000"},
		{"num", "numeric(12,3)", "%d / 7.0"},
		{"txt", "text", "'k' || %d"},
		{"vc", "varchar(20)", "'v' || %d"},
		{"ch", "char(6)", "lpad(%d::text, 4)"},
		{"id", "uuid", "md5(%d::text)::uuid"},
		{"tz", "timestamptz", "timestamptz '2026-01-01 00:00:00+00' + %d * interval '37 minutes'"},
		{"ts", "timestamp", "timestamp '2026-01-01' + %d * interval '1 day 3 seconds'"},
		{"dt", "date", "date '2026-01-01' + %d"},
		{"tm", "time", "time '00:00' + %d * interval '61 seconds'"},
		{"iv", "interval", "%d * interval '1 hour 1 second'"},
		{"bo", "boolean", "%d %% 2 = 0"},
		{"en", "mood", "(ARRAY['sad', 'ok', 'happy']::mood[])[1 + %d %% 3]"},
		{"ar", "int[]", "ARRAY[%d, %d %% 3]"},
		{"dm", "posint", "(%d + 1)::posint"},
	}
	// citext where the server has it: its keys compare without case.
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS citext`); err == nil {
		types = append(types, struct{ name, typ, gen string }{"ci", "citext", "(CASE WHEN %d %% 2 = 0 THEN 'K' ELSE 'k' END || %d)::citext"})
	} else {
		t.Logf("citext not installed: %v", err)
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for _, ty := range types {
		t.Run(ty.name, func(t *testing.T) {
			gen := func(n int) string {
				return "(" + strings.ReplaceAll(strings.ReplaceAll(ty.gen, "%d", fmt.Sprint(n)), "%%", "%") + ")"
			}
			src, dim := "src_"+ty.name, "dim_"+ty.name
			if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (k %s PRIMARY KEY, g %s, v numeric, j jsonb, f float8);
				CREATE TABLE %s (k %s PRIMARY KEY, label text);
				CREATE INDEX ON %s (g)`, src, ty.typ, ty.typ, dim, ty.typ, src)); err != nil {
				t.Fatal(err)
			}
			write := func(n int) {
				var stmts []string
				for i := 0; i < n; i++ {
					a, b := rng.Intn(40), rng.Intn(40)
					switch rng.Intn(5) {
					case 0, 1:
						stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s VALUES (%s, %s, %d, '{"a": %d}', %d.5) ON CONFLICT (k) DO UPDATE SET g = EXCLUDED.g, v = EXCLUDED.v, j = EXCLUDED.j`,
							src, gen(a), gen(b%8), rng.Intn(100), rng.Intn(5), rng.Intn(9)))
					case 2:
						stmts = append(stmts, fmt.Sprintf(`DELETE FROM %s WHERE k = %s`, src, gen(a)))
					case 3:
						stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s VALUES (%s, 'l%d') ON CONFLICT (k) DO UPDATE SET label = EXCLUDED.label`, dim, gen(b%8), rng.Intn(4)))
					case 4:
						stmts = append(stmts, fmt.Sprintf(`DELETE FROM %s WHERE k = %s`, dim, gen(b%8)))
					}
				}
				if _, err := conn.Exec(ctx, strings.Join(stmts, ";")); err != nil {
					t.Fatal(err)
				}
			}
			write(60)
			var appliers []*Applier
			for _, def := range []string{
				fmt.Sprintf(`CREATE TRANSFORM r_%s AS SELECT k, g, v, j, f FROM %s`, ty.name, src),
				fmt.Sprintf(`CREATE TRANSFORM a_%s AS SELECT g, count(*) AS n, sum(v) AS s, max(k) AS hi, jsonb_agg(j ORDER BY k) AS js FROM %s GROUP BY g`, ty.name, src),
				fmt.Sprintf(`CREATE TRANSFORM j_%s AS SELECT s.k, d.label FROM %s s LEFT JOIN %s d ON d.k = s.g`, ty.name, src, dim),
			} {
				if ty.name == "id" || ty.name == "bo" {
					def = strings.Replace(def, ", max(k) AS hi", "", 1) // no max for these types
				}
				appliers = append(appliers, built(t, ctx, dsn, conn, cat, def))
			}
			for round := 0; round < 5; round++ {
				// Every key of both tables, as the slot would name them.
				keys := map[string][][]string{}
				for _, tbl := range []string{src, dim} {
					rows, err := conn.Query(ctx, `SELECT k::text FROM `+tbl)
					if err != nil {
						t.Fatal(err)
					}
					for rows.Next() {
						var k string
						if err := rows.Scan(&k); err != nil {
							t.Fatal(err)
						}
						keys[tbl] = append(keys[tbl], []string{k})
					}
					rows.Close()
				}
				before := keys
				write(30)
				for _, a := range appliers {
					batch := make([][][]string, len(a.Plan.Sources))
					for i, s := range a.Plan.Sources {
						batch[i] = append(batch[i], before[s.Name]...)
					}
					// Keys the round added are found by a rebuild walk.
					if _, err := a.Apply(ctx, Batch{Keys: batch}); err != nil {
						t.Fatalf("round %d %s: %v", round, a.Plan.Target.Name, err)
					}
					if _, err := a.Apply(ctx, Batch{Keys: allKeys(t, ctx, a)}); err != nil {
						t.Fatalf("round %d %s walk: %v", round, a.Plan.Target.Name, err)
					}
					mustEqual(t, ctx, conn, a.Plan, fmt.Sprintf("round %d", round))
				}
			}
		})
	}
}
