-- the target
name text
pct numeric
PRIMARY KEY (name)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k1 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS SELECT CASE WHEN __n.__p THEN __n."__s0_0" ELSE __o."__s0_0" END AS "__s0_0", CASE WHEN __n.__p THEN __n."__s1_0" ELSE __o."__s1_0" END AS "__s1_0", (__o.__p IS NOT NULL) AS __had, (__n.__p IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", true AS __p, d.name AS __g0, f.v AS "__a0" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", true AS __p, d.name AS __g0, f.v AS "__a0" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE true AND "d"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id")) __n FULL JOIN (SELECT __t.*, __t.ctid AS __ot, true AS __p FROM "trellis"."ledger_9" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT __t.*, __t.ctid AS __ot, true AS __p FROM "trellis"."ledger_9" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0")) __o ON __n."__s0_0" = __o."__s0_0" AND __n."__s1_0" = __o."__s1_0" WHERE __n.__p IS NULL OR __o.__p IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL) WITH NO DATA;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- load source keys
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- apply
INSERT INTO pg_temp.__trellis_c SELECT CASE WHEN __n.__p THEN __n."__s0_0" ELSE __o."__s0_0" END AS "__s0_0", CASE WHEN __n.__p THEN __n."__s1_0" ELSE __o."__s1_0" END AS "__s1_0", (__o.__p IS NOT NULL) AS __had, (__n.__p IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", true AS __p, d.name AS __g0, f.v AS "__a0" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", true AS __p, d.name AS __g0, f.v AS "__a0" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE true AND "d"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id")) __n FULL JOIN (SELECT __t.*, __t.ctid AS __ot, true AS __p FROM "trellis"."ledger_9" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT __t.*, __t.ctid AS __ot, true AS __p FROM "trellis"."ledger_9" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0")) __o ON __n."__s0_0" = __o."__s0_0" AND __n."__s1_0" = __o."__s1_0" WHERE __n.__p IS NULL OR __o.__p IS NULL OR (__o.__g0, __o."__a0", NULL) IS DISTINCT FROM (__n.__g0, __n."__a0", NULL);

-- apply
SET LOCAL enable_hashjoin = off;

-- apply
SET LOCAL enable_mergejoin = off;

-- apply
MERGE INTO "trellis"."ledger_9" __l USING pg_temp.__trellis_c __c ON __l.ctid = __c.__ot WHEN MATCHED AND NOT __c.__has THEN DELETE WHEN MATCHED THEN UPDATE SET __g0 = __c.__ng0, "__a0" = __c.__na0 WHEN NOT MATCHED AND __c.__has THEN INSERT ("__s0_0", "__s1_0", __g0, "__a0") VALUES (__c."__s0_0", __c."__s1_0", __c.__ng0, __c.__na0);

-- apply
RESET enable_hashjoin;

-- apply
RESET enable_mergejoin;

-- apply
MERGE INTO "trellis"."state_9" __t USING (SELECT __g0, sum(__dn) AS __dn, sum(__nn0) AS __nn0, sum(__s0) AS __s0 FROM (SELECT __og0 AS __g0, -1 AS __dn, -(CASE WHEN __oa0 IS NULL THEN 0 ELSE 1 END) AS __nn0, -(__oa0::bigint) AS __s0 FROM pg_temp.__trellis_c WHERE __had UNION ALL SELECT __ng0 AS __g0, 1 AS __dn, (CASE WHEN __na0 IS NULL THEN 0 ELSE 1 END) AS __nn0, (__na0::bigint) AS __s0 FROM pg_temp.__trellis_c WHERE __has) __x GROUP BY __g0 HAVING sum(__dn) <> 0 OR sum(__nn0) <> 0 OR coalesce(sum(__s0), 0) <> 0) __d ON __t."name" = __d.__g0 WHEN MATCHED AND __t."__rows" + __d.__dn = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET "__rows" = __t."__rows" + __d.__dn, "__x0" = CASE WHEN __t."__nn___x0" + __d.__nn0 = 0 THEN NULL ELSE coalesce(__t."__x0", 0) + coalesce(__d.__s0, 0) END, "__nn___x0" = __t."__nn___x0" + __d.__nn0, "__x1" = __t."__x1" + __d.__dn WHEN NOT MATCHED THEN INSERT ("name", "__rows", "__x0", "__nn___x0", "__x1") VALUES (__d.__g0, __d.__dn, __d.__s0, __d.__nn0, __d.__dn);

-- apply
DELETE FROM "public"."having_pct" __t USING (SELECT __og0 AS __g0 FROM pg_temp.__trellis_c WHERE __had UNION SELECT __ng0 FROM pg_temp.__trellis_c WHERE __has) __a WHERE __t."name" = __a.__g0 AND NOT EXISTS (SELECT 1 FROM "trellis"."state_9" __s WHERE __s."name" = __a.__g0 AND (__s.__x1 > 2));

