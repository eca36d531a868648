-- the target
a integer
b text
v2 numeric
PRIMARY KEY (a, b)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k (__k0 integer, __k1 text) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_b (__lo integer, __hi integer) ON COMMIT DELETE ROWS;

-- load keys
INSERT INTO pg_temp.__trellis_k SELECT DISTINCT u.c0::integer, u.c1::text FROM unnest($1::text[], $2::text[]) AS u(c0, c1);

-- load keys
INSERT INTO pg_temp.__trellis_b SELECT (SELECT __k0 FROM pg_temp.__trellis_k ORDER BY __k0 LIMIT 1), (SELECT __k0 FROM pg_temp.__trellis_k ORDER BY __k0 DESC LIMIT 1);

-- apply
MERGE INTO "public"."row_single" __t USING (SELECT __k.__k0, __k.__k1, "src"."a" IS NOT NULL AS __trellis_p, CASE WHEN "src"."a" IS NOT NULL THEN a END AS "a", CASE WHEN "src"."a" IS NOT NULL THEN b END AS "b", CASE WHEN "src"."a" IS NOT NULL THEN v * 2 END AS "v2" FROM pg_temp.__trellis_k __k LEFT JOIN "public"."src" AS "src" ON "src"."a" = __k.__k0 AND "src"."b" = __k.__k1 AND (v > 0) AND "src"."a" >= (SELECT __lo FROM pg_temp.__trellis_b) AND "src"."a" <= (SELECT __hi FROM pg_temp.__trellis_b)) __n ON __t."a" = __n.__k0 AND __t."b" = __n.__k1 AND __t."a" >= (SELECT __lo FROM pg_temp.__trellis_b) AND __t."a" <= (SELECT __hi FROM pg_temp.__trellis_b) WHEN MATCHED AND NOT __n.__trellis_p THEN DELETE WHEN MATCHED AND ((__t."v2")::text, NULL) IS DISTINCT FROM ((__n."v2")::text, NULL) THEN UPDATE SET "v2" = __n."v2" WHEN NOT MATCHED AND __n.__trellis_p THEN INSERT ("a", "b", "v2") VALUES (__n."a", __n."b", __n."v2");

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."src" ORDER BY "a", "b" LIMIT $1;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."src" WHERE ("a", "b") > ($1::integer, $2::text) ORDER BY "a", "b" LIMIT $3;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."row_single" ORDER BY "a", "b" LIMIT $1;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."row_single" WHERE ("a", "b") > ($1::integer, $2::text) ORDER BY "a", "b" LIMIT $3;

-- self-check query (columns [a b v2], identity [a b])
SELECT a AS "a", b AS "b", v * 2 AS "v2" FROM "public"."src" AS "src" WHERE v > 0;

