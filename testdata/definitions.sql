-- The definition table: every definition here is applied on its own to a
-- fresh copy of the setup. "-- refuse CODE: TEXT" must fail with that code
-- and a message containing TEXT, and change nothing; "-- accept" must be
-- accepted, build and equal its query. Run by TestDefinitionTable.

-- setup
CREATE TABLE fact (id int PRIMARY KEY, d1 int, d2 int, s text, v int, t timestamptz, u uuid, j jsonb);
CREATE TABLE dim (id int PRIMARY KEY, name text NOT NULL, r int);
CREATE TABLE dim2 (a int, b text, w int, PRIMARY KEY (a, b));
CREATE TABLE nokey (a int);
CREATE TABLE par (id int PRIMARY KEY, x int);
CREATE TABLE kid () INHERITS (par);
CREATE INDEX ON fact (d1);
INSERT INTO dim SELECT g, 'n' || (g % 4), g % 5 FROM generate_series(1, 12) g;
INSERT INTO dim2 SELECT g, b, g * 7 % 100 FROM generate_series(0, 5) g, unnest(ARRAY['x', 'y']) b;
INSERT INTO fact SELECT g, nullif(g % 14, 13), g % 7, (ARRAY['x', 'y', NULL])[1 + g % 3], g % 9,
  timestamptz '2026-01-01 00:00+00' + g * interval '1 hour', md5(g::text)::uuid, jsonb_build_object('k', g % 3) FROM generate_series(1, 60) g;
INSERT INTO par VALUES (1, 1);
CREATE AGGREGATE my_sum(int) (stype = int8, sfunc = int4_sum);
CREATE AGGREGATE my_count(int) (stype = int8, sfunc = int8inc_any, initcond = '0');
CREATE FUNCTION vol_sum(int8, int) RETURNS int8 VOLATILE LANGUAGE sql AS 'SELECT coalesce($1, 0) + $2';
CREATE AGGREGATE vol_agg(int) (stype = int8, sfunc = vol_sum);

-- refuse validation: has no primary key; add one (ALTER TABLE "public"."nokey" ADD PRIMARY KEY (...)), or make a unique index over NOT NULL columns its replica identity
CREATE TRANSFORM x AS SELECT a FROM nokey;

-- refuse not_found: FROM table "missing" does not exist
CREATE TRANSFORM x AS SELECT a FROM missing;

-- refuse validation: has inheritance children
CREATE TRANSFORM x AS SELECT id, x FROM par;

-- accept
CREATE TRANSFORM only_parent AS SELECT id, x FROM ONLY par;

-- refuse validation: reads system column(s) ctid
CREATE TRANSFORM x AS SELECT id, ctid FROM fact;

-- refuse validation: random() is not immutable
CREATE TRANSFORM x AS SELECT id, random() AS r FROM fact;

-- refuse validation: now() is not immutable
CREATE TRANSFORM x AS SELECT f.id FROM fact f JOIN dim d ON d.id = f.d1 WHERE f.t < now();

-- Stable built-ins that read only session settings: accepted, the
-- settings recorded with the plan (ADR 0037).
-- accept
CREATE TRANSFORM tz_date AS SELECT id, t::date AS d, t::text AS txt, format('%s@%s', id, t) AS f FROM fact;

-- accept
CREATE TRANSFORM tz_year AS SELECT to_char(t, 'YYYY') AS y, count(*) AS n FROM fact GROUP BY 1;

-- accept
CREATE TRANSFORM tz_plus AS SELECT f.id FROM fact f JOIN dim d ON d.id = f.d1 WHERE f.t + interval '1 day' > '2026-01-02'::timestamptz;

-- accept
CREATE TRANSFORM tz_last AS SELECT s, date_trunc('day', max(t)) AS last_day, count(*) AS n FROM fact GROUP BY s HAVING max(t)::date > '2026-01-01';

