-- the target
id integer
v1 integer
PRIMARY KEY (id)

-- apply (keys $1, first and last key $2 $3)
MERGE INTO "public"."row_intkey" __t USING (SELECT __k.__k0, "fact"."id" IS NOT NULL AS __trellis_p, CASE WHEN "fact"."id" IS NOT NULL THEN id END AS "id", CASE WHEN "fact"."id" IS NOT NULL THEN v + 1 END AS "v1" FROM (SELECT __u::integer AS __k0 FROM unnest($1::bigint[]) AS __u) __k LEFT JOIN "public"."fact" AS "fact" ON "fact"."id" = __k.__k0 AND (v > 0) AND "fact"."id" >= $2::bigint AND "fact"."id" <= $3::bigint) __n ON __t."id" = __n.__k0 AND __t."id" >= $2::bigint AND __t."id" <= $3::bigint WHEN MATCHED AND NOT __n.__trellis_p THEN DELETE WHEN MATCHED AND (__t."v1", NULL) IS DISTINCT FROM (__n."v1", NULL) THEN UPDATE SET "v1" = __n."v1" WHEN NOT MATCHED AND __n.__trellis_p THEN INSERT ("id", "v1") VALUES (__n."id", __n."v1");

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."fact" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- walk
SELECT "id"::text AS __e0 FROM "public"."row_intkey" ORDER BY "id" LIMIT $1;

-- walk
SELECT "id"::text AS __e0 FROM "public"."row_intkey" WHERE ("id") > ($1::integer) ORDER BY "id" LIMIT $2;

-- range build: next ($1 lo, $2 limit)
SELECT max(__e), count(*) FROM (SELECT "id" AS __e FROM "public"."fact" WHERE "id" >= $1::bigint ORDER BY "id" LIMIT $2) __c;

-- range build: stored ($1 lo, $2 hi)
SELECT "id"::bigint FROM "public"."row_intkey" WHERE "id" >= $1::bigint AND "id" <= $2::bigint;

-- range build: copy ($1 lo, $2 hi, $3 keys left out)
INSERT INTO "public"."row_intkey" ("id", "v1") SELECT id AS "id", v + 1 AS "v1" FROM "public"."fact" AS "fact" WHERE (v > 0) AND "fact"."id" >= $1::bigint AND "fact"."id" <= $2::bigint AND "fact"."id" <> ALL ($3::bigint[]);

-- self-check query (columns [id v1], identity [id])
SELECT id AS "id", v + 1 AS "v1" FROM "public"."fact" AS "fact" WHERE v > 0;

