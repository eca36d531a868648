-- the level's target
d1 integer
n bigint
total bigint
__rows bigint
__id bigint GENERATED ALWAYS AS IDENTITY
__nn_total bigint
UNIQUE NULLS NOT DISTINCT (d1)
PRIMARY KEY (__id)

-- the owner's full query
SELECT n AS "n", count(*) AS "k", sum(total) AS "total" FROM (SELECT d1 AS "d1", count(*) AS "n", sum(v) AS "total" FROM "public"."fact" AS "fact" GROUP BY d1) AS "s" GROUP BY n;

-- the owner's query (over the level)
SELECT n AS "n", count(*) AS "k", sum(total) AS "total" FROM "trellis"."level_1_1" AS "s" GROUP BY n;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k (__k0 bigint) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS SELECT coalesce(__n.__k0, __o.__k0) AS __k0, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, n AS __g0, total AS "__a0" FROM "trellis"."level_1_1" AS "s" JOIN pg_temp.__trellis_k __k ON "s"."__id" = __k.__k0) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_public_level_owner" __l JOIN pg_temp.__trellis_k __k ON __l.__k0 = __k.__k0) __o ON __n.__k0 = __o.__k0 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL) WITH NO DATA;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_e (__tid tid) ON COMMIT DELETE ROWS;

-- apply (keys $1, first and last key $2 $3)
INSERT INTO pg_temp.__trellis_c SELECT coalesce(__n.__k0, __o.__k0) AS __k0, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, n AS __g0, total AS "__a0" FROM "trellis"."level_1_1" AS "s" JOIN (SELECT __u::bigint AS __k0 FROM unnest($1::bigint[]) AS __u) __k ON "s"."__id" = __k.__k0 AND "s"."__id" >= $2::bigint AND "s"."__id" <= $3::bigint) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_public_level_owner" __l JOIN (SELECT __u::bigint AS __k0 FROM unnest($1::bigint[]) AS __u) __k ON __l.__k0 = __k.__k0 AND __l.__k0 >= $2::bigint AND __l.__k0 <= $3::bigint) __o ON __n.__k0 = __o.__k0 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL);

-- apply
SET LOCAL enable_hashjoin = off;

-- apply
SET LOCAL enable_mergejoin = off;

-- apply
MERGE INTO "trellis"."ledger_public_level_owner" __l USING pg_temp.__trellis_c __c ON __l.ctid = __c.__ot WHEN MATCHED AND NOT __c.__has THEN DELETE WHEN MATCHED THEN UPDATE SET __g0 = __c.__ng0, "__a0" = __c.__na0 WHEN NOT MATCHED AND __c.__has THEN INSERT (__k0, __g0, "__a0") VALUES (__c.__k0, __c.__ng0, __c.__na0);

-- apply
RESET enable_hashjoin;

-- apply
RESET enable_mergejoin;

-- apply
WITH __u AS (INSERT INTO "public"."level_owner" AS __t ("n", "__rows", "k", "total", "__nn_total") SELECT __d.__g0, __d.__dn, __d.__dn, __d.__s1, __d.__nn1 FROM (SELECT __g0, sum(__dn) AS __dn, sum(__nn1) AS __nn1, sum(__s1) AS __s1 FROM (SELECT __og0 AS __g0, -1 AS __dn, -(CASE WHEN __oa0 IS NULL THEN 0 ELSE 1 END) AS __nn1, -(__oa0::numeric) AS __s1 FROM pg_temp.__trellis_c WHERE __had UNION ALL SELECT __ng0 AS __g0, 1 AS __dn, (CASE WHEN __na0 IS NULL THEN 0 ELSE 1 END) AS __nn1, (__na0::numeric) AS __s1 FROM pg_temp.__trellis_c WHERE __has) __x GROUP BY __g0 HAVING sum(__dn) <> 0 OR sum(__nn1) <> 0 OR coalesce(sum(__s1), 0) <> 0) __d ON CONFLICT ("n") DO UPDATE SET "__rows" = __t."__rows" + EXCLUDED."__rows", "k" = __t."k" + EXCLUDED."k", "total" = CASE WHEN __t."__nn_total" + EXCLUDED."__nn_total" = 0 THEN NULL ELSE coalesce(__t."total", 0) + coalesce(EXCLUDED."total", 0) END, "__nn_total" = __t."__nn_total" + EXCLUDED."__nn_total" RETURNING __t.ctid AS __tid, __t."__rows" AS __n) INSERT INTO pg_temp.__trellis_e SELECT __tid FROM __u WHERE __n = 0;

