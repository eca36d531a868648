-- the target
part text
name text
n bigint
__rows bigint
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (part, name)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS SELECT CASE WHEN __n.__p THEN __n."__s0_0" ELSE __o."__s0_0" END AS "__s0_0", CASE WHEN __n.__p THEN __n."__o0" ELSE __o."__o0" END AS "__o0", CASE WHEN __n.__p THEN __n."__o1" ELSE __o."__o1" END AS "__o1", (__o.__p IS NOT NULL) AS __had, (__n.__p IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o.__g1 AS __og1, __n.__g1 AS __ng1 FROM (SELECT "f"."id" AS "__s0_0", "t"."__trellis_o"::bigint AS "__o0", "v"."__trellis_o"::bigint AS "__o1", true AS __p, t.part AS __g0, v.name AS __g1 FROM public.fact f, LATERAL regexp_split_to_table(f.s, ','::text) WITH ORDINALITY t(part, __trellis_o) JOIN (VALUES ('a'::text, 'A'::text, 1), ('b'::text, 'B'::text, 2)) v(part, name, __trellis_o) ON v.part = t.part WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0))) __n FULL JOIN (SELECT __t.*, __t.ctid AS __ot, true AS __p FROM "trellis"."ledger_12" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0))) __o ON __n."__s0_0" = __o."__s0_0" AND __n."__o0" = __o."__o0" AND __n."__o1" = __o."__o1" WHERE __n.__p IS NULL OR __o.__p IS NULL OR (__o.__g0, __o.__g1, NULL) IS DISTINCT FROM (__n.__g0, __n.__g1, NULL) WITH NO DATA;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_e (__tid tid) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- apply
INSERT INTO pg_temp.__trellis_c SELECT CASE WHEN __n.__p THEN __n."__s0_0" ELSE __o."__s0_0" END AS "__s0_0", CASE WHEN __n.__p THEN __n."__o0" ELSE __o."__o0" END AS "__o0", CASE WHEN __n.__p THEN __n."__o1" ELSE __o."__o1" END AS "__o1", (__o.__p IS NOT NULL) AS __had, (__n.__p IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o.__g1 AS __og1, __n.__g1 AS __ng1 FROM (SELECT "f"."id" AS "__s0_0", "t"."__trellis_o"::bigint AS "__o0", "v"."__trellis_o"::bigint AS "__o1", true AS __p, t.part AS __g0, v.name AS __g1 FROM public.fact f, LATERAL regexp_split_to_table(f.s, ','::text) WITH ORDINALITY t(part, __trellis_o) JOIN (VALUES ('a'::text, 'A'::text, 1), ('b'::text, 'B'::text, 2)) v(part, name, __trellis_o) ON v.part = t.part WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0))) __n FULL JOIN (SELECT __t.*, __t.ctid AS __ot, true AS __p FROM "trellis"."ledger_12" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0))) __o ON __n."__s0_0" = __o."__s0_0" AND __n."__o0" = __o."__o0" AND __n."__o1" = __o."__o1" WHERE __n.__p IS NULL OR __o.__p IS NULL OR (__o.__g0, __o.__g1, NULL) IS DISTINCT FROM (__n.__g0, __n.__g1, NULL);

-- apply
SET LOCAL enable_hashjoin = off;

-- apply
SET LOCAL enable_mergejoin = off;

-- apply
MERGE INTO "trellis"."ledger_12" __l USING pg_temp.__trellis_c __c ON __l.ctid = __c.__ot WHEN MATCHED AND NOT __c.__has THEN DELETE WHEN MATCHED THEN UPDATE SET __g0 = __c.__ng0, __g1 = __c.__ng1 WHEN NOT MATCHED AND __c.__has THEN INSERT ("__s0_0", "__o0", "__o1", __g0, __g1) VALUES (__c."__s0_0", __c."__o0", __c."__o1", __c.__ng0, __c.__ng1);

-- apply
RESET enable_hashjoin;

-- apply
RESET enable_mergejoin;

