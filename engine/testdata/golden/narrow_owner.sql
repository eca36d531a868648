-- the owner's query (over the level)
SELECT f.id AS "id", f.v AS "v" FROM public.fact f LEFT JOIN trellis.level_1_1 __dep1 ON true WHERE f.v::numeric > __dep1.v;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k1 (__k0 bigint) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("id" integer, "v" integer, "__s0_0" integer, "__s1_0" bigint) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- load source keys
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT u.c0::bigint FROM unnest($1::text[]) AS u(c0);

-- apply
WITH __p (__a0, __av, __l0, __lv) AS MATERIALIZED (SELECT __a."__id", __a.v, __l."__id", __l.v FROM "trellis"."applied_2_0" __a LEFT JOIN "trellis"."level_1_1" __l ON true), __full AS (SELECT * FROM __p WHERE NOT ROW(__p.__a0) IS NOT DISTINCT FROM ROW(__p.__l0) OR ((__p.__av) IS DISTINCT FROM (__p.__lv) AND ((__p.__av) IS NULL OR (__p.__lv) IS NULL))), __in AS (INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT __x.__c0 FROM (SELECT __full.__a0 FROM __full UNION ALL SELECT __full.__l0 FROM __full) __x(__c0) WHERE __x.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k1 __y WHERE __y.__k0 = __x.__c0) RETURNING 1), __out AS (DELETE FROM pg_temp.__trellis_k1 WHERE NOT EXISTS (SELECT 1 FROM __full) RETURNING 1), __r0 AS (INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT "f"."id" FROM "public"."fact" AS "f", __p WHERE ROW(__p.__a0) IS NOT DISTINCT FROM ROW(__p.__l0) AND (((__p.__av) <> (__p.__lv) AND f.v BETWEEN floor(least((__p.__av), (__p.__lv)))::bigint AND ceil(greatest((__p.__av), (__p.__lv)))::bigint)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __y WHERE __y.__k0 = "f"."id") RETURNING 1), __cur AS MATERIALIZED (SELECT __l."__id", __l.v FROM (SELECT) __one LEFT JOIN "trellis"."level_1_1" __l ON true), __gone AS (DELETE FROM "trellis"."applied_2_0" __a WHERE NOT EXISTS (SELECT 1 FROM __cur WHERE ROW(__cur.*) IS NOT DISTINCT FROM ROW(__a.*))), __new AS (INSERT INTO "trellis"."applied_2_0" SELECT * FROM __cur WHERE NOT EXISTS (SELECT 1 FROM "trellis"."applied_2_0" __a WHERE ROW(__cur.*) IS NOT DISTINCT FROM ROW(__a.*))) SELECT (SELECT count(*) FROM __in) - (SELECT count(*) FROM __out) + (SELECT count(*) FROM __r0);

-- apply
ANALYZE pg_temp.__trellis_k0;

-- apply
ANALYZE pg_temp.__trellis_k1;

-- apply
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT __y.__c0 FROM (SELECT "f"."id" FROM public.fact f LEFT JOIN trellis.applied_2_0 __dep1 ON true WHERE (f.v::numeric > __dep1.v) AND "__dep1"."__id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) UNION ALL SELECT __t."__s0_0" FROM "public"."narrow_owner" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1))) __y(__c0) WHERE __y.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __y.__c0);

-- apply
ANALYZE pg_temp.__trellis_k0;

-- apply
INSERT INTO pg_temp.__trellis_n ("id", "v", "__s0_0", "__s1_0") SELECT f.id AS "id", f.v AS "v", "f"."id" AS "__s0_0", "__dep1"."__id" AS "__s1_0" FROM public.fact f LEFT JOIN trellis.applied_2_0 __dep1 ON true WHERE (f.v::numeric > __dep1.v) AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT f.id AS "id", f.v AS "v", "f"."id" AS "__s0_0", "__dep1"."__id" AS "__s1_0" FROM public.fact f LEFT JOIN trellis.applied_2_0 __dep1 ON true WHERE (f.v::numeric > __dep1.v) AND "__dep1"."__id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id");

-- apply
DELETE FROM "public"."narrow_owner" WHERE ctid = ANY (ARRAY(SELECT __t.ctid FROM "public"."narrow_owner" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND ARRAY[__n."__s1_0"] = ARRAY[__t."__s1_0"]) UNION ALL SELECT __t.ctid FROM "public"."narrow_owner" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0") AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND ARRAY[__n."__s1_0"] = ARRAY[__t."__s1_0"])));

-- apply
INSERT INTO "public"."narrow_owner" AS __t ("id", "v", "__s0_0", "__s1_0") SELECT "id", "v", "__s0_0", "__s1_0" FROM pg_temp.__trellis_n ON CONFLICT ("__s0_0", "__s1_0") DO UPDATE SET "id" = EXCLUDED."id", "v" = EXCLUDED."v" WHERE (__t."id", __t."v", NULL) IS DISTINCT FROM (EXCLUDED."id", EXCLUDED."v", NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."narrow_owner" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."narrow_owner" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- self-check query (columns [id v __s0_0 __s1_0], identity [__s0_0 __s1_0])
SELECT f.id AS "id", f.v AS "v", "f"."id" AS "__s0_0", "__dep1"."__id" AS "__s1_0" FROM public.fact f LEFT JOIN trellis.level_1_1 __dep1 ON true WHERE f.v::numeric > __dep1.v;