-- apply
DELETE FROM "public"."level_owner" WHERE ctid = ANY (ARRAY(SELECT __tid FROM pg_temp.__trellis_e));

-- walk
SELECT "__id"::text AS __e0 FROM "trellis"."level_1_1" ORDER BY "__id" LIMIT $1;

-- walk
SELECT "__id"::text AS __e0 FROM "trellis"."level_1_1" WHERE ("__id") > ($1::bigint) ORDER BY "__id" LIMIT $2;

-- walk
SELECT __k0::text AS __e0 FROM "trellis"."ledger_public_level_owner" ORDER BY __k0 LIMIT $1;

-- walk
SELECT __k0::text AS __e0 FROM "trellis"."ledger_public_level_owner" WHERE (__k0) > ($1::bigint) ORDER BY __k0 LIMIT $2;

-- reconcile
DELETE FROM "public"."level_owner" __t WHERE NOT EXISTS (SELECT 1 FROM "trellis"."ledger_public_level_owner" __l WHERE (__l.__g0 = __t."n" OR (__l.__g0 IS NULL AND __t."n" IS NULL)));

-- reconcile
INSERT INTO "public"."level_owner" AS __t ("n", "__rows", "k", "total", "__nn_total") SELECT "n", "__rows", "k", "total", "__nn_total" FROM (SELECT __g0 AS "n", count(*) AS "__rows", count(*) AS "k", sum("__a0") AS "total", count("__a0") AS "__nn_total" FROM "trellis"."ledger_public_level_owner" __l GROUP BY __g0) __r ON CONFLICT ("n") DO UPDATE SET "__rows" = EXCLUDED."__rows", "k" = EXCLUDED."k", "total" = EXCLUDED."total", "__nn_total" = EXCLUDED."__nn_total" WHERE (__t."__rows", __t."k", __t."total", __t."__nn_total", NULL) IS DISTINCT FROM (EXCLUDED."__rows", EXCLUDED."k", EXCLUDED."total", EXCLUDED."__nn_total", NULL);

-- range build: next ($1 lo, $2 limit)
SELECT max(__e), count(*) FROM (SELECT "__id" AS __e FROM "trellis"."level_1_1" WHERE "__id" >= $1::bigint ORDER BY "__id" LIMIT $2) __c;

-- range build: changes ($1 lo, $2 hi)
INSERT INTO pg_temp.__trellis_c SELECT coalesce(__n.__k0, __o.__k0) AS __k0, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT "s"."__id" AS __k0, n AS __g0, total AS "__a0" FROM "trellis"."level_1_1" AS "s" WHERE "s"."__id" >= $1::bigint AND "s"."__id" <= $2::bigint) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_public_level_owner" __l WHERE __l.__k0 >= $1::bigint AND __l.__k0 <= $2::bigint) __o ON __n.__k0 = __o.__k0 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL);

-- range build, ledger only: stored ($1 lo, $2 hi)
SELECT __k0::bigint FROM "trellis"."ledger_public_level_owner" WHERE __k0 >= $1::bigint AND __k0 <= $2::bigint;

-- range build, ledger only: copy ($1 lo, $2 hi, $3 keys left out)
INSERT INTO "trellis"."ledger_public_level_owner" (__k0, __g0, "__a0") SELECT "s"."__id", n, total FROM "trellis"."level_1_1" AS "s" WHERE "s"."__id" >= $1::bigint AND "s"."__id" <= $2::bigint AND "s"."__id" <> ALL ($3::bigint[]);

-- self-check query (columns [n k total], identity [n])
SELECT n AS "n", count(*) AS "k", sum(total) AS "total" FROM "trellis"."level_1_1" AS "s" GROUP BY n;

-- self-check: keys of groups
WITH __trellis_g AS (SELECT * FROM unnest($1::text[]) AS __trellis_g(__trellis_v0))
SELECT DISTINCT __src, __key FROM (
  SELECT 0 AS __src, ARRAY[__l.__k0::text] AS __key FROM "trellis"."ledger_public_level_owner" __l, __trellis_g WHERE (__l.__g0 = __trellis_g.__trellis_v0::bigint OR (__l.__g0 IS NULL AND __trellis_g.__trellis_v0::bigint IS NULL))
  UNION ALL SELECT 0, ARRAY["s"."__id"::text] FROM "trellis"."level_1_1" AS "s", __trellis_g WHERE ((n) = __trellis_g.__trellis_v0::bigint OR ((n) IS NULL AND __trellis_g.__trellis_v0::bigint IS NULL)) AND "s"."__id" IS NOT NULL
) AS __z;

