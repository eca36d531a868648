-- the level's target
root integer
id integer
depth integer
__s0_0 integer
__s1_0 integer
__d text
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (__s0_0, __d)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k1 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_ra ("__s0_0" integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("root" integer, "id" integer, "depth" integer, "__s0_0" integer, "__s1_0" integer, "__d" text, __depth integer) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- load source keys
INSERT INTO pg_temp.__trellis_k1 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- apply
INSERT INTO pg_temp.__trellis_ra SELECT DISTINCT __x."__s0_0" FROM (SELECT __t."__s0_0" FROM "trellis"."level_1_1" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT __t."__s0_0" FROM "trellis"."level_1_1" __t WHERE __t."__s1_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_k0 __x WHERE __x.__k0 = __t."__s0_0") UNION ALL SELECT "nodes"."id" FROM public.nodes WHERE (parent_id IS NULL) AND "nodes"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) UNION ALL SELECT "d"."__s0_0" FROM public.nodes n JOIN "trellis"."level_1_1" d ON n.parent_id = d.id WHERE true AND "n"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k1))) __x("__s0_0");

-- apply
ANALYZE pg_temp.__trellis_ra;

-- apply
INSERT INTO pg_temp.__trellis_n ("root", "id", "depth", "__s0_0", "__s1_0", "__d", __depth) WITH RECURSIVE __trellis_r("root", "id", "depth", "__s0_0", "__s1_0", __d, __depth) AS (SELECT id, id, 0, "nodes"."id", NULL::integer, ''::text, 0 FROM public.nodes WHERE (parent_id IS NULL) AND "nodes"."id" = ANY (ARRAY(SELECT "__s0_0" FROM pg_temp.__trellis_ra)) UNION ALL SELECT d.root, n.id, d.depth + 1, "d"."__s0_0", "n"."id", "d".__d || ROW("n"."id")::text, "d".__depth + 1 FROM public.nodes n JOIN __trellis_r d ON n.parent_id = d.id WHERE true AND "d".__depth < 1000) SELECT "root", "id", "depth", "__s0_0", "__s1_0", __d, __depth FROM __trellis_r;

-- apply
DO $trellis$ BEGIN IF EXISTS (SELECT 1 FROM pg_temp.__trellis_n WHERE __depth >= 1000) THEN RAISE EXCEPTION USING ERRCODE = '54001', MESSAGE = format('WITH RECURSIVE d: the derivation from one anchor row (anchor key %s) went past 1000 steps, so it follows a cycle that UNION ALL would follow forever, in PostgreSQL too', (SELECT ROW("__s0_0")::text FROM pg_temp.__trellis_n WHERE __depth >= 1000 LIMIT 1)), HINT = 'break the cycle in the source rows, stop the recursive term with a condition (carry a path: WHERE NOT id = ANY(path)), or write UNION, which ends cycles by itself'; END IF; END $trellis$;

-- apply
DELETE FROM "trellis"."level_1_1" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT "__s0_0" FROM pg_temp.__trellis_ra)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND __n."__d" = __t."__d");

-- apply
INSERT INTO "trellis"."level_1_1" AS __t ("root", "id", "depth", "__s0_0", "__s1_0", "__d") SELECT "root", "id", "depth", "__s0_0", "__s1_0", "__d" FROM pg_temp.__trellis_n ON CONFLICT ("__s0_0", "__d") DO UPDATE SET "root" = EXCLUDED."root", "id" = EXCLUDED."id", "depth" = EXCLUDED."depth", "__s1_0" = EXCLUDED."__s1_0" WHERE (__t."root", __t."id", __t."depth", __t."__s1_0", NULL) IS DISTINCT FROM (EXCLUDED."root", EXCLUDED."id", EXCLUDED."depth", EXCLUDED."__s1_0", NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."nodes" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."nodes" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."level_1_1" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "trellis"."level_1_1" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- self-check query (columns [root id depth __s0_0 __s1_0 __d], identity [__s0_0 __d])
SELECT __trellis_r."root" AS "root", __trellis_r."id" AS "id", __trellis_r."depth" AS "depth", __trellis_r."__s0_0" AS "__s0_0", __trellis_r."__s1_0" AS "__s1_0", __trellis_r.__d AS "__d" FROM (WITH RECURSIVE __trellis_r("root", "id", "depth", "__s0_0", "__s1_0", __d, __depth) AS (SELECT id, id, 0, "nodes"."id", NULL::integer, ''::text, 0 FROM public.nodes WHERE (parent_id IS NULL) AND true UNION ALL SELECT d.root, n.id, d.depth + 1, "d"."__s0_0", "n"."id", "d".__d || ROW("n"."id")::text, "d".__depth + 1 FROM public.nodes n JOIN __trellis_r d ON n.parent_id = d.id WHERE true AND "d".__depth < 1000) SELECT "root", "id", "depth", "__s0_0", "__s1_0", __d, __depth FROM __trellis_r) __trellis_r;