-- refuse validation: select list item 2 (age(t)) calls age(timestamp with time zone) (stable), which reads more than the session settings recorded with the transform
CREATE TRANSFORM x AS SELECT id, age(t) AS a FROM fact;

-- refuse validation: calls date_in(cstring) (stable), which reads more than the session settings recorded with the transform (the clock, the database or the session), so it could not be kept equal to the query as rows are re-derived at different times; read text as a date or time through a format instead, e.g. to_date(x, 'YYYY-MM-DD')
CREATE TRANSFORM x AS SELECT id, s::date AS d FROM fact;

-- refuse validation: could not identify an equality operator for type json, so it cannot key a group
CREATE TRANSFORM x AS SELECT j::json AS jj, count(*) AS n FROM fact GROUP BY 1;

-- refuse validation: returns a set of rows per row in a select list, where its rows have no identity of their own; move it to FROM
CREATE TRANSFORM x AS SELECT id, generate_series(1, v) AS g FROM fact;

-- functions and VALUES lists in FROM, keyed by lineage and ordinal (ADR 0034)
-- accept
CREATE TRANSFORM series_per_row AS SELECT f.id, g.n FROM fact f, generate_series(1, f.v) AS g(n);

-- accept
CREATE TRANSFORM json_keys AS SELECT f.id, e.key, e.value FROM fact f LEFT JOIN LATERAL jsonb_each(f.j) AS e(key, value) ON true;

-- accept
CREATE TRANSFORM values_joined AS SELECT f.id, v.label FROM fact f JOIN (VALUES (0, 'none'), (1, 'one'), (1, 'uno')) AS v(k, label) ON v.k = f.v;

-- refuse validation: the preserved side of a LEFT JOIN holds no table
CREATE TRANSFORM x AS SELECT v.k, f.id FROM (VALUES (0), (1)) AS v(k) LEFT JOIN fact f ON f.v = v.k;

-- refuse validation: FROM: the query reads no table
CREATE TRANSFORM x AS SELECT g FROM generate_series(1, 3) AS g;

-- refuse validation: only immutable functions may make rows in FROM
CREATE TRANSFORM x AS SELECT f.id, h.at FROM fact f, generate_series(f.t, f.t + interval '2 hours', interval '1 hour') AS h(at);

-- top-K: a window over the rows and a filter on it (ADR 0033)
-- accept
CREATE TRANSFORM topk_ids AS SELECT id FROM fact ORDER BY id LIMIT 10;

-- accept
CREATE TRANSFORM anti_join AS SELECT f.id FROM fact f LEFT JOIN dim d ON d.id = f.d1 WHERE d.id IS NULL;

-- accept
CREATE TRANSFORM level_nullable AS SELECT n FROM (SELECT d1, count(*) AS n FROM fact GROUP BY d1) s;

-- accept
CREATE TRANSFORM level_q13 AS SELECT c_count, count(*) AS custdist
  FROM (SELECT d.id, count(f.id) FROM dim d LEFT JOIN fact f ON f.d1 = d.id AND f.s NOT LIKE '%y%' GROUP BY d.id) AS c_orders (c_key, c_count)
  GROUP BY c_count ORDER BY custdist DESC, c_count DESC;

-- accept
CREATE TRANSFORM level_star AS SELECT * FROM (SELECT d2, s, count(*) AS n, max(v) AS top FROM fact GROUP BY d2, s) g WHERE n > 1;

-- refuse validation: transform "x": FROM: the subquery s: FROM table "public"."nokey" has no primary key
CREATE TRANSFORM x AS SELECT n FROM (SELECT a, count(*) AS n FROM nokey GROUP BY a) s;

-- refuse validation: transform "x": FROM: the subquery s: select list item 2 (string_agg(s, ',')): string_agg without ORDER BY
CREATE TRANSFORM x AS SELECT n FROM (SELECT d2, string_agg(s, ',') AS n FROM fact GROUP BY d2) s;

