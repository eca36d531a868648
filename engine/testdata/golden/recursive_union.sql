-- the level's target
src integer
dst integer
__s0_0 integer
__s0_1 integer
__s1_0 integer
__s1_1 integer
__d text
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (__s0_0, __s0_1, __d)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer, __k1 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k1 (__k0 integer, __k1 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_ra ("__s0_0" integer, "__s0_1" integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("src" integer, "dst" integer, "__s0_0" integer, "__s0_1" integer, "__s1_0" integer, "__s1_1" integer, "__d" text, __depth integer) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer, u.c1::integer FROM unnest($1::text[], $2::text[]) AS u(c0, c1);

-- load source keys
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT u.c0::integer, u.c1::integer FROM unnest($1::text[], $2::text[]) AS u(c0, c1);

-- apply
INSERT INTO pg_temp.__trellis_ra SELECT DISTINCT __x."__s0_0", __x."__s0_1" FROM (SELECT __t."__s0_0", __t."__s0_1" FROM "trellis"."level_1_1" __t WHERE (__t."__s0_0", __t."__s0_1") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k0) UNION ALL SELECT __t."__s0_0", __t."__s0_1" FROM "trellis"."level_1_1" __t WHERE (__t."__s1_0", __t."__s1_1") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k1) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0" AND __x.__k1 = __t."__s0_1") UNION ALL SELECT "edges"."src", "edges"."dst" FROM public.edges WHERE true AND ("edges"."src", "edges"."dst") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k0) UNION ALL SELECT "r"."__s0_0", "r"."__s0_1" FROM "trellis"."level_1_1" r, public.edges e WHERE (e.src = r.dst) AND ("e"."src", "e"."dst") IN (SELECT __k0, __k1 FROM pg_temp.__trellis_k1)) __x("__s0_0", "__s0_1");

-- apply
ANALYZE pg_temp.__trellis_ra;

-- apply
INSERT INTO pg_temp.__trellis_n ("src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1", "__d") WITH RECURSIVE __trellis_r("src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1") AS (SELECT src, dst, "edges"."src", "edges"."dst", NULL::integer, NULL::integer FROM public.edges WHERE true AND ("edges"."src", "edges"."dst") IN (SELECT "__s0_0", "__s0_1" FROM pg_temp.__trellis_ra) UNION SELECT r.src, e.dst, "r"."__s0_0", "r"."__s0_1", "e"."src", "e"."dst" FROM __trellis_r r, public.edges e WHERE (e.src = r.dst)) SELECT "src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1", ROW("src", "dst", "__s1_0", "__s1_1")::text AS __d FROM __trellis_r;

-- apply
DELETE FROM "trellis"."level_1_1" __t WHERE (__t."__s0_0", __t."__s0_1") IN (SELECT "__s0_0", "__s0_1" FROM pg_temp.__trellis_ra) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND __n."__s0_1" = __t."__s0_1" AND __n."__d" = __t."__d");

-- apply
INSERT INTO "trellis"."level_1_1" AS __t ("src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1", "__d") SELECT "src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1", "__d" FROM pg_temp.__trellis_n ON CONFLICT ("__s0_0", "__s0_1", "__d") DO UPDATE SET "src" = EXCLUDED."src", "dst" = EXCLUDED."dst", "__s1_0" = EXCLUDED."__s1_0", "__s1_1" = EXCLUDED."__s1_1" WHERE (__t."src", __t."dst", __t."__s1_0", __t."__s1_1", NULL) IS DISTINCT FROM (EXCLUDED."src", EXCLUDED."dst", EXCLUDED."__s1_0", EXCLUDED."__s1_1", NULL);

-- walk
SELECT "src"::text AS __e0, "dst"::text AS __e1 FROM "public"."edges" ORDER BY "src", "dst" LIMIT $1;

-- walk
SELECT "src"::text AS __e0, "dst"::text AS __e1 FROM "public"."edges" WHERE ("src", "dst") > ($1::integer, $2::integer) ORDER BY "src", "dst" LIMIT $3;

-- walk
SELECT "__s0_0"::text AS __e0, "__s0_1"::text AS __e1 FROM "trellis"."level_1_1" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0", "__s0_1" ORDER BY "__s0_0", "__s0_1" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0, "__s0_1"::text AS __e1 FROM "trellis"."level_1_1" WHERE "__s0_0" IS NOT NULL AND ("__s0_0", "__s0_1") > ($1::integer, $2::integer) GROUP BY "__s0_0", "__s0_1" ORDER BY "__s0_0", "__s0_1" LIMIT $3;

-- self-check query (columns [src dst __s0_0 __s0_1 __s1_0 __s1_1 __d], identity [__s0_0 __s0_1 __d])
SELECT __trellis_r."src" AS "src", __trellis_r."dst" AS "dst", __trellis_r."__s0_0" AS "__s0_0", __trellis_r."__s0_1" AS "__s0_1", __trellis_r."__s1_0" AS "__s1_0", __trellis_r."__s1_1" AS "__s1_1", __trellis_r.__d AS "__d" FROM (WITH RECURSIVE __trellis_r("src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1") AS (SELECT src, dst, "edges"."src", "edges"."dst", NULL::integer, NULL::integer FROM public.edges WHERE true AND true UNION SELECT r.src, e.dst, "r"."__s0_0", "r"."__s0_1", "e"."src", "e"."dst" FROM __trellis_r r, public.edges e WHERE (e.src = r.dst)) SELECT "src", "dst", "__s0_0", "__s0_1", "__s1_0", "__s1_1", ROW("src", "dst", "__s1_0", "__s1_1")::text AS __d FROM __trellis_r) __trellis_r;

