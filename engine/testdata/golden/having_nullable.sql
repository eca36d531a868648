-- the target
d1 integer
s2 bigint
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (d1)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS SELECT coalesce(__n.__k0, __o.__k0) AS __k0, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, d1 AS __g0, v AS "__a0" FROM "public"."fact" AS "fact" JOIN pg_temp.__trellis_k __k ON "fact"."id" = __k.__k0) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_10" __l JOIN pg_temp.__trellis_k __k ON __l.__k0 = __k.__k0) __o ON __n.__k0 = __o.__k0 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL) WITH NO DATA;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_e (__tid tid) ON COMMIT DELETE ROWS;

-- apply (keys $1, first and last key $2 $3)
INSERT INTO pg_temp.__trellis_c SELECT coalesce(__n.__k0, __o.__k0) AS __k0, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, d1 AS __g0, v AS "__a0" FROM "public"."fact" AS "fact" JOIN (SELECT __u::integer AS __k0 FROM unnest($1::bigint[]) AS __u) __k ON "fact"."id" = __k.__k0 AND "fact"."id" >= $2::bigint AND "fact"."id" <= $3::bigint) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_10" __l JOIN (SELECT __u::integer AS __k0 FROM unnest($1::bigint[]) AS __u) __k ON __l.__k0 = __k.__k0 AND __l.__k0 >= $2::bigint AND __l.__k0 <= $3::bigint) __o ON __n.__k0 = __o.__k0 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL);

-- apply
SET LOCAL enable_hashjoin = off;

-- apply
SET LOCAL enable_mergejoin = off;

-- apply
MERGE INTO "trellis"."ledger_10" __l USING pg_temp.__trellis_c __c ON __l.ctid = __c.__ot WHEN MATCHED AND NOT __c.__has THEN DELETE WHEN MATCHED THEN UPDATE SET __g0 = __c.__ng0, "__a0" = __c.__na0 WHEN NOT MATCHED AND __c.__has THEN INSERT (__k0, __g0, "__a0") VALUES (__c.__k0, __c.__ng0, __c.__na0);

-- apply
RESET enable_hashjoin;

-- apply
RESET enable_mergejoin;

-- apply
WITH __u AS (INSERT INTO "trellis"."state_10" AS __t ("d1", "__rows", "__x0", "__nn___x0", "__x1") SELECT __d.__g0, __d.__dn, __d.__s0, __d.__nn0, __d.__dn FROM (SELECT __g0, sum(__dn) AS __dn, sum(__nn0) AS __nn0, sum(__s0) AS __s0 FROM (SELECT __og0 AS __g0, -1 AS __dn, -(CASE WHEN __oa0 IS NULL THEN 0 ELSE 1 END) AS __nn0, -(__oa0::bigint) AS __s0 FROM pg_temp.__trellis_c WHERE __had UNION ALL SELECT __ng0 AS __g0, 1 AS __dn, (CASE WHEN __na0 IS NULL THEN 0 ELSE 1 END) AS __nn0, (__na0::bigint) AS __s0 FROM pg_temp.__trellis_c WHERE __has) __x GROUP BY __g0 HAVING sum(__dn) <> 0 OR sum(__nn0) <> 0 OR coalesce(sum(__s0), 0) <> 0) __d ON CONFLICT ("d1") DO UPDATE SET "__rows" = __t."__rows" + EXCLUDED."__rows", "__x0" = CASE WHEN __t."__nn___x0" + EXCLUDED."__nn___x0" = 0 THEN NULL ELSE coalesce(__t."__x0", 0) + coalesce(EXCLUDED."__x0", 0) END, "__nn___x0" = __t."__nn___x0" + EXCLUDED."__nn___x0", "__x1" = __t."__x1" + EXCLUDED."__x1" RETURNING __t.ctid AS __tid, __t."__rows" AS __n) INSERT INTO pg_temp.__trellis_e SELECT __tid FROM __u WHERE __n = 0;

-- apply
DELETE FROM "trellis"."state_10" WHERE ctid = ANY (ARRAY(SELECT __tid FROM pg_temp.__trellis_e));

-- apply
DELETE FROM "public"."having_nullable" __t USING (SELECT __og0 AS __g0 FROM pg_temp.__trellis_c WHERE __had UNION SELECT __ng0 FROM pg_temp.__trellis_c WHERE __has) __a WHERE (__t."d1" = __a.__g0 OR (__t."d1" IS NULL AND __a.__g0 IS NULL)) AND NOT EXISTS (SELECT 1 FROM "trellis"."state_10" __s WHERE (__s."d1" = __a.__g0 OR (__s."d1" IS NULL AND __a.__g0 IS NULL)) AND (__s.__x1 > 1));

