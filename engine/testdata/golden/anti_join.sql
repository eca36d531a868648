-- the target
id integer
__s0_0 integer
__s1_0 integer
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (__s0_0, __s1_0)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k1 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("id" integer, "__s0_0" integer, "__s1_0" integer) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- load source keys
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- apply
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT __y.__c0 FROM (SELECT "f"."id" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE "d"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) UNION ALL SELECT __t."__s0_0" FROM "trellis"."mirror_5_0" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1))) __y(__c0) WHERE __y.__c0 IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __y.__c0);

-- apply
ANALYZE pg_temp.__trellis_k0;

-- apply
DELETE FROM "trellis"."mirror_5_0" WHERE ctid = ANY (ARRAY(SELECT __t.ctid FROM "trellis"."mirror_5_0" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT __t.ctid FROM "trellis"."mirror_5_0" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0")));

-- apply
INSERT INTO "trellis"."mirror_5_0" ("__s0_0", "__s1_0") SELECT "f"."id", "d"."id" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT "f"."id", "d"."id" FROM public.fact f JOIN public.dim d ON d.id = f.d1 WHERE true AND "d"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id") ON CONFLICT DO NOTHING;

-- apply
INSERT INTO pg_temp.__trellis_n ("id", "__s0_0", "__s1_0") SELECT f.id AS "id", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0" FROM public.fact f LEFT JOIN public.dim d ON d.id = f.d1 WHERE (d.id IS NULL) AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT f.id AS "id", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0" FROM public.fact f LEFT JOIN public.dim d ON d.id = f.d1 WHERE (d.id IS NULL) AND "d"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = "f"."id");

-- apply
DELETE FROM "public"."anti_join" WHERE ctid = ANY (ARRAY(SELECT __t.ctid FROM "public"."anti_join" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND ARRAY[__n."__s1_0"] = ARRAY[__t."__s1_0"]) UNION ALL SELECT __t.ctid FROM "public"."anti_join" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0") AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND ARRAY[__n."__s1_0"] = ARRAY[__t."__s1_0"])));

-- apply
INSERT INTO "public"."anti_join" AS __t ("id", "__s0_0", "__s1_0") SELECT "id", "__s0_0", "__s1_0" FROM pg_temp.__trellis_n ON CONFLICT ("__s0_0", "__s1_0") DO UPDATE SET "id" = EXCLUDED."id" WHERE (__t."id", NULL) IS DISTINCT FROM (EXCLUDED."id", NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."anti_join" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."anti_join" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."mirror_5_0" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."mirror_5_0" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- self-check query (columns [id __s0_0 __s1_0], identity [__s0_0 __s1_0])
SELECT f.id AS "id", "f"."id" AS "__s0_0", "d"."id" AS "__s1_0" FROM public.fact f LEFT JOIN public.dim d ON d.id = f.d1 WHERE d.id IS NULL;

