-- the target
b text
n bigint
s numeric
lo numeric
__rows bigint
__sum_s numeric
__nn_s bigint
__scales_s numeric
__special_s numeric
PRIMARY KEY (b)

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_k (__k0 integer, __k1 text) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_b (__lo integer, __hi integer) ON COMMIT DELETE ROWS;

-- setup
CREATE TEMP TABLE IF NOT EXISTS __trellis_c ON COMMIT DELETE ROWS AS SELECT coalesce(__n.__k0, __o.__k0) AS __k0, coalesce(__n.__k1, __o.__k1) AS __k1, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, __k.__k1 AS __k1, b AS __g0, v AS "__a0" FROM "public"."src" AS "src" JOIN pg_temp.__trellis_k __k ON "src"."a" = __k.__k0 AND "src"."b" = __k.__k1) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_2" __l JOIN pg_temp.__trellis_k __k ON __l.__k0 = __k.__k0 AND __l.__k1 = __k.__k1) __o ON __n.__k0 = __o.__k0 AND __n.__k1 = __o.__k1 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, (__o."__a0")::text, NULL) IS DISTINCT FROM (__n.__g0, (__n."__a0")::text, NULL) WITH NO DATA;

-- load keys
INSERT INTO pg_temp.__trellis_k SELECT DISTINCT u.c0::integer, u.c1::text FROM unnest($1::text[], $2::text[]) AS u(c0, c1);

-- load keys
INSERT INTO pg_temp.__trellis_b SELECT (SELECT __k0 FROM pg_temp.__trellis_k ORDER BY __k0 LIMIT 1), (SELECT __k0 FROM pg_temp.__trellis_k ORDER BY __k0 DESC LIMIT 1);

-- apply
INSERT INTO pg_temp.__trellis_c SELECT coalesce(__n.__k0, __o.__k0) AS __k0, coalesce(__n.__k1, __o.__k1) AS __k1, (__o.__k0 IS NOT NULL) AS __had, (__n.__k0 IS NOT NULL) AS __has, __o.__ot, __o.__g0 AS __og0, __n.__g0 AS __ng0, __o."__a0" AS __oa0, __n."__a0" AS __na0 FROM (SELECT __k.__k0 AS __k0, __k.__k1 AS __k1, b AS __g0, v AS "__a0" FROM "public"."src" AS "src" JOIN pg_temp.__trellis_k __k ON "src"."a" = __k.__k0 AND "src"."b" = __k.__k1 AND "src"."a" >= (SELECT __lo FROM pg_temp.__trellis_b) AND "src"."a" <= (SELECT __hi FROM pg_temp.__trellis_b)) __n FULL JOIN (SELECT __l.*, __l.ctid AS __ot FROM "trellis"."ledger_2" __l JOIN pg_temp.__trellis_k __k ON __l.__k0 = __k.__k0 AND __l.__k1 = __k.__k1 AND __l.__k0 >= (SELECT __lo FROM pg_temp.__trellis_b) AND __l.__k0 <= (SELECT __hi FROM pg_temp.__trellis_b)) __o ON __n.__k0 = __o.__k0 AND __n.__k1 = __o.__k1 WHERE __n.__k0 IS NULL OR __o.__k0 IS NULL OR (__o.__g0, (__o."__a0")::text, NULL) IS DISTINCT FROM (__n.__g0, (__n."__a0")::text, NULL);

-- apply
SET LOCAL enable_hashjoin = off;

-- apply
SET LOCAL enable_mergejoin = off;

-- apply
MERGE INTO "trellis"."ledger_2" __l USING pg_temp.__trellis_c __c ON __l.ctid = __c.__ot WHEN MATCHED AND NOT __c.__has THEN DELETE WHEN MATCHED THEN UPDATE SET __g0 = __c.__ng0, "__a0" = __c.__na0 WHEN NOT MATCHED AND __c.__has THEN INSERT (__k0, __k1, __g0, "__a0") VALUES (__c.__k0, __c.__k1, __c.__ng0, __c.__na0);

-- apply
RESET enable_hashjoin;

-- apply
RESET enable_mergejoin;