-- refuse validation: string_agg without ORDER BY inside the call has no defined order
CREATE TRANSFORM x AS SELECT d2, string_agg(s, ',') AS ss FROM fact GROUP BY d2;

-- refuse validation: LIMIT without ORDER BY keeps arbitrary rows
CREATE TRANSFORM x AS SELECT id, (SELECT max(w) FROM dim2) AS m FROM fact LIMIT 5;

-- Subqueries in expressions (ADR 0030), each beside the join that an
-- earlier version advised instead; both accepted.

-- accept
CREATE TRANSFORM exists_where AS SELECT f.id FROM fact f WHERE EXISTS (SELECT 1 FROM dim d WHERE d.id = f.d1 AND d.r = 1);

-- accept
CREATE TRANSFORM exists_as_join AS SELECT f.id FROM fact f JOIN (SELECT DISTINCT id FROM dim WHERE r = 1) AS e ON e.id = f.d1;

-- accept
CREATE TRANSFORM not_exists_where AS SELECT f.id FROM fact f WHERE NOT EXISTS (SELECT 1 FROM dim d WHERE d.id = f.d1 AND d.r = 1);

-- accept
CREATE TRANSFORM not_exists_as_join AS SELECT f.id FROM fact f LEFT JOIN (SELECT DISTINCT id FROM dim WHERE r = 1) AS e ON e.id = f.d1 WHERE e.id IS NULL;

-- accept
CREATE TRANSFORM in_where AS SELECT id FROM fact WHERE d2 IN (SELECT d1 FROM fact WHERE v = 3);

-- accept
CREATE TRANSFORM in_as_join AS SELECT f.id FROM fact f JOIN (SELECT DISTINCT d1 AS v FROM fact WHERE v = 3) AS s ON s.v = f.d2;

-- accept
CREATE TRANSFORM scalar_where AS SELECT f.id, (SELECT count(*) FROM dim2 e WHERE e.a = f.d2) AS n FROM fact f WHERE f.v > (SELECT avg(v) FROM fact);

-- accept
CREATE TRANSFORM scalar_as_join AS SELECT f.id, coalesce(s.m, 0) AS n FROM fact f LEFT JOIN (SELECT a, count(*) AS m FROM dim2 GROUP BY a) AS s ON s.a = f.d2
  CROSS JOIN (SELECT avg(v) AS m FROM fact) AS t WHERE f.v > t.m;

-- accept
CREATE TRANSFORM array_select AS SELECT d.id, ARRAY(SELECT f.id FROM fact f WHERE f.d1 = d.id ORDER BY f.id) AS ids FROM dim d;

-- accept
CREATE TRANSFORM array_as_join AS SELECT d.id, s.a AS ids FROM dim d LEFT JOIN (SELECT d1, array_agg(id ORDER BY id) AS a FROM fact GROUP BY d1) AS s ON s.d1 = d.id;

-- accept
CREATE TRANSFORM with_cte AS WITH c AS (SELECT d1, count(*) AS n FROM fact GROUP BY d1) SELECT d1, n FROM c WHERE n > 1;

-- accept
CREATE TRANSFORM with_cte_twice AS WITH c AS (SELECT d1, count(*) AS n FROM fact GROUP BY d1), w AS (SELECT id, d1 FROM fact WHERE v > 2)
  SELECT w.id, c1.n, c2.n AS n_next FROM w JOIN c c1 ON c1.d1 = w.d1 LEFT JOIN c c2 ON c2.d1 = w.d1 + 1;

-- accept
CREATE TRANSFORM with_as_subquery AS SELECT d1, n FROM (SELECT d1, count(*) AS n FROM fact GROUP BY d1) AS c WHERE n > 1;

-- refuse validation: WITH d holds a data-modifying statement
CREATE TRANSFORM x AS WITH d AS (DELETE FROM par RETURNING id) SELECT id FROM fact;