-- apply
WITH __u AS (INSERT INTO "public"."agg_function" AS __t ("part", "name", "__rows", "n") SELECT __d.__g0, __d.__g1, __d.__dn, __d.__dn FROM (SELECT __g0, __g1, sum(__dn) AS __dn FROM (SELECT __og0 AS __g0, __og1 AS __g1, -1 AS __dn FROM pg_temp.__trellis_c WHERE __had UNION ALL SELECT __ng0 AS __g0, __ng1 AS __g1, 1 AS __dn FROM pg_temp.__trellis_c WHERE __has) __x GROUP BY __g0, __g1 HAVING sum(__dn) <> 0) __d ON CONFLICT ("part", "name") DO UPDATE SET "__rows" = __t."__rows" + EXCLUDED."__rows", "n" = __t."n" + EXCLUDED."n" RETURNING __t.ctid AS __tid, __t."__rows" AS __n) INSERT INTO pg_temp.__trellis_e SELECT __tid FROM __u WHERE __n = 0;

-- apply
DELETE FROM "public"."agg_function" WHERE ctid = ANY (ARRAY(SELECT __tid FROM pg_temp.__trellis_e));

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."ledger_12" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."ledger_12" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- reconcile
DELETE FROM "public"."agg_function" __t WHERE NOT EXISTS (SELECT 1 FROM "trellis"."ledger_12" __l WHERE (__l.__g0 = __t."part" OR (__l.__g0 IS NULL AND __t."part" IS NULL)) AND (__l.__g1 = __t."name" OR (__l.__g1 IS NULL AND __t."name" IS NULL)));

-- reconcile
INSERT INTO "public"."agg_function" AS __t ("part", "name", "__rows", "n") SELECT "part", "name", "__rows", "n" FROM (SELECT __g0 AS "part", __g1 AS "name", count(*) AS "__rows", count(*) AS "n" FROM "trellis"."ledger_12" __l GROUP BY __g0, __g1) __r ON CONFLICT ("part", "name") DO UPDATE SET "__rows" = EXCLUDED."__rows", "n" = EXCLUDED."n" WHERE (__t."__rows", __t."n", NULL) IS DISTINCT FROM (EXCLUDED."__rows", EXCLUDED."n", NULL);

-- self-check query (columns [part name n], identity [part name])
SELECT t.part AS "part", v.name AS "name", count(*) AS "n" FROM public.fact f, LATERAL regexp_split_to_table(f.s, ','::text) WITH ORDINALITY t(part, __trellis_o) JOIN (VALUES ('a'::text, 'A'::text, 1), ('b'::text, 'B'::text, 2)) v(part, name, __trellis_o) ON v.part = t.part GROUP BY t.part, v.name;

-- self-check: keys of groups
WITH __trellis_g AS (SELECT * FROM unnest($1::text[], $2::text[]) AS __trellis_g(__trellis_v0, __trellis_v1))
SELECT DISTINCT __src, __key FROM (
  SELECT 0 AS __src, ARRAY[__l."__s0_0"::text] AS __key FROM "trellis"."ledger_12" __l, __trellis_g WHERE (__l.__g0 = __trellis_g.__trellis_v0::text OR (__l.__g0 IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND (__l.__g1 = __trellis_g.__trellis_v1::text OR (__l.__g1 IS NULL AND __trellis_g.__trellis_v1::text IS NULL)) AND __l."__s0_0" IS NOT NULL
  UNION ALL SELECT 0, ARRAY["f"."id"::text] FROM public.fact f, LATERAL regexp_split_to_table(f.s, ','::text) WITH ORDINALITY t(part, __trellis_o) JOIN (VALUES ('a'::text, 'A'::text, 1), ('b'::text, 'B'::text, 2)) v(part, name, __trellis_o) ON v.part = t.part, __trellis_g WHERE ((t.part) = __trellis_g.__trellis_v0::text OR ((t.part) IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND ((v.name) = __trellis_g.__trellis_v1::text OR ((v.name) IS NULL AND __trellis_g.__trellis_v1::text IS NULL)) AND "f"."id" IS NOT NULL
) AS __z;