-- apply
INSERT INTO "public"."having_nullable" AS __t ("d1", "s2") SELECT __s."d1" AS "d1", __s.__x0 * 2 AS "s2" FROM (SELECT __og0 AS __g0 FROM pg_temp.__trellis_c WHERE __had UNION SELECT __ng0 FROM pg_temp.__trellis_c WHERE __has) __a JOIN "trellis"."state_10" __s ON (__s."d1" = __a.__g0 OR (__s."d1" IS NULL AND __a.__g0 IS NULL)) WHERE (__s.__x1 > 1) ON CONFLICT ("d1") DO UPDATE SET "s2" = EXCLUDED."s2" WHERE (__t."s2", NULL) IS DISTINCT FROM (EXCLUDED."s2", NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT __k0::text AS __e0 FROM "trellis"."ledger_10" ORDER BY __k0 LIMIT $1;

-- walk
SELECT __k0::text AS __e0 FROM "trellis"."ledger_10" WHERE (__k0) > ($1::integer) ORDER BY __k0 LIMIT $2;

-- reconcile
DELETE FROM "trellis"."state_10" __t WHERE NOT EXISTS (SELECT 1 FROM "trellis"."ledger_10" __l WHERE (__l.__g0 = __t."d1" OR (__l.__g0 IS NULL AND __t."d1" IS NULL)));

-- reconcile
INSERT INTO "trellis"."state_10" AS __t ("d1", "__rows", "__x0", "__nn___x0", "__x1") SELECT "d1", "__rows", "__x0", "__nn___x0", "__x1" FROM (SELECT __g0 AS "d1", count(*) AS "__rows", sum("__a0") AS "__x0", count("__a0") AS "__nn___x0", count(*) AS "__x1" FROM "trellis"."ledger_10" __l GROUP BY __g0) __r ON CONFLICT ("d1") DO UPDATE SET "__rows" = EXCLUDED."__rows", "__x0" = EXCLUDED."__x0", "__nn___x0" = EXCLUDED."__nn___x0", "__x1" = EXCLUDED."__x1" WHERE (__t."__rows", __t."__x0", __t."__nn___x0", __t."__x1", NULL) IS DISTINCT FROM (EXCLUDED."__rows", EXCLUDED."__x0", EXCLUDED."__nn___x0", EXCLUDED."__x1", NULL);

-- reconcile
DELETE FROM "public"."having_nullable" __t USING (SELECT __s."d1" AS __g0 FROM "trellis"."state_10" __s UNION SELECT __t."d1" AS __g0 FROM "public"."having_nullable" __t) __a WHERE (__t."d1" = __a.__g0 OR (__t."d1" IS NULL AND __a.__g0 IS NULL)) AND NOT EXISTS (SELECT 1 FROM "trellis"."state_10" __s WHERE (__s."d1" = __a.__g0 OR (__s."d1" IS NULL AND __a.__g0 IS NULL)) AND (__s.__x1 > 1));

-- reconcile
INSERT INTO "public"."having_nullable" AS __t ("d1", "s2") SELECT __s."d1" AS "d1", __s.__x0 * 2 AS "s2" FROM (SELECT __s."d1" AS __g0 FROM "trellis"."state_10" __s UNION SELECT __t."d1" AS __g0 FROM "public"."having_nullable" __t) __a JOIN "trellis"."state_10" __s ON (__s."d1" = __a.__g0 OR (__s."d1" IS NULL AND __a.__g0 IS NULL)) WHERE (__s.__x1 > 1) ON CONFLICT ("d1") DO UPDATE SET "s2" = EXCLUDED."s2" WHERE (__t."s2", NULL) IS DISTINCT FROM (EXCLUDED."s2", NULL);

-- range build: next ($1 lo, $2 limit)
SELECT max(__e), count(*) FROM (SELECT "id" AS __e FROM "public"."fact" WHERE "id" >= $1::bigint ORDER BY "id" LIMIT $2) __c;

-- range build: changes ($1 lo, $2 hi)
INSERT INTO pg_temp.__trellis_c SELECT coalesce(__n.__k0, __o.__k0) AS __k0, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT "fact"."id" AS __k0, d1 AS __g0, v AS "__a0" FROM "public"."fact" AS "fact" WHERE "fact"."id" >= $1::bigint AND "fact"."id" <= $2::bigint) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_10" __l WHERE __l.__k0 >= $1::bigint AND __l.__k0 <= $2::bigint) __o ON __n.__k0 = __o.__k0 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL);

-- range build, ledger only: stored ($1 lo, $2 hi)
SELECT __k0::bigint FROM "trellis"."ledger_10" WHERE __k0 >= $1::bigint AND __k0 <= $2::bigint;

-- range build, ledger only: copy ($1 lo, $2 hi, $3 keys left out)
INSERT INTO "trellis"."ledger_10" (__k0, __g0, "__a0") SELECT "fact"."id", d1, v FROM "public"."fact" AS "fact" WHERE "fact"."id" >= $1::bigint AND "fact"."id" <= $2::bigint AND "fact"."id" <> ALL ($3::bigint[]);

-- self-check query (columns [d1 s2], identity [d1])
SELECT d1 AS "d1", sum(v) * 2 AS "s2" FROM "public"."fact" AS "fact" GROUP BY d1 HAVING count(*) > 1;

-- self-check: keys of groups
WITH __trellis_g AS (SELECT * FROM unnest($1::text[]) AS __trellis_g(__trellis_v0))
SELECT DISTINCT __src, __key FROM (
  SELECT 0 AS __src, ARRAY[__l.__k0::text] AS __key FROM "trellis"."ledger_10" __l, __trellis_g WHERE (__l.__g0 = __trellis_g.__trellis_v0::integer OR (__l.__g0 IS NULL AND __trellis_g.__trellis_v0::integer IS NULL))
  UNION ALL SELECT 0, ARRAY["fact"."id"::text] FROM "public"."fact" AS "fact", __trellis_g WHERE ((d1) = __trellis_g.__trellis_v0::integer OR ((d1) IS NULL AND __trellis_g.__trellis_v0::integer IS NULL)) AND "fact"."id" IS NOT NULL
) AS __z;