-- refuse validation: FROM: the subquery s uses FOR UPDATE/FOR SHARE, which is not supported in a transform; remove it
CREATE TRANSFORM x AS SELECT s.id FROM (SELECT id FROM fact FOR UPDATE) AS s;

-- refuse validation: or else take the distinct rows of the grouped query
CREATE TRANSFORM x AS SELECT DISTINCT count(*) AS n FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM distinct_of_grouped AS SELECT DISTINCT n FROM (SELECT d2, count(*) AS n FROM fact GROUP BY d2) AS g;

-- refuse validation: FULL JOIN is only supported with merge-joinable or hash-joinable join conditions
CREATE TRANSFORM x AS SELECT f.id, d.id AS did FROM fact f FULL JOIN dim d ON d.id IS NOT DISTINCT FROM f.d1;

-- refuse validation: is a row value, which the ledger cannot store; aggregate the distinct rows of a subquery in FROM instead
CREATE TRANSFORM x AS SELECT d2, count(DISTINCT (s, v)) AS n FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM distinct_rows_counted AS SELECT d2, count(*) AS n FROM (SELECT DISTINCT d2, s, v FROM fact) AS d GROUP BY d2;

-- accept
CREATE TRANSFORM union_ids AS SELECT id FROM fact UNION SELECT id FROM dim;

-- accept
CREATE TRANSFORM union_all_mixed AS SELECT id, v::numeric AS v FROM fact WHERE d1 = 2 UNION ALL SELECT id, r / 2.0 FROM dim UNION ALL SELECT a, w FROM dim2;

-- accept
CREATE TRANSFORM intersect_except AS (SELECT d1 FROM fact INTERSECT SELECT id FROM dim) EXCEPT SELECT a FROM dim2 WHERE w > 30;

-- accept
CREATE TRANSFORM intersect_all AS SELECT d1 FROM fact INTERSECT ALL SELECT r FROM dim;

-- accept
CREATE TRANSFORM except_all AS SELECT d2 FROM fact EXCEPT ALL SELECT r FROM dim;

-- accept
CREATE TRANSFORM utc_day AS SELECT id, (t AT TIME ZONE 'UTC')::date AS day FROM fact;

-- Grouping as PostgreSQL reads it (ADR 0037): what it refuses, in its words.
-- refuse validation: column "fact.v" must appear in the GROUP BY clause or be used in an aggregate function
CREATE TRANSFORM x AS SELECT d2, v, count(*) AS n FROM fact GROUP BY d2;

-- refuse validation: column "d.r" must appear in the GROUP BY clause or be used in an aggregate function
CREATE TRANSFORM x AS SELECT d.name, d.r, count(*) AS n FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name;

-- accept
CREATE TRANSFORM dep_cols AS SELECT d.*, count(f.id) AS n, sum(f.v) AS s FROM dim d LEFT JOIN fact f ON f.d1 = d.id GROUP BY d.id;

-- accept
CREATE TRANSFORM dep_expr AS SELECT d.id, upper(d.name) AS u, d.r + 1 AS r1, count(*) AS n FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.id HAVING d.r > 0;

-- accept
CREATE TRANSFORM group_names AS SELECT d.name, s, count(*) AS n FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY name, f.s;

-- accept
CREATE TRANSFORM group_expr AS SELECT s || '!' AS bang, upper(s) AS up, count(*) AS n FROM fact GROUP BY s;

-- accept
CREATE TRANSFORM chain_total_up AS SELECT count(*) AS n FROM fact;
CREATE TRANSFORM chain_total_reader AS SELECT n FROM chain_total_up;

-- accept
CREATE TRANSFORM chain_nullable_up AS SELECT d1, count(*) AS n, sum(v) AS s FROM fact GROUP BY d1;
CREATE TRANSFORM chain_outer_up AS SELECT f.id, f.d1, d.name FROM fact f LEFT JOIN dim d ON d.id = f.d1;
CREATE TRANSFORM chain_nullable_reader AS SELECT u.d1, u.n, count(o.id) AS rows, max(o.name) AS name FROM chain_nullable_up u JOIN chain_outer_up o ON o.d1 IS NOT DISTINCT FROM u.d1 GROUP BY u.d1, u.n;

