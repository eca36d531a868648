-- the target
id integer
name text
w integer
__s0_0 integer
__s1_0 integer
__s2_0 integer
__s2_1 text
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (__s0_0, __s1_0, __s2_0, __s2_1)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k1 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k2 (__k0 integer, __k1 text) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("id" integer, "name" text, "w" integer, "__s0_0" integer, "__s1_0" integer, "__s2_0" integer, "__s2_1" text) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- load source keys
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- load source keys
INSERT INTO pg_temp.__trellis_k2 SELECT DISTINCT u.c0::integer, u.c1::text FROM unnest($1::text[], $2::text[]) AS u(c0, c1);

-- apply
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT __y.__c0 FROM (SELECT "f"."id" FROM public.fact f JOIN public.dim d ON d.id = f.d1 LEFT JOIN public.dim2 e ON e.a = f.d2 AND e.b = f.s WHERE true AND ("e"."a", "e"."b") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k2) UNION ALL SELECT __t."__s0_0" FROM "public"."row_join" __t WHERE (__t."__s2_0", __t."__s2_1") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k2)) __y(__c0) WHERE __y.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __y.__c0);

-- apply
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT __y.__c0 FROM (SELECT "d"."id" FROM public.fact f JOIN public.dim d ON d.id = f.d1 LEFT JOIN public.dim2 e ON e.a = f.d2 AND e.b = f.s WHERE true AND ("e"."a", "e"."b") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k2) UNION ALL SELECT __t."__s1_0" FROM "public"."row_join" __t WHERE (__t."__s2_0", __t."__s2_1") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k2)) __y(__c0) WHERE __y.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k1 __x WHERE __x.__k0 = __y.__c0);

-- apply
ANALYZE pg_temp.__trellis_k0;

-- apply
ANALYZE pg_temp.__trellis_k1;

-- apply
INSERT INTO pg_temp.__trellis_n ("id", "name", "w", "__s0_0", "__s1_0", "__s2_0", "__s2_1") SELECT f.id AS "id", d.name AS "name", e.w AS "w", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", "e"."a" AS "__s2_0", "e"."b" AS "__s2_1" FROM public.fact f JOIN public.dim d ON d.id = f.d1 LEFT JOIN public.dim2 e ON e.a = f.d2 AND e.b = f.s WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT f.id AS "id", d.name AS "name", e.w AS "w", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", "e"."a" AS "__s2_0", "e"."b" AS "__s2_1" FROM public.fact f JOIN public.dim d ON d.id = f.d1 LEFT JOIN public.dim2 e ON e.a = f.d2 AND e.b = f.s WHERE true AND "d"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id") UNION ALL SELECT f.id AS "id", d.name AS "name", e.w AS "w", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", "e"."a" AS "__s2_0", "e"."b" AS "__s2_1" FROM public.fact f JOIN public.dim d ON d.id = f.d1 LEFT JOIN public.dim2 e ON e.a = f.d2 AND e.b = f.s WHERE true AND ("e"."a", "e"."b") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k2) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id") AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k1 __x WHERE __x.__k0 = "d"."id");

-- apply
DELETE FROM "public"."row_join" WHERE ctid = ANY (ARRAY(SELECT __t.ctid FROM "public"."row_join" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND __n."__s1_0" = __t."__s1_0" AND ARRAY[__n."__s2_0"] = ARRAY[__t."__s2_0"] AND ARRAY[__n."__s2_1"] = ARRAY[__t."__s2_1"]) UNION ALL SELECT __t.ctid FROM "public"."row_join" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0") AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND __n."__s1_0" = __t."__s1_0" AND ARRAY[__n."__s2_0"] = ARRAY[__t."__s2_0"] AND ARRAY[__n."__s2_1"] = ARRAY[__t."__s2_1"]) UNION ALL SELECT __t.ctid FROM "public"."row_join" __t WHERE (__t."__s2_0", __t."__s2_1") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k2) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0") AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k1 __x WHERE __x.__k0 = __t."__s1_0") AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND __n."__s1_0" = __t."__s1_0" AND ARRAY[__n."__s2_0"] = ARRAY[__t."__s2_0"] AND ARRAY[__n."__s2_1"] = ARRAY[__t."__s2_1"])));

-- apply
INSERT INTO "public"."row_join" AS __t ("id", "name", "w", "__s0_0", "__s1_0", "__s2_0", "__s2_1") SELECT "id", "name", "w", "__s0_0", "__s1_0", "__s2_0", "__s2_1" FROM pg_temp.__trellis_n ON CONFLICT ("__s0_0", "__s1_0", "__s2_0", "__s2_1") DO UPDATE SET "id" = EXCLUDED."id", "name" = EXCLUDED."name", "w" = EXCLUDED."w" WHERE (__t."id", __t."name", __t."w", NULL) IS DISTINCT FROM (EXCLUDED."id", EXCLUDED."name", EXCLUDED."w", NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."row_join" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."row_join" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- self-check query (columns [id name w __s0_0 __s1_0 __s2_0 __s2_1], identity [__s0_0 __s1_0 __s2_0 __s2_1])
SELECT f.id AS "id", d.name AS "name", e.w AS "w", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0", "e"."a" AS "__s2_0", "e"."b" AS "__s2_1" FROM public.fact f JOIN public.dim d ON d.id = f.d1 LEFT JOIN public.dim2 e ON e.a = f.d2 AND e.b = f.s;

