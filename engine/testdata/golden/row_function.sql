-- the target
id integer
part text
__s0_0 integer
__o0 bigint
__id bigint GENERATED ALWAYS AS IDENTITY
UNIQUE NULLS NOT DISTINCT (__s0_0, __o0)
PRIMARY KEY (__id)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k0 (__k0 integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_n ("id" integer, "part" text, "__s0_0" integer, "__o0" bigint) ON COMMIT DELETE ROWS;

-- load source keys
INSERT INTO pg_temp.__trellis_k0 SELECT DISTINCT u.c0::integer FROM unnest($1::text[]) AS u(c0);

-- apply
INSERT INTO pg_temp.__trellis_n ("id", "part", "__s0_0", "__o0") SELECT f.id AS "id", t.part AS "part", "f"."id" AS "__s0_0", "t"."__trellis_o"::bigint AS "__o0" FROM public.fact f LEFT JOIN LATERAL regexp_split_to_table(f.s, ','::text) WITH ORDINALITY t(part, __trellis_o) ON true WHERE true AND "f"."id" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0));

-- apply
DELETE FROM "public"."row_function" WHERE ctid = ANY (ARRAY(SELECT __t.ctid FROM "public"."row_function" __t WHERE __t."__s0_0" = ANY (ARRAY(SELECT __k0 FROM pg_temp.__trellis_k0)) AND NOT EXISTS (SELECT 1 FROM pg_temp.__trellis_n __n WHERE __n."__s0_0" = __t."__s0_0" AND ARRAY[__n."__o0"] = ARRAY[__t."__o0"])));

-- apply
INSERT INTO "public"."row_function" AS __t ("id", "part", "__s0_0", "__o0") SELECT "id", "part", "__s0_0", "__o0" FROM pg_temp.__trellis_n ON CONFLICT ("__s0_0", "__o0") DO UPDATE SET "id" = EXCLUDED."id", "part" = EXCLUDED."part" WHERE (__t."id", __t."part", NULL) IS DISTINCT FROM (EXCLUDED."id", EXCLUDED."part", NULL);

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."row_function" WHERE "__s0_0" IS NOT NULL GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $1;

-- walk
SELECT "__s0_0"::text AS __e0 FROM "public"."row_function" WHERE "__s0_0" IS NOT NULL AND ("__s0_0") > ($1::integer) GROUP BY "__s0_0" ORDER BY "__s0_0" LIMIT $2;

-- self-check query (columns [id part __s0_0 __o0], identity [__s0_0 __o0])
SELECT f.id AS "id", t.part AS "part", "f"."id" AS "__s0_0", "t"."__trellis_o"::bigint AS "__o0" FROM public.fact f LEFT JOIN LATERAL regexp_split_to_table(f.s, ','::text) WITH ORDINALITY t(part, __trellis_o) ON true;