-- apply
MERGE INTO "public"."agg_single" __t USING (SELECT __g0, sum(__dn) AS __dn, sum(__nn1) AS __nn1, sum(__s1) AS __s1, sum(__h1) AS __h1, sum(__p1) AS __p1, min(__x2) FILTER (WHERE __dn > 0) AS __x2 FROM (SELECT __og0 AS __g0, -1 AS __dn, -(CASE WHEN __oa0 IS NULL THEN 0 ELSE 1 END) AS __nn1, -(CASE WHEN scale((__oa0)::numeric) IS NULL THEN 0 ELSE (__oa0)::numeric END) AS __s1, -(CASE WHEN scale((__oa0)::numeric) IS NULL THEN 0 ELSE coalesce(('{1,1e12,1e24,1e36,1e48,1e60,1e72,1e84,1e96,1e108,1e120,1e132,1e144,1e156,1e168,1e180,1e192}'::numeric[])[scale((__oa0)::numeric) + 1], ('1e' || 12 * scale((__oa0)::numeric))::numeric) END) AS __h1, -(CASE WHEN (__oa0)::numeric IS NULL OR scale((__oa0)::numeric) IS NOT NULL THEN 0 WHEN (__oa0)::numeric = 'NaN' THEN 1 WHEN (__oa0)::numeric > 0 THEN 1e12 ELSE 1e24 END) AS __p1, __oa0 AS __x2 FROM pg_temp.__trellis_c WHERE __had UNION ALL SELECT __ng0 AS __g0, 1 AS __dn, (CASE WHEN __na0 IS NULL THEN 0 ELSE 1 END) AS __nn1, (CASE WHEN scale((__na0)::numeric) IS NULL THEN 0 ELSE (__na0)::numeric END) AS __s1, (CASE WHEN scale((__na0)::numeric) IS NULL THEN 0 ELSE coalesce(('{1,1e12,1e24,1e36,1e48,1e60,1e72,1e84,1e96,1e108,1e120,1e132,1e144,1e156,1e168,1e180,1e192}'::numeric[])[scale((__na0)::numeric) + 1], ('1e' || 12 * scale((__na0)::numeric))::numeric) END) AS __h1, (CASE WHEN (__na0)::numeric IS NULL OR scale((__na0)::numeric) IS NOT NULL THEN 0 WHEN (__na0)::numeric = 'NaN' THEN 1 WHEN (__na0)::numeric > 0 THEN 1e12 ELSE 1e24 END) AS __p1, __na0 AS __x2 FROM pg_temp.__trellis_c WHERE __has) __x GROUP BY __g0 HAVING sum(__dn) <> 0 OR sum(__nn1) <> 0 OR sum(__s1) <> 0 OR sum(__h1) <> 0 OR sum(__p1) <> 0 OR min(__x2) FILTER (WHERE __dn > 0) IS NOT NULL) __d ON __t."b" = __d.__g0 WHEN MATCHED AND __t."__rows" + __d.__dn = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET "__rows" = __t."__rows" + __d.__dn, "n" = __t."n" + __d.__dn, "__sum_s" = __t."__sum_s" + __d.__s1, "__nn_s" = __t."__nn_s" + __d.__nn1, "__scales_s" = __t."__scales_s" + __d.__h1, "__special_s" = __t."__special_s" + __d.__p1, "s" = CASE WHEN (__t."__nn_s" + __d.__nn1) = 0 THEN NULL WHEN (__t."__special_s" + __d.__p1) = 0 THEN round(__t."__sum_s" + __d.__s1, (length((__t."__scales_s" + __d.__h1)::text) - 1) / 12) WHEN mod((__t."__special_s" + __d.__p1), 1e12) > 0 OR (mod(div((__t."__special_s" + __d.__p1), 1e12), 1e12) > 0 AND div((__t."__special_s" + __d.__p1), 1e24) > 0) THEN 'NaN'::numeric WHEN mod(div((__t."__special_s" + __d.__p1), 1e12), 1e12) > 0 THEN 'Infinity'::numeric ELSE '-Infinity'::numeric END, "lo" = least(__t."lo", __d.__x2) WHEN NOT MATCHED THEN INSERT ("b", "__rows", "n", "s", "__sum_s", "__nn_s", "__scales_s", "__special_s", "lo") VALUES (__d.__g0, __d.__dn, __d.__dn, CASE WHEN (__d.__nn1) = 0 THEN NULL WHEN (__d.__p1) = 0 THEN round(__d.__s1, (length((__d.__h1)::text) - 1) / 12) WHEN mod((__d.__p1), 1e12) > 0 OR (mod(div((__d.__p1), 1e12), 1e12) > 0 AND div((__d.__p1), 1e24) > 0) THEN 'NaN'::numeric WHEN mod(div((__d.__p1), 1e12), 1e12) > 0 THEN 'Infinity'::numeric ELSE '-Infinity'::numeric END, __d.__s1, __d.__nn1, __d.__h1, __d.__p1, __d.__x2);

-- apply
UPDATE "public"."agg_single" __t SET "lo" = __r.__r2 FROM (SELECT __x.__tid, __z.* FROM (SELECT __og0 AS __g0, min(__oa0) AS __m2 FROM pg_temp.__trellis_c WHERE __had GROUP BY __og0) __a CROSS JOIN LATERAL (SELECT __y.ctid AS __tid, __y."lo" AS __o2 FROM "public"."agg_single" __y WHERE __y."b" = __a.__g0 OFFSET 0) __x CROSS JOIN LATERAL (SELECT (SELECT min(__l."__a0") FROM "trellis"."ledger_2" __l WHERE __l.__g0 = __a.__g0) AS __r2 WHERE __x.__tid IS NOT NULL OFFSET 0) __z WHERE ((__a.__m2 IS NOT NULL AND (__x.__o2 IS NULL OR __a.__m2 <= __x.__o2))) AND (__x.__o2, NULL) IS DISTINCT FROM (__z.__r2, NULL)) __r WHERE __t.ctid = __r.__tid;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."src" ORDER BY "a", "b" LIMIT $1;

