-- not null identity: boundary after (1,x)
SELECT ARRAY["a"::text, "b"::text] FROM "out"."tgt" WHERE ("a", "b") > ($1::integer, $2::text) ORDER BY "a", "b" OFFSET 499 LIMIT 1;
-- not null identity: page (1,x) .. (5,y), 8 parameters
WITH __t AS MATERIALIZED (SELECT "a", "b", "j"::text AS "j" FROM "out"."tgt" WHERE ("a", "b") > ($1::integer, $2::text) AND ("a", "b") <= ($3::integer, $4::text)),
__q AS MATERIALIZED (SELECT __q."a", __q."b" COLLATE pg_catalog."default" AS "b", __q."j"::text AS "j" FROM (SELECT a, b, j FROM s
) AS __q WHERE "a" >= $5::integer AND ("a", ("b" COLLATE pg_catalog."default")) > ($5::integer, $6::text) AND "a" <= $7::integer AND ("a", ("b" COLLATE pg_catalog."default")) <= ($7::integer, $8::text)),
__d AS (SELECT 1 AS __side, * FROM (SELECT * FROM __t EXCEPT ALL SELECT * FROM __q) AS __x
  UNION ALL SELECT 0, * FROM (SELECT * FROM __q EXCEPT ALL SELECT * FROM __t) AS __m)
SELECT __z.__side, __z.__vals, __z.__nt, __z.__nq FROM (
  SELECT __d.__side, ARRAY[__d."a"::text, __d."b"::text, __d."j"::text] AS __vals, NULL::bigint AS __nt, NULL::bigint AS __nq, __d."a" AS __i0, __d."b" AS __i1 FROM __d
  UNION ALL SELECT 2, NULL, (SELECT count(*) FROM __t), (SELECT count(*) FROM __q), NULL AS __i0, NULL AS __i1) AS __z
ORDER BY __z.__side = 2, __z.__i0, __z.__i1, __z.__side;
-- not null identity: recheck (1,x), (5,y), 8 parameters
WITH __t AS MATERIALIZED (SELECT "a", "b", "j"::text AS "j" FROM "out"."tgt" WHERE (("a" = $1::integer AND "b" = $2::text) OR ("a" = $3::integer AND "b" = $4::text))),
__q AS MATERIALIZED (SELECT __q."a", __q."b" COLLATE pg_catalog."default" AS "b", __q."j"::text AS "j" FROM (SELECT a, b, j FROM s
) AS __q WHERE (("a" = $5::integer AND ("b" COLLATE pg_catalog."default") = $6::text) OR ("a" = $7::integer AND ("b" COLLATE pg_catalog."default") = $8::text))),
__d AS (SELECT 1 AS __side, * FROM (SELECT * FROM __t EXCEPT ALL SELECT * FROM __q) AS __x
  UNION ALL SELECT 0, * FROM (SELECT * FROM __q EXCEPT ALL SELECT * FROM __t) AS __m)
SELECT __z.__side, __z.__vals, __z.__nt, __z.__nq FROM (
  SELECT __d.__side, ARRAY[__d."a"::text, __d."b"::text, __d."j"::text] AS __vals, NULL::bigint AS __nt, NULL::bigint AS __nq, __d."a" AS __i0, __d."b" AS __i1 FROM __d
  UNION ALL SELECT 2, NULL, (SELECT count(*) FROM __t), (SELECT count(*) FROM __q), NULL AS __i0, NULL AS __i1) AS __z
ORDER BY __z.__side = 2, __z.__i0, __z.__i1, __z.__side;
-- nullable identity: boundary after (1,x)
SELECT ARRAY["a"::text, "b"::text] FROM "out"."tgt" WHERE ((("a" > $1::integer OR "a" IS NULL)) OR ("a" = $2::integer AND ("b" > $3::text OR "b" IS NULL))) ORDER BY "a", "b" OFFSET 499 LIMIT 1;
-- nullable identity: page (1,x) .. (5,), 12 parameters
WITH __t AS MATERIALIZED (SELECT "a", "b", "j"::text AS "j" FROM "out"."tgt" WHERE ((("a" > $1::integer OR "a" IS NULL)) OR ("a" = $2::integer AND ("b" > $3::text OR "b" IS NULL))) AND (("a" < $4::integer) OR ("a" = $5::integer AND "b" IS NOT NULL) OR ("a" = $6::integer AND "b" IS NULL))),
__q AS MATERIALIZED (SELECT __q."a", __q."b" COLLATE pg_catalog."default" AS "b", __q."j"::text AS "j" FROM (SELECT a, b, j FROM s
) AS __q WHERE ((("a" > $7::integer OR "a" IS NULL)) OR ("a" = $8::integer AND (("b" COLLATE pg_catalog."default") > $9::text OR ("b" COLLATE pg_catalog."default") IS NULL))) AND (("a" < $10::integer) OR ("a" = $11::integer AND ("b" COLLATE pg_catalog."default") IS NOT NULL) OR ("a" = $12::integer AND ("b" COLLATE pg_catalog."default") IS NULL))),
__d AS (SELECT 1 AS __side, * FROM (SELECT * FROM __t EXCEPT ALL SELECT * FROM __q) AS __x
  UNION ALL SELECT 0, * FROM (SELECT * FROM __q EXCEPT ALL SELECT * FROM __t) AS __m)
SELECT __z.__side, __z.__vals, __z.__nt, __z.__nq FROM (
  SELECT __d.__side, ARRAY[__d."a"::text, __d."b"::text, __d."j"::text] AS __vals, NULL::bigint AS __nt, NULL::bigint AS __nq, __d."a" AS __i0, __d."b" AS __i1 FROM __d
  UNION ALL SELECT 2, NULL, (SELECT count(*) FROM __t), (SELECT count(*) FROM __q), NULL AS __i0, NULL AS __i1) AS __z
ORDER BY __z.__side = 2, __z.__i0, __z.__i1, __z.__side;
-- nullable identity: recheck (1,x), (5,), 6 parameters
WITH __t AS MATERIALIZED (SELECT "a", "b", "j"::text AS "j" FROM "out"."tgt" WHERE (("a" = $1::integer AND "b" = $2::text) OR ("a" = $3::integer AND "b" IS NULL))),
__q AS MATERIALIZED (SELECT __q."a", __q."b" COLLATE pg_catalog."default" AS "b", __q."j"::text AS "j" FROM (SELECT a, b, j FROM s
) AS __q WHERE (("a" = $4::integer AND ("b" COLLATE pg_catalog."default") = $5::text) OR ("a" = $6::integer AND ("b" COLLATE pg_catalog."default") IS NULL))),
__d AS (SELECT 1 AS __side, * FROM (SELECT * FROM __t EXCEPT ALL SELECT * FROM __q) AS __x
  UNION ALL SELECT 0, * FROM (SELECT * FROM __q EXCEPT ALL SELECT * FROM __t) AS __m)
SELECT __z.__side, __z.__vals, __z.__nt, __z.__nq FROM (
  SELECT __d.__side, ARRAY[__d."a"::text, __d."b"::text, __d."j"::text] AS __vals, NULL::bigint AS __nt, NULL::bigint AS __nq, __d."a" AS __i0, __d."b" AS __i1 FROM __d
  UNION ALL SELECT 2, NULL, (SELECT count(*) FROM __t), (SELECT count(*) FROM __q), NULL AS __i0, NULL AS __i1) AS __z
ORDER BY __z.__side = 2, __z.__i0, __z.__i1, __z.__side;