-- apply
INSERT INTO "public"."having_pct" AS __t ("name", "pct") SELECT __s."name" AS "name", (100.0 * __s.__x0) / (NULLIF(__s.__x1, 0)) AS "pct" FROM (SELECT __og0 AS __g0 FROM pg_temp.__trellis_c WHERE __had UNION SELECT __ng0 FROM pg_temp.__trellis_c WHERE __has) __a JOIN "trellis"."state_9" __s ON __s."name" = __a.__g0 WHERE (__s.__x1 > 2) ON CONFLICT ("name") DO UPDATE SET "pct" = EXCLUDED."pct" WHERE ((__t."pct")::text, NULL) IS DISTINCT FROM ((EXCLUDED."pct")::text, NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."ledger_9" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."ledger_9" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- reconcile
DELETE FROM "trellis"."state_9" __t WHERE NOT EXISTS (SELECT 1 FROM "trellis"."ledger_9" __l WHERE __l.__g0 = __t."name");

-- reconcile
INSERT INTO "trellis"."state_9" AS __t ("name", "__rows", "__x0", "__nn___x0", "__x1") SELECT "name", "__rows", "__x0", "__nn___x0", "__x1" FROM (SELECT __g0 AS "name", count(*) AS "__rows", sum("__a0") AS "__x0", count("__a0") AS "__nn___x0", count(*) AS "__x1" FROM "trellis"."ledger_9" __l GROUP BY __g0) __r ON CONFLICT ("name") DO UPDATE SET "__rows" = EXCLUDED."__rows", "__x0" = EXCLUDED."__x0", "__nn___x0" = EXCLUDED."__nn___x0", "__x1" = EXCLUDED."__x1" WHERE (__t."__rows", __t."__x0", __t."__nn___x0", __t."__x1", NULL) IS DISTINCT FROM (EXCLUDED."__rows", EXCLUDED."__x0", EXCLUDED."__nn___x0", EXCLUDED."__x1", NULL);

-- reconcile
DELETE FROM "public"."having_pct" __t USING (SELECT __s."name" AS __g0 FROM "trellis"."state_9" __s UNION SELECT __t."name" AS __g0 FROM "public"."having_pct" __t) __a WHERE __t."name" = __a.__g0 AND NOT EXISTS (SELECT 1 FROM "trellis"."state_9" __s WHERE __s."name" = __a.__g0 AND (__s.__x1 > 2));

-- reconcile
INSERT INTO "public"."having_pct" AS __t ("name", "pct") SELECT __s."name" AS "name", (100.0 * __s.__x0) / (NULLIF(__s.__x1, 0)) AS "pct" FROM (SELECT __s."name" AS __g0 FROM "trellis"."state_9" __s UNION SELECT __t."name" AS __g0 FROM "public"."having_pct" __t) __a JOIN "trellis"."state_9" __s ON __s."name" = __a.__g0 WHERE (__s.__x1 > 2) ON CONFLICT ("name") DO UPDATE SET "pct" = EXCLUDED."pct" WHERE ((__t."pct")::text, NULL) IS DISTINCT FROM ((EXCLUDED."pct")::text, NULL);

-- self-check query (columns [name pct], identity [name])
SELECT d.name AS "name", (100.0 * sum(f.v)) / (NULLIF(count(*), 0)) AS "pct" FROM public.fact f JOIN public.dim d ON d.id = f.d1 GROUP BY d.name HAVING count(*) > 2;

-- self-check: keys of groups
WITH __trellis_g AS (SELECT * FROM unnest($1::text[]) AS __trellis_g(__trellis_v0))
SELECT DISTINCT __src, __key FROM (
  SELECT 0 AS __src, ARRAY[__l."__s0_0"::text] AS __key FROM "trellis"."ledger_9" __l, __trellis_g WHERE (__l.__g0 = __trellis_g.__trellis_v0::text OR (__l.__g0 IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND __l."__s0_0" IS NOT NULL
  UNION ALL SELECT 0, ARRAY["f"."id"::text] FROM public.fact f JOIN public.dim d ON d.id = f.d1, __trellis_g WHERE ((d.name) = __trellis_g.__trellis_v0::text OR ((d.name) IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND "f"."id" IS NOT NULL
  UNION ALL SELECT 1 AS __src, ARRAY[__l."__s1_0"::text] AS __key FROM "trellis"."ledger_9" __l, __trellis_g WHERE (__l.__g0 = __trellis_g.__trellis_v0::text OR (__l.__g0 IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND __l."__s1_0" IS NOT NULL
  UNION ALL SELECT 1, ARRAY["d"."id"::text] FROM public.fact f JOIN public.dim d ON d.id = f.d1, __trellis_g WHERE ((d.name) = __trellis_g.__trellis_v0::text OR ((d.name) IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND "d"."id" IS NOT NULL
) AS __z;