-- walk
SELECT "a"::text AS __e0, "b"::text AS __e1 FROM "public"."src" WHERE ("a", "b") > ($1::integer, $2::text) ORDER BY "a", "b" LIMIT $3;

-- walk
SELECT __k0::text AS __e0, __k1::text AS __e1 FROM "trellis"."ledger_2" ORDER BY __k0, __k1 LIMIT $1;

-- walk
SELECT __k0::text AS __e0, __k1::text AS __e1 FROM "trellis"."ledger_2" WHERE (__k0, __k1) > ($1::integer, $2::text) ORDER BY __k0, __k1 LIMIT $3;

-- reconcile
DELETE FROM "public"."agg_single" __t WHERE NOT EXISTS (SELECT 1 FROM "trellis"."ledger_2" __l WHERE __l.__g0 = __t."b");

-- reconcile
INSERT INTO "public"."agg_single" AS __t ("b", "__rows", "n", "s", "__sum_s", "__nn_s", "__scales_s", "__special_s", "lo") SELECT "b", "__rows", "n", "s", "__sum_s", "__nn_s", "__scales_s", "__special_s", "lo" FROM (SELECT __g0 AS "b", count(*) AS "__rows", count(*) AS "n", sum("__a0") AS "s", coalesce(sum(CASE WHEN scale(("__a0")::numeric) IS NULL THEN 0 ELSE ("__a0")::numeric END), 0) AS "__sum_s", count("__a0") AS "__nn_s", coalesce(sum(CASE WHEN scale(("__a0")::numeric) IS NULL THEN 0 ELSE coalesce(('{1,1e12,1e24,1e36,1e48,1e60,1e72,1e84,1e96,1e108,1e120,1e132,1e144,1e156,1e168,1e180,1e192}'::numeric[])[scale(("__a0")::numeric) + 1], ('1e' || 12 * scale(("__a0")::numeric))::numeric) END), 0) AS "__scales_s", coalesce(sum(CASE WHEN ("__a0")::numeric IS NULL OR scale(("__a0")::numeric) IS NOT NULL THEN 0 WHEN ("__a0")::numeric = 'NaN' THEN 1 WHEN ("__a0")::numeric > 0 THEN 1e12 ELSE 1e24 END), 0) AS "__special_s", min(__l."__a0") AS "lo" FROM "trellis"."ledger_2" __l GROUP BY __g0) __r ON CONFLICT ("b") DO UPDATE SET "__rows" = EXCLUDED."__rows", "n" = EXCLUDED."n", "s" = EXCLUDED."s", "__sum_s" = EXCLUDED."__sum_s", "__nn_s" = EXCLUDED."__nn_s", "__scales_s" = EXCLUDED."__scales_s", "__special_s" = EXCLUDED."__special_s", "lo" = EXCLUDED."lo" WHERE (__t."__rows", __t."n", __t."s", __t."__sum_s", __t."__nn_s", __t."__scales_s", __t."__special_s", __t."lo", NULL) IS DISTINCT FROM (EXCLUDED."__rows", EXCLUDED."n", EXCLUDED."s", EXCLUDED."__sum_s", EXCLUDED."__nn_s", EXCLUDED."__scales_s", EXCLUDED."__special_s", EXCLUDED."lo", NULL);

-- self-check query (columns [b n s lo], identity [b])
SELECT b AS "b", count(*) AS "n", sum(v) AS "s", min(v) AS "lo" FROM "public"."src" AS "src" GROUP BY b;

-- self-check: keys of groups
WITH __trellis_g AS (SELECT * FROM unnest($1::text[]) AS __trellis_g(__trellis_v0))
SELECT DISTINCT __src, __key FROM (
  SELECT 0 AS __src, ARRAY[__l.__k0::text, __l.__k1::text] AS __key FROM "trellis"."ledger_2" __l, __trellis_g WHERE (__l.__g0 = __trellis_g.__trellis_v0::text OR (__l.__g0 IS NULL AND __trellis_g.__trellis_v0::text IS NULL))
  UNION ALL SELECT 0, ARRAY["src"."a"::text, "src"."b"::text] FROM "public"."src" AS "src", __trellis_g WHERE ((b) = __trellis_g.__trellis_v0::text OR ((b) IS NULL AND __trellis_g.__trellis_v0::text IS NULL)) AND "src"."a" IS NOT NULL
) AS __z;