-- accept
CREATE TRANSFORM chain_star_up AS SELECT d1, count(*) AS n FROM fact GROUP BY d1;
CREATE TRANSFORM chain_star_reader AS SELECT * FROM chain_star_up;

-- accept
CREATE TRANSFORM star AS SELECT * FROM dim2;

-- accept
CREATE TRANSFORM inner_join AS SELECT f.id, f.v, d.name, e.w FROM fact f JOIN dim d ON d.id = f.d1 JOIN dim2 e ON e.a = f.d2 AND e.b = f.s;

-- accept
CREATE TRANSFORM comma_join AS SELECT f.id, d.name FROM fact f, dim d WHERE d.id = f.d1 AND f.v > 2;

-- accept
CREATE TRANSFORM outer_joins AS SELECT f.id AS fid, d.id AS did, d.name FROM fact f FULL JOIN dim d ON d.id = f.d1;

-- accept
CREATE TRANSFORM self_join AS SELECT a.id, b.id AS bid FROM fact a JOIN fact b ON b.id = a.v;

-- accept
CREATE TRANSFORM derived AS SELECT nm, sum(vv) AS total FROM (SELECT d.name AS nm, f.v * 2 AS vv FROM fact f, dim d WHERE d.id = f.d1) AS x GROUP BY nm ORDER BY nm;

-- accept
CREATE TRANSFORM having_composed AS SELECT d.name, count(*) AS n, 100.0 * sum(f.v) / nullif(count(*), 0) AS pct
  FROM fact f JOIN dim d ON d.id = f.d1 GROUP BY d.name HAVING count(*) > 2;

-- accept
CREATE TRANSFORM many_aggs AS SELECT d2, bool_and(v > 3) AS ba, string_agg(s, ',' ORDER BY s, id) AS ss, count(DISTINCT v) AS cd,
  sum(v) FILTER (WHERE s = 'x') AS sx, jsonb_agg(j ORDER BY id) AS js FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM distinct_pairs AS SELECT DISTINCT d2, s FROM fact;

-- accept
CREATE TRANSFORM distinct_star AS SELECT DISTINCT * FROM dim2;

-- accept
CREATE TRANSFORM group_hidden AS SELECT count(*) AS n FROM fact GROUP BY d2, s;

-- accept
CREATE TRANSFORM typed_keys AS SELECT u, t, date_trunc('day', t AT TIME ZONE 'UTC') AS day, j ->> 'k' AS k FROM fact;

-- accept
CREATE TRANSFORM by_time AS SELECT timezone('UTC', t)::date AS day, count(*) AS n, max(u::text) AS last FROM fact GROUP BY 1;

-- accept
CREATE TRANSFORM gapped WITHOUT SOURCE INDEX AS SELECT f.id, e.w FROM fact f JOIN dim2 e ON e.w = f.v;

-- accept
CREATE TRANSFORM level1 AS SELECT f.id, d.name, f.v FROM fact f JOIN dim d ON d.id = f.d1;
CREATE TRANSFORM level2 AS SELECT name, count(*) AS n, sum(v) AS s FROM level1 GROUP BY name;

