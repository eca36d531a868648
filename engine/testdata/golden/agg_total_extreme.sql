-- the target
hi numeric
q bigint
__id bigint GENERATED ALWAYS AS IDENTITY
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k (__k0 integer, __k1 text) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_b (__lo integer, __hi integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS SELECT coalesce(__n.__k0, __o.__k0) AS __k0, coalesce(__n.__k1, __o.__k1) AS __k1, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, __k.__k1 AS __k1, v AS "__a0" FROM "public"."src" AS "src" JOIN pg_temp.__trellis_k __k ON "src"."a" = __k.__k0 AND "src"."b" = __k.__k1) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_6" __l JOIN pg_temp.__trellis_k __k ON __l.__k0 = __k.__k0 AND __l.__k1 = __k.__k1) __o ON __n.__k0 = __o.__k0 AND __n.__k1 = __o.__k1 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR ((__o."__a0")::text, NULL) IS DISTINCT FROM ((__n."__a0")::text, NULL) WITH NO DATA;

-- load keys
INSERT INTO pg_temp.__trellis_k SELECT DISTINCT u.c0::integer, u.c1::text FROM unnest($1::text[], $2::text[]) AS u(c0, c1);

-- load keys
INSERT INTO pg_temp.__trellis_b SELECT (SELECT __k0 FROM pg_temp.__trellis_k ORDER BY __k0 LIMIT 1), (SELECT __k0 FROM pg_temp.__trellis_k ORDER BY __k0 DESC LIMIT 1);

-- apply
INSERT INTO pg_temp.__trellis_c SELECT coalesce(__n.__k0, __o.__k0) AS __k0, coalesce(__n.__k1, __o.__k1) AS __k1, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, __k.__k1 AS __k1, v AS "__a0" FROM "public"."src" AS "src" JOIN pg_temp.__trellis_k __k ON "src"."a" = __k.__k0 AND "src"."b" = __k.__k1 AND "src"."a" >= (SELECT __lo FROM pg_temp.__trellis_b) AND "src"."a" <= (SELECT __hi FROM pg_temp.__trellis_b)) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_6" __l JOIN pg_temp.__trellis_k __k ON __l.__k0 = __k.__k0 AND __l.__k1 = __k.__k1 AND __l.__k0 >= (SELECT __lo FROM pg_temp.__trellis_b) AND __l.__k0 <= (SELECT __hi FROM pg_temp.__trellis_b)) __o ON __n.__k0 = __o.__k0 AND __n.__k1 = __o.__k1 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR ((__o."__a0")::text, NULL) IS DISTINCT FROM ((__n."__a0")::text, NULL);

-- apply
SET LOCAL enable_hashjoin = off;

-- apply
SET LOCAL enable_mergejoin = off;

-- apply
MERGE INTO "trellis"."ledger_6" __l USING pg_temp.__trellis_c __c ON __l.ctid = __c.__ot WHEN MATCHED AND NOT __c.__has THEN DELETE WHEN MATCHED THEN UPDATE SET "__a0" = __c.__na0 WHEN NOT MATCHED AND __c.__has THEN INSERT (__k0, __k1, "__a0") VALUES (__c.__k0, __c.__k1, __c.__na0);

-- apply
RESET enable_hashjoin;

-- apply
RESET enable_mergejoin;

-- apply
UPDATE "trellis"."state_6" __t SET "__rows" = __t."__rows" + __d.__dn, "__x0" = greatest(__t."__x0", __d.__x0), "__x1" = __t."__x1" + __d.__dn FROM (SELECT sum(__dn) AS __dn, max(__x0) FILTER (WHERE __dn > 0) AS __x0 FROM (SELECT -1 AS __dn, __oa0 AS __x0 FROM pg_temp.__trellis_c WHERE __had UNION ALL SELECT 1 AS __dn, __na0 AS __x0 FROM pg_temp.__trellis_c WHERE __has) __x HAVING sum(__dn) <> 0 OR max(__x0) FILTER (WHERE __dn > 0) IS NOT NULL) __d;

-- apply
UPDATE "trellis"."state_6" __t SET "__x0" = __r.__r0 FROM (SELECT __x.__tid, __z.* FROM (SELECT max(__oa0) AS __m0 FROM pg_temp.__trellis_c WHERE __had) __a CROSS JOIN LATERAL (SELECT __y.ctid AS __tid, __y."__x0" AS __o0 FROM "trellis"."state_6" __y WHERE true OFFSET 0) __x CROSS JOIN LATERAL (SELECT (SELECT max(__l."__a0") FROM "trellis"."ledger_6" __l WHERE true) AS __r0 WHERE __x.__tid IS NOT NULL OFFSET 0) __z WHERE ((__a.__m0 IS NOT NULL AND (__x.__o0 IS NULL OR __a.__m0 >= __x.__o0))) AND (__x.__o0, NULL) IS DISTINCT FROM (__z.__r0, NULL)) __r WHERE __t.ctid = __r.__tid;

-- apply
DELETE FROM "public"."agg_total_extreme";

-- apply
INSERT INTO "public"."agg_total_extreme" ("hi", "q") SELECT __s.__x0 AS "hi", __s.__x1 + 1 AS "q" FROM "trellis"."state_6" __s WHERE true;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."src" ORDER BY "a", "b" LIMIT $1;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."src" WHERE ("a", "b") > ($1::integer, $2::text) ORDER BY "a", "b" LIMIT $3;

-- walk
SELECT __k0::text AS __e0, __k1::text AS __e1 FROM "trellis"."ledger_6" ORDER BY __k0, __k1 LIMIT $1;

-- walk
SELECT __k0::text AS __e0, __k1::text AS __e1 FROM "trellis"."ledger_6" WHERE (__k0, __k1) > ($1::integer, $2::text) ORDER BY __k0, __k1 LIMIT $3;

-- reconcile
UPDATE "trellis"."state_6" __t SET "__rows" = __r."__rows", "__x0" = __r."__x0", "__x1" = __r."__x1" FROM (SELECT count(*) AS "__rows", max(__l."__a0") AS "__x0", count(*) AS "__x1" FROM "trellis"."ledger_6" __l) __r WHERE (__t."__rows", __t."__x0", __t."__x1", NULL) IS DISTINCT FROM (__r."__rows", __r."__x0", __r."__x1", NULL);

-- reconcile
DELETE FROM "public"."agg_total_extreme";

-- reconcile
INSERT INTO "public"."agg_total_extreme" ("hi", "q") SELECT __s.__x0 AS "hi", __s.__x1 + 1 AS "q" FROM "trellis"."state_6" __s WHERE true;

-- self-check query (columns [hi q], identity [])
SELECT max(v) AS "hi", count(*) + 1 AS "q" FROM "public"."src" AS "src";