-- WITH RECURSIVE: linear recursion, kept by anchor (ADR 0035); the
-- recursive term may read the CTE alone
-- accept
CREATE TRANSFORM rec_counter AS WITH RECURSIVE r(n) AS (SELECT d1 FROM fact WHERE d1 = 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT n FROM r;

-- accept
CREATE TRANSFORM rec_chain AS WITH RECURSIVE c(id, depth) AS (SELECT id, 0 FROM dim WHERE r = 0 UNION SELECT d.id, c.depth + 1 FROM c JOIN dim d ON d.id = c.id + 1 WHERE c.depth < 3) SELECT id, max(depth) AS depth FROM c GROUP BY id;

-- refuse validation: which returns a set of rows per row: one derivation would give several rows the engine cannot tell apart
CREATE TRANSFORM x AS WITH RECURSIVE r(n) AS (SELECT d1 FROM fact WHERE d1 = 1 UNION ALL SELECT generate_series(n + 1, n + 2) FROM r WHERE n < 5) SELECT n FROM r;

-- refuse validation: now() is not immutable
CREATE TRANSFORM x AS WITH RECURSIVE r(id, t) AS (SELECT id, t FROM fact WHERE d1 = 1 UNION ALL SELECT f.id, f.t FROM r JOIN fact f ON f.d1 = r.id WHERE f.t < now()) SELECT id FROM r;

-- refuse validation: recursive query "r" column 1 has type integer in non-recursive term but type bigint overall
CREATE TRANSFORM x AS WITH RECURSIVE r(n) AS (SELECT d1 FROM fact WHERE d1 = 1 UNION ALL SELECT n::bigint + 1 FROM r WHERE n < 5) SELECT n FROM r;

-- refuse validation: its recursive term reads r 2 times; only linear recursion is kept
CREATE TRANSFORM x AS WITH RECURSIVE r(n) AS (SELECT d1 FROM fact UNION SELECT a.n FROM r a JOIN r b ON b.n = a.n + 1) SELECT n FROM r;

-- accept
CREATE TRANSFORM stats_exact AS SELECT d2, stddev(v) AS sd, stddev_samp(v) AS ss, stddev_pop(v) AS sp, variance(v) AS va,
  var_samp(v::numeric / 7) AS vs, var_pop(d1::bigint) AS vp FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM stats_ordered AS SELECT d2, corr(v, d1 ORDER BY id) AS c, covar_pop(v, d1 ORDER BY id) AS cp,
  covar_samp(v, d1 ORDER BY id) AS cs, regr_slope(v, d1 ORDER BY id) AS rs, regr_intercept(v, d1 ORDER BY id) AS ri,
  regr_r2(v, d1 ORDER BY id) AS r2, regr_count(v, d1) AS rc, regr_avgx(v, d1 ORDER BY id) AS ax, regr_avgy(v, d1 ORDER BY id) AS ay,
  regr_sxx(v, d1 ORDER BY id) AS sxx, regr_sxy(v, d1 ORDER BY id) AS sxy, regr_syy(v, d1 ORDER BY id) AS syy,
  stddev(v::float8 / 3 ORDER BY id) AS sdf FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM stats_none AS SELECT regr_count(v, d1) AS rc, var_pop(v) AS vp, my_count(v) AS mc, my_sum(v) AS ms FROM fact WHERE v > 100;

-- refuse validation: stddev(v::float8) depends on the order rows are aggregated in: PostgreSQL accumulates it in floating point, dividing at every row
CREATE TRANSFORM x31 AS SELECT d2, stddev(v::float8) AS sd FROM fact GROUP BY d2;

-- refuse validation: order the rows inside the call by a unique key, e.g. corr(v, d1 ORDER BY f.id)
CREATE TRANSFORM x31 AS SELECT corr(v, d1) AS c FROM fact f;

-- accept
CREATE TRANSFORM ordered_sets AS SELECT d2, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS med,
  percentile_disc(ARRAY[0.25, 0.75]) WITHIN GROUP (ORDER BY v) AS q, mode() WITHIN GROUP (ORDER BY s) AS m,
  rank(3) WITHIN GROUP (ORDER BY v) AS r, cume_dist(3) WITHIN GROUP (ORDER BY v) AS cd FROM fact GROUP BY d2;

-- refuse validation: the direct argument of percentile_cont reads a column; in a transform it must be a constant
CREATE TRANSFORM x31 AS SELECT d2, percentile_cont(d2 / 10.0) WITHIN GROUP (ORDER BY v) AS p FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM user_aggs AS SELECT d2, my_sum(v) AS s, my_count(d1) AS c, my_sum(v) + 1 AS s1 FROM fact GROUP BY d2 HAVING my_sum(v) > 3;

-- refuse validation: the aggregate vol_agg(integer) calls vol_sum(bigint,integer) (volatile)
CREATE TRANSFORM x31 AS SELECT d2, vol_agg(v) AS s FROM fact GROUP BY d2;

-- refuse validation: aggregate json_agg is not supported yet
CREATE TRANSFORM x31 AS SELECT d2, json_agg(v ORDER BY id) AS j FROM fact GROUP BY d2;

-- accept
CREATE TRANSFORM rollup_sets AS SELECT d2, s, count(*) AS n, sum(v) AS sv, min(v) AS mn, string_agg(s, ',' ORDER BY id) AS ss,
  GROUPING(d2, s) AS g FROM fact GROUP BY ROLLUP (d2, s);

-- accept
CREATE TRANSFORM cube_having AS SELECT d1, d2, count(*) AS n, avg(v) AS a FROM fact GROUP BY CUBE (d1, d2) HAVING count(*) > 1;

-- accept
CREATE TRANSFORM sets_join AS SELECT d.name, f.d2, sum(f.v) AS s, max(f.v) AS mx FROM fact f JOIN dim d ON d.id = f.d1
  GROUP BY GROUPING SETS ((d.name), (f.d2), ());

-- accept
CREATE TRANSFORM sets_distinct AS SELECT d2, count(*) AS n FROM fact GROUP BY DISTINCT ROLLUP (d2), ROLLUP (d2);

-- accept
CREATE TRANSFORM group_empty AS SELECT count(*) AS n FROM fact GROUP BY ();

-- accept
CREATE TRANSFORM grouping_label AS SELECT CASE WHEN GROUPING(s) = 1 THEN 'all' ELSE s END AS label, count(*) AS n FROM fact GROUP BY ROLLUP (s);

-- refuse validation: are the same set (d2), so PostgreSQL returns each of its groups twice
CREATE TRANSFORM x31 AS SELECT d2, count(*) AS n FROM fact GROUP BY GROUPING SETS ((d2), (d2));

-- accept
CREATE TRANSFORM not_in_nulls AS SELECT id FROM fact WHERE d1 NOT IN (SELECT r FROM dim WHERE name <> 'n0');

-- accept
CREATE TRANSFORM exists_or AS SELECT f.id, f.v FROM fact f WHERE f.v = 3 OR EXISTS (SELECT 1 FROM dim2 e WHERE e.a = f.d2 AND e.w > 50);

-- accept
CREATE TRANSFORM exists_on AS SELECT f.id, d.name FROM fact f LEFT JOIN dim d ON d.id = f.d1 AND EXISTS (SELECT 1 FROM dim2 e WHERE e.a = d.r);

-- accept
CREATE TRANSFORM scalar_correlated AS SELECT d.id, (SELECT min(f.v) FROM fact f WHERE f.d1 = d.id) AS lo FROM dim d;

-- accept
CREATE TRANSFORM having_scalar AS SELECT d1, count(*) AS n FROM fact GROUP BY d1 HAVING count(*) > (SELECT avg(w) FROM dim2);

-- refuse validation: limits its rows (LIMIT, OFFSET) and refers to the outer query
CREATE TRANSFORM x AS SELECT d.id, (SELECT f.v FROM fact f WHERE f.d1 = d.id ORDER BY f.id LIMIT 1) AS first FROM dim d;

-- a CTE whose body aliases its table, read twice (its two pulled-up copies get names of their own)
-- accept
CREATE TRANSFORM cte_aliased_twice AS WITH c2 AS (SELECT a1.id AS k0, a1.v AS v0 FROM fact AS a1 WHERE a1.v > 1) SELECT r3.k0, r3.v0, b4.k0 AS bv FROM c2 r3 JOIN c2 b4 ON b4.k0 = r3.k0;
