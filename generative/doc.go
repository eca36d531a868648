// Package generative is trellis-repl's generative convergence suite:
// random programs (schemas, transform definitions, writes and actions the
// oracle does not model) whose oracle is PostgreSQL itself. After the
// writes, a check waits for convergence (WatermarkToken, AwaitConverged;
// it fails once no transform applies a key or builds a chunk for the
// converge timeout, or at three times that) and compares every target
// with its query, two ways with EXCEPT ALL: the query as the engine's
// plan renders it, and the SELECT the program wrote
// (with the target's column types against the query's); a transform whose
// rows can fail must hold exactly the failing rows' keys and equal its
// query without them (see Poison). A definition the engine refuses is a
// failure (kind "rejected"), unless it names something that does not
// exist (a statement shrinking removed) and PostgreSQL cannot plan its
// SELECT either. A failure prints its seed, is shrunk by
// delta debugging (re-running every candidate on a fresh database) and
// written as a regression file.
//
// # Programs
//
// Generate draws a program from a seed and a Profile: 2–4 tables (composite
// keys, nullable columns, int, bigint, numeric, text, boolean, float8 and
// date over small domains with NULLs, empty strings, extremes, values equal
// but printed differently, NaN and infinities of float8 and, in profile
// "numeric", of numeric, long and TOASTed texts), row and aggregate
// transforms within the supported subset, and a body of transactions
// (inserts, upserts, updates of values, group keys and primary keys,
// deletes, TRUNCATE, partial rollbacks, bulk inserts, multi-table
// transactions, poison rows) and actions: kill -9 of a `trellis-repl run`
// child (also right after the slot's confirmed position moves, while
// writers keep committing), loss of its checkpoint store, PostgreSQL
// restarts, commits held in flight as under synchronous replication,
// appliers stalled by a user's lock on the targets, PAUSE/RESUME, DROP
// and re-CREATE, concurrent writers, both confirm modes, both capture
// modes and switches between them, streamed transactions, tiny apply
// batches.
// About a third of the programs (Profile.Join; all of profile "join") are
// join programs.
//
// # Capture modes
//
// Every program runs in one of the two capture modes (ADR 0012): "@config
// … capture=logical|trigger", passed to the in-process runner as
// trellis.Config.Capture and to the CLI child as --capture. The mode and
// the switches are drawn from a stream of their own (capture.go, seeded
// from the seed), so a logical program without a switch is what its seed
// drew before modes existed: a third of the programs start in trigger mode
// (all of profile "trigger"), and a quarter (all of profile "trigger")
// switch modes once or twice during their body with "@switch trigger" or
// "@switch logical": the runner is stopped (crashed one time in four) and
// started in the other mode, usually in a control lane while writer lanes
// keep committing fresh rows and ordinary transactions across the
// switch's overlap of the two paths. A switch waits until it is done, and
// every check after convergence verifies with catalog queries that the
// instance records the current mode and that nothing of the other is
// left: no replication slot of the database in trigger mode, no trellis_
// trigger on any table in logical mode (failure kind "capture").
//
// In trigger mode: nothing streams (stream=false); a kill or store loss
// "right after the confirmed position moves" waits for the position the
// runner records with what the drain moved instead of the slot's; losing
// the store is a disruption whatever --confirm says (the capture log keeps
// no position on the server), which the check expects and RESUMEs; and a
// held transaction (a commit held in flight as under synchronous
// replication, or half the time "@held N open", a transaction held open)
// is held 1.1–1.8 s, across drains and a rotation of the capture ring,
// in a concurrent step whose writer lane commits fresh rows after it, and
// is checked right after: a drain that cut the log by position (planted
// drain_skips_open_txn) skips the held rows. The slot's undecodable-WAL
// fault only concerns logical mode. Trigger mode runs on the suite's
// wal_level=logical server, chosen explicitly; the root package's tests
// cover wal_level=replica, where auto chooses it.
//
// # Joins
//
// A join program has one or two plain tables and, besides them, a fact
// table with one or two dimension tables (join.go). Each dimension has a
// primary key over a small domain (with two dimensions the second has a
// composite key, with one it has one half the time), so that every
// dimension row is referenced by many facts; a text column of a few values
// (a group key) and an integer. The fact has an integer key (sometimes
// composite), nullable reference columns named like each dimension's key
// columns (so USING can join them; now and then of a different but
// comparable type), a nullable parent column referencing its own key, and
// secondary indexes on all of them (now and then one is left out). With
// two dimensions the first has a column referencing the second's key, for
// joins through a dimension. Dimensions never get bulk rows; bulk facts
// chain their parents and one in eight references a dimension, so that a
// dimension change re-derives hundreds of facts, not thousands; tiny apply
// batches are doubled and get a tenth of the bulk rows.
//
// Its first transform and then six in ten join these tables, each
// program going round the shapes in its own order: inner joins (ON, or
// USING, whose merged column is selected and grouped by unqualified),
// comma joins with their conditions in WHERE, LEFT, RIGHT (either side
// preserved) and FULL joins, CROSS joins (and comma joins without a
// condition) of the small dimensions, self-joins of the fact through its
// parent column (plus a dimension now and then), and nested joins of three
// tables: LEFT after LEFT, a join in parentheses on the right, mixed kinds,
// through the dimension's reference to the other. ON conditions sometimes
// add a predicate on either side. Half are aggregates (count(*), count,
// sum, avg, min, max, with or without GROUP BY), often grouped by a
// dimension's column. The others are single-table transforms of any table.
// In a quarter of the join transforms the conditions after an outer join
// (WHERE, the ON of a join above it) may read its NULL-extended side too,
// often as an anti-join (WHERE d.k IS NULL) or its opposite: the engine
// keeps those joins' matches in a mirror (ADR 0010); the others read only
// what no outer join NULL-extends. Not drawn here: an alias on a join
// (refused); a dimension joined to two facts (facts squared, for time).
// Derived tables joined to the program's tables are drawn by the nested
// stream (below).
//
// Writes hit every table: the usual statements (inserts, upserts, updates
// of values, join columns and keys, deletes, TRUNCATE) pick the fact and
// the dimensions like any table, and a third of the transactions aim at
// the joins: a dimension row deleted while many facts reference it and
// re-inserted in a later transaction (or in the same one), a dimension's
// primary key or values changed, every fact of one dimension row moved to
// another or to NULL, or deleted at once (emptying its groups), one fact's
// references or parent changed, missing dimension rows refilled, new facts
// of one dimension row. Every check compares each join target too (two
// ways, with its plan query and its definition), also after kills, store
// loss and restarts; Stats.JoinCompares counts those comparisons.
//
// # Aggregates, DISTINCT, derived tables and chains
//
// These are drawn from a stream of their own (features.go: a second
// generator seeded from the seed), so that the main stream draws what it
// drew before they existed and a feature changes only what it lands on:
//
//   - Three in ten aggregate calls are one of the newer ones:
//     count(DISTINCT x), sum and avg DISTINCT, bool_and, bool_or, every,
//     bit_and, bit_or, bit_xor (integer inputs), string_agg, array_agg and
//     jsonb_agg with an ORDER BY inside the call made total (the value,
//     then every FROM item's key columns; written DISTINCT when no key is
//     known, which merges the ties), jsonb_object_agg keyed by the text of
//     the single table's key (unique per group; not over a date key, whose
//     text is not immutable), and FILTER (WHERE …) on any of them or on a
//     plain one.
//   - Aggregate queries get expressions over their aggregates (a
//     sum / nullif(count(*), 0), a percentage of a CASE sum, count(*) -
//     count(x), round(avg(x)::numeric, 2), a CASE on the count, max IS
//     DISTINCT FROM min) in three in ten, and HAVING (counts, IS NOT NULL,
//     bool_or, ANDs and ORs of those) in a quarter.
//   - One row transform in eight is a SELECT DISTINCT of 1–3 columns or
//     expressions, over one table or a join.
//   - One transform in eight reads a derived table the engine flattens: a
//     subquery that only projects and filters (one table, or any join
//     shape), its key columns among its items (k0, …, so aggregates over it
//     can order totally), sometimes with column aliases (AS s(k0, v1)),
//     read by a row or an aggregate query (as TPC-H Q7, Q8, Q9). A quarter
//     of those (drawn from a level stream of its own, levelSalt, after the
//     flattened one was drawn, so every other draw stays) aggregate
//     instead, as TPC-H Q13's does: the subquery groups by one or two of
//     its items by ordinal, or by none (a total), with count(*) and a max,
//     and the engine keeps it as an inner level (ADR 0018; a nullable
//     group key gets a surrogate). The fast lane's fixed cases draw none
//     (a level costs each check a convergence round); random cases do.
//   - Eight definitions in a hundred (featNestedPct; from a nested stream
//     of its own, nestedSalt, drawn after every other stream drew the
//     definition it replaces, so every other draw stays; nested.go) join a
//     derived table nested one to three deep (two or three deep five times
//     in six) to one of the program's tables (issue 28, ADR 0027). The
//     innermost SELECT reads one table: the join columns (renamed now and
//     then), maybe more columns (renamed, or cast), one to three computed
//     outputs (a constant, coalesce, IS [NOT] NULL, CASE with or without
//     ELSE, arithmetic, text and boolean expressions) and, one time in
//     three, a WHERE. Each wrapper above it passes the outputs through as
//     SELECT *, SELECT w.* or a column list (in any order, other than the
//     join columns dropped or renamed now and then), or adds a computed
//     output over them (SELECT w.*, x AS wc1); the derived table it wraps
//     has an alias list naming its first columns one time in four, the
//     wrapper a WHERE one time in six, and the outermost derived table an
//     alias list one time in five. It is joined by LEFT, RIGHT or FULL JOIN
//     (JOIN one time in seven), as the left or the right item, so it lands
//     on the preserved side or the NULL-extended one, and one time in five
//     the other item is a derived table too. In join programs, two times in
//     three, the join follows a link of the join schema (a fact's
//     references to a dimension, its parent column, a dimension's reference
//     to the other) with the derived table at either end; otherwise a table
//     is joined to a derived table over itself by its key, usually with an
//     ON predicate, so that some rows are NULL-extended. When both sides
//     name the join columns alike, USING replaces ON half the time. The
//     query selects the derived table's computed outputs (the columns a
//     NULL-extended row must show as NULL), columns and expressions of both
//     sides and maybe USING's merged column, or, one time in three,
//     aggregates its outputs (count, sum, avg, min, max), grouped by none or
//     one column of the other side; a WHERE reads the preserved side, or
//     (one time in six) tests a column of the derived table for NULL after
//     the join, an anti-join. A computed output or a WHERE below a
//     pass-through wrapper on the NULL-extended side would, pulled up,
//     compute a value from the NULLs or filter the joined rows: the engine
//     keeps such a derived table as an inner level, and the oracle
//     (PostgreSQL running the query as written) judges it as every other
//     definition. TestNestedPrograms checks that the programs draw each of
//     these and that the fast lane's fixed cases draw an output that is not
//     NULL over NULLs, read outside a NULL-extended derived table below a
//     pass-through wrapper: join/234's t1, "Fact" LEFT JOIN (SELECT * FROM
//     (SELECT d0k0, coalesce(…) AS v0, d0r IS NOT NULL AS v1 FROM dim0) w1)
//     q(q0, q1, q2) … WHERE q.q1 IS NULL, which the planted
//     flatten_nullable_computed gets wrong at the first check (concurrent/7
//     draws two three deep, one on the NULL-extended side of a RIGHT JOIN).
//     TestNestedDrawnApart checks that the stream changes only the
//     definitions it lands on.
//   - Eight definitions in a hundred (featShapesPct; from a shapes stream
//     of its own, shapesSalt, drawn after every other stream drew the
//     definition it replaces and never where the nested stream landed;
//     sqlshapes.go), and one chain's last level in eight, use the SQL of
//     issue 24 (ADR 0030, 0032, 0033): subqueries in expressions (EXISTS
//     and NOT EXISTS correlated on an equality of comparable columns — a
//     link of the join schema in join programs —, IN and NOT IN of a
//     subquery, over a column that may be NULL too, the subquery now and
//     then a UNION of two tables, an uncorrelated avg/min/max/sum compared
//     with a column in WHERE, a correlated count/sum/min/max in the select
//     list; in WHERE alone, under OR, after a predicate, or under an
//     aggregate of the rows that pass); UNION ALL, UNION, INTERSECT and
//     EXCEPT of two or three branches over any tables, columns of one type
//     class or expressions and constants of it, the third branch now and
//     then under another operator in parentheses, at the top, as a derived
//     table an aggregate reads, or in a CTE; window functions (rank,
//     dense_rank, row_number, lag, lead, first_value, ntile, sum, count and
//     max OVER, a ROWS frame) sharing a PARTITION BY of one or two columns
//     (or none), and a filter on row_number or rank in an outer query;
//     top-K (ORDER BY … LIMIT n [OFFSET m]) over a table, over an
//     aggregate's groups and over a set operation, and DISTINCT ON (g) …
//     ORDER BY g, …; WITH, its CTE (a projection, an aggregate, a set
//     operation or a window query) read once, or twice (joined to itself on
//     its key, or filtering itself by IN). A shape reads, a quarter of the
//     time, a derived table or CTE that is itself one (a projection with a
//     subquery filter, an aggregate, a set operation, a window query): two
//     levels at most. Order-sensitive window calls order by every source's
//     key; a top-K's ORDER BY ends with the key (over a set operation, it
//     names every output, so tied rows are equal rows), as DISTINCT ON's
//     does; window sums read no float8: every query has one answer, and the
//     oracle's EXCEPT ALL comparison needs no tie rule. In programs with
//     tiny apply batches, windows and top-K avoid tables that get bulk rows
//     (or partition by the key bulk rows vary in). TRELLIS_GEN_SHAPES_PCT
//     draws more of them (a soak aimed at them); TestShapesAccepted
//     (TRELLIS_GEN_SHAPES_CHECK=N) applies every definition of N seeds
//     drawn as a shape. TestShapePrograms checks that the programs draw
//     each of them, TestShapesDrawnApart that the stream changes only the
//     definitions it lands on.
//   - Functions in FROM, constant relations and the ALL set operations
//     (ADR 0034; from a function stream of its own, srfSalt, drawn after
//     every other stream drew the definition it replaces and never where
//     the nested or shapes stream landed; srfshapes.go, collection.go). A
//     quarter of the programs (collPct) get a collection table besides
//     their own (not among the tables the main stream draws from): a key,
//     a small group, two small bounds lo and hi, an int[] and a text[]
//     (NULL, empty, duplicates, NULL elements), a jsonb array of objects
//     {"a": int, "b": text} (keys missing or null) and a jsonb object of
//     a few keys; after one body event in four (collEventPct) a
//     transaction writes it — rows inserted, upserted, bulk-filled and
//     deleted, keys moved, arrays and documents grown (||, array_append,
//     array_prepend, every element twice), shrunk (slices,
//     array_remove, jsonb - n, - key), reordered (reversed, sorted), set
//     NULL or empty, bounds swapped, the table truncated — now and then
//     with a check right after, or in lanes beside writers of the
//     program's tables. Fourteen definitions in a hundred of those
//     programs (featSRFCollPct), three of the others (featSRFPct), and
//     twice as many of chains' last levels, expand rows: unnest of an
//     array (bare, aliased, two zipped), jsonb_array_elements[_text],
//     jsonb_each[_text], jsonb_to_recordset (in ROWS FROM when WITH
//     ORDINALITY is drawn), generate_series over a row's bounds, ROWS
//     FROM of two functions, over the table or a derived table of it
//     (flattened: its columns become the table's in the functions'
//     arguments), and over the program's tables a series between small
//     integers bounded by construction (a key moved by 100 or a bulk
//     row's parent is small too: generate_series(a, least(b, a + 3))),
//     an array of two or three columns of one type class unnested or a
//     LATERAL VALUES list of them (an unpivot),
//     regexp_split_to_table, a VALUES list joined on a column (a key
//     repeated, NULL names; inner or LEFT) or a constant series crossed
//     with it; WITH ORDINALITY one time in three; after a comma, CROSS
//     JOIN [LATERAL], LATERAL, or LEFT JOIN LATERAL … ON true. They are
//     read by rows (a jsonb output now and then), DISTINCT, aggregates
//     (count, sum, min, max, count(DISTINCT), bool_or, HAVING), joins
//     with a program table (the frag first, the join after a comma read
//     as the function's; the frag in parentheses on the NULL-extended
//     side of a LEFT or RIGHT join, or inner), derived tables and CTEs
//     holding them (projections keyed by the source's key and a written
//     ordinal, aggregates kept as inner levels, ALL set operations) read
//     by rows, aggregates, windows, a top-K, the shapes' subquery filters
//     and scalar items, joined to a program table on either side of
//     LEFT, inner and FULL joins, nested two deep, CTEs read twice
//     (joined to themselves on their key and ordinal, or filtered by IN
//     over themselves), CTEs holding VALUES lists; INTERSECT ALL, EXCEPT
//     ALL (and UNION ALL, UNION, EXCEPT) of two or three branches over
//     tables and expanded rows, at the top, under an aggregate, in a CTE
//     or a derived table; a chain's last level as the level below
//     unpivoted, crossed with a series, joined to a VALUES list, in an
//     ALL set operation with a program table, or joined to the collection
//     table's expanded rows. Sums and averages over expanded rows read no
//     float8. In programs with tiny apply batches the ALL set operations,
//     windows, top-K and joins read no table that gets bulk rows (a
//     change re-derives every copy of its group, a whole partition, or
//     the whole query, one bulk row per batch). TRELLIS_GEN_SRF_PCT draws more of them (a soak aimed at
//     them); TestSRFAccepted (TRELLIS_GEN_SRF_CHECK=N) applies every
//     definition of N seeds drawn as one. TestSRFPrograms checks that the
//     programs draw each of them, TestSRFDrawnApart that the stream only
//     replaces the definitions it lands on and adds the collection
//     table's steps.
//   - Recursion and grouping as PostgreSQL reads it (ADR 0035, 0037;
//     from a graph stream of its own, graphSalt, drawn last and never
//     where another stream landed; graph.go, recursive.go). A quarter of
//     the programs (graphTablePct) get graph tables besides their own:
//     nodes (id, parent — a forest that re-parenting makes cyclic, a node
//     under its own descendant, a self-loop — a weight, a group and a
//     timestamptz near midnight in several offsets) and edges (src, dst,
//     qty; cycles and self-loops); after one body event in four a
//     transaction writes them — leaves and inner nodes added and deleted,
//     subtrees re-parented, roots made, keys moved, weights, quantities
//     and times changed, edges added, deleted and moved, the edges
//     truncated, shallow trees and short edge chains bulk-filled — now
//     and then with a check after, or in lanes. Fourteen definitions in a
//     hundred of those programs are WITH RECURSIVE (descendants of roots,
//     of a group or of every node, UNION ALL bounded by a depth or stopped
//     by a path check — an unbounded UNION ALL over a cycle never ends,
//     in PostgreSQL either —; ancestors as a set; reachability from every
//     edge or one node; paths with PostgreSQL's cycle flag; a bill of
//     materials summed over a bounded UNION ALL) read by rows, an
//     aggregate per anchor, a join back to the nodes, IN, or twice; or
//     the nodes grouped by their key with the columns that depend on it
//     (n.* too) over their edges; or a timestamptz read through the
//     stable functions whose only instability is a setting (at::date,
//     date_trunc, to_char, extract, date_part, at::text) grouped by,
//     selected and filtered on. Two in a hundred definitions of the other
//     programs group one of their tables by its key, selecting its other
//     columns (t.* too), over a join. TRELLIS_GEN_GRAPH_PCT draws more;
//     TestGraphAccepted (TRELLIS_GEN_GRAPH_CHECK=N) applies them;
//     TestGraphPrograms and TestGraphDrawnApart check the draws.
//   - A quarter of the programs define a chain during their body (a quarter
//     of those a second one): two or three levels, each reading the target
//     of the one below (chains.go). A level read by another is keyed by NOT
//     NULL columns: a row transform of one table selecting its key, an
//     aggregate grouped by NOT NULL columns (part of a composite key, the
//     key, a NOT NULL value; in join programs a dimension's key over the
//     fact joined to it), the fact joined to a dimension, a row transform of
//     the level below, an aggregate grouped by its key, or the level below
//     joined back to the table its key comes from; the last level is
//     anything the generators draw over the one below (features included),
//     LEFT JOINs back too. In four chains in ten (drawn from a
//     nullable-chain stream of its own, nullChainSalt, after the feature
//     stream drew the chain as before, so every other draw stays; only the
//     definitions change, and fresh rows of the new level's table are
//     added), a level read by another is keyed by columns that may be NULL,
//     which the engine keys by the hidden surrogate __id (ADR 0019): an
//     aggregate grouped by a nullable column (now and then with one more
//     column), by a nullable expression (nullif of a domain value, a CASE
//     without ELSE, c % 3), or without GROUP BY (one row, which a HAVING may
//     take away and give back); in join programs, half the time for a first
//     level, a row transform of the fact and a dimension outer joined (LEFT
//     either way, RIGHT, FULL) selecting both sides' keys; over a level
//     below, the table that level's key comes from outer joined to it. The
//     levels above read its key as nullable: row transforms of it,
//     aggregates grouped by it (nullable again), and joins back to the table
//     its key columns come from: on the columns it groups by with IS NOT
//     DISTINCT FROM or = (which drops the NULL keys), never the table's key
//     or the fact's parent column (whose values are all distinct, and such a
//     join cannot hash), on the table's key with =; keyed by the side whose
//     rows meet at most one row of the other (TestNullableChainPrograms; the
//     fast lane's store/3 and store/22 draw such chains, with a kill between
//     the levels). No definition names __id. The levels are applied one
//     after another (now and then two in one script) with fresh bulk rows
//     and transactions after each and a kill of the runner (or loss of its
//     store) right after those, so that a crash lands while the upper levels
//     are behind; every program with a chain draws such kills. Chain levels
//     are not among the transforms the program's PAUSE, DROP and
//     redefinitions pick (the engine refuses to drop or redefine a target
//     another transform reads); their own actions, after one body event in
//     25, pause or resume any level and drop and re-create only the last.
//     The checks wait for every level (AwaitConverged waits level by level)
//     and compare every level with its definition.
//
// TestFeaturePrograms checks that programs draw each of them and that the
// fast lane's fixed cases do; TestCapturePrograms does the same for the
// capture modes, switches and trigger-mode holds.
//
// # DDL
//
// Profile "ddl" (and no other, so every other seed gives the program it
// gave before) draws schema changes on the plain tables while the runner
// runs (ddl.go), from a stream of their own: a column nobody reads added
// or dropped again, after which no transform may pause; and an int column
// retyped to bigint — one a transform reads as itself when there is one —
// after which a transform may pause only with capture_failure.kind =
// capture, and is resumed: the RESUME re-types its stored columns and
// rebuilds, and the next check compares the target's column types with
// the query's as it always does. A chain level that pauses later (its
// source, the re-typed target, changed type in its turn) is resumed by
// the check.
//
// # ALTER TRANSFORM and backfills
//
// From a stream of their own (alterops.go, alterSalt), a program of a
// profile that draws kills or lifecycle events (all but "held") draws,
// three times in ten (TRELLIS_GEN_ALTER_PCT draws more; the gate is the
// stream's first draw, so a program it leaves out is what its seed drew
// before, and no fixed case of the fast lane passes it:
// TestFastLaneAlterDraws), after six body events in a hundred, an
// "@alter" or a "@backfill" step (issue 27). "@alter" is ALTER TRANSFORM
// of a live single-table row transform as the main stream drew it (not
// DISTINCT, not replaced by a feature stream; ADR 0041 accepts no other
// shape the generator draws: an aggregate only over the aggregates it
// already stores), with one clause or, one time in four, two: ADD of a
// column computed from the source (a numeric, text or boolean
// expression cast to the type the column's name ends in, alt7_n), DROP
// of a column the stream added, or ALTER of one to another expression of
// its type. The step waits (at most 30 s) for the transform to be live
// — an earlier build may still run —, applies the statement, and takes
// the stored definition, edited, as the transform's SELECT for the
// oracle. "@backfill" is REQUEST BACKFILL OF a table a transform's
// definition reads (ADR 0040): every transform reading it re-derives all
// its keys in place. Now and then fresh bulk rows of the rebuilt table come first,
// so that the build has chunks to walk; half the steps are followed by
// a kill of the runner (a loss of its store one time in four in the
// profiles that lose it) 0–300 ms later, in the middle of the column
// build or the rebuild, and half run in a control lane while one or two
// writer lanes commit across the statement, the build and the kill; a
// check follows one time in three. A refusal that names something gone
// or a conflicting state (a transform shrinking removed, paused, still
// building) is a note; any other is a failure (kind "rejected").
// Stats.Rebuilds counts the statements accepted. TestAlterPrograms
// checks that programs draw each form, TestAlterDrawnApart that the
// stream only adds its steps (the other drawn-apart tests turn it off:
// it picks among the definitions they drew).
//
// # Poison
//
// About a quarter of the programs (all of profile "poison") draw poison
// rows (ADR 0013) from a stream of their own (poison.go, seeded from the
// seed), so a program without poison is what its seed drew before poison
// existed. After the definitions, one table's small integer or text column
// (a table whose key is integers and texts, whose key text is canonical; a
// table of its own when none fits) is read by one or two row transforms p0,
// p1 that fail on some values of it: a CHECK added to the target right
// after CREATE (c < 500, c <> 777, BETWEEN, abs(c) < 600, NOT LIKE
// 'poison%', …; NULL passes) or 100 / (c - K) in the select list. The
// failing values (±500, ±777, ±4096; 'poison', 'poison!', 'Poisoned') lie
// outside every domain, so only poison statements write them: each held key
// costs about 300 ms of retries, and bulk rows from the domain would hold
// hundreds. After one body event in five (and once after the definitions) a
// transaction mixes one or two poison statements with good rows, so that
// one batch holds both: a poisoned row inserted (an upsert) or a good row
// poisoned at one of two fixed keys of the key domain, a poisoned row
// corrected, deleted, or moved to another failing value; now and then a
// check follows, or the poison transactions run in a lane while writer
// lanes commit. Statements writing a failing value are guarded to leave at
// most two rows holding one: the CLI runner has no flag for
// QuarantineAfter, so its fuse is the default 5 (the in-process runner gets
// 1000). With only divisions, poisoned rows may exist before the CREATE, so
// that the build holds them. The poisoned transforms are among those the
// program's PAUSE and RESUME (whose rebuild holds the keys again), DROP and
// redefinitions (a re-created target has no CHECK) pick; kills, store loss
// and switches reach them as any other. The poisoned table is never
// truncated (DELETE instead): a TRUNCATE leaves held a key the target never
// stored (testdata/regressions/poison-truncate-keeps-held, since fixed).
//
// The check reads what can fail from the database, not from the generator
// (poisoncheck.go): the target's CHECK constraints from pg_constraint (a
// transform dropped and created again has none) and the divisions in the
// plan's select items, guarded by nullif. For each single-table row
// transform with either, the keys PoisonedSince lists for it must be
// exactly those of the source rows that pass its WHERE and fail (a held
// key whose row was corrected or deleted since is re-derived and
// released; one never changed again stays held), and its target without
// the held keys must equal the plan's query without the failing rows (two
// ways, EXCEPT ALL); the held keys' frozen rows are not compared. Every
// other transform must hold no key and is compared as always; a
// quarantined transform, or status held_keys disagreeing with
// PoisonedSince, is a failure. Stats.PoisonCompares and Stats.HeldKeys
// count those comparisons and the held keys they found.
// TestPoisonPrograms checks the share of poison programs, and
// TestFeaturePrograms that programs and the fast lane's case poison/214
// draw each poison statement; the planted hold_whole_batch (every key of a
// failing batch held) fails poison/214 at its first check.
//
// # Regression files
//
// Program.Format and Parse use a line format: "@kind args" directives, each
// followed by its SQL statements, one per line:
//
//	# seed=3 profile=store ops=42
//	@config confirm=applied runner=cli batch=0 stream=false capture=logical
//	@sql
//	  CREATE TABLE s0 (c0 int, c1 text, PRIMARY KEY (c0));
//	@apply
//	  CREATE TRANSFORM t0 AS SELECT c1, count(*) AS n FROM s0 GROUP BY c1;
//	  CREATE TRANSFORM t1 AS SELECT c0, c1 FROM s0;
//	@start
//	@txn
//	  INSERT INTO s0 (c0, c1) VALUES (1, 'a');
//	@concurrent
//	  @lane
//	    @txn
//	      UPDATE s0 SET c1 = 'b' WHERE c0 = 1;
//	  @lane
//	    @wait 1100
//	    @lose-store confirmed
//	  @lane
//	    @stall 2000
//	@end
//	@switch trigger
//	@held 1500 open
//	  INSERT INTO s0 (c0, c1) VALUES (2, 'c');
//	@alter
//	  ALTER TRANSFORM t1 ADD alt1_t AS (upper(c1))::text;
//	@kill 120
//	@backfill
//	  REQUEST BACKFILL OF s0;
//	@check
//
// Programs directly in testdata/regressions are replayed by
// TestRegressions and must pass; failures found by the lanes are written to
// testdata/regressions/pending, to be moved up once the bug is fixed.
//
// # Lanes
//
//   - Fast lane, part of `go test ./generative/`: TestFastLane runs
//     FastLaneCases (fixed seeds covering every action and every join
//     shape, TestJoinPrograms checks the shapes) plus
//     TRELLIS_GEN_RANDOM (default 2) random cases from
//     TRELLIS_GEN_RANDOM_SEED (default the clock, printed). Its cases, and
//     TestRegressions' programs, run two at a time, each on a server of
//     its own (a program restarts and reconfigures its server); a
//     program's subtest is named by its case whatever server ran it.
//   - Soak: `go run ./generative/cmd/soak -duration 30m`, or TestSoak with
//     TRELLIS_GEN_SOAK=30m.
//   - Planted bugs: `go run ./generative/cmd/plantsweep` runs the fast lane
//     under `-tags trellisplant` once per planted bug (internal/plant, the
//     join bugs ignore_left_join_nulls and skip_dimension_change, the
//     trigger drain's drain_skips_open_txn, the quarantine's
//     hold_whole_batch, the flattening's flatten_nullable_computed, the
//     dependency levels' exists_misses_last_delete and stale_scalar and
//     the windows' window_partition_stale and topk_no_refill included;
//     -only restricts the sweep) and reports the catch rate.
//
// Other knobs: TRELLIS_GEN_SEED and TRELLIS_GEN_PROFILE reproduce one case
// (TestSeed); TRELLIS_GEN_FILE replays one file (TestRegressions);
// TRELLIS_GEN_SHRINK is the shrink budget (default 3m, 0 when a bug is
// planted); TRELLIS_GEN_TRACE=1 streams every run's log;
// TRELLIS_GEN_KEEP_DB=1 keeps each run's database for inspection.
//
// Bugs the suite found are fixed and pinned by a program in
// testdata/regressions. The generator avoids shapes the library refuses
// or pauses on by design: one GROUP BY expression selected twice
// (refused), and a group key longer than a btree entry (paused, halt).
// Two engine bugs the aggregate and derived-table programs found are fixed
// and pinned: total-extreme-state-ambiguous and derived-where-flat-and.
//
// A slot the server itself cannot decode (PostgreSQL 15's "could not map
// filenode", seen about once in 250 soak programs, never replayed) is a
// server fault, not a finding: the run notes it, RESUMEs the paused
// transforms and checks that the rebuilt targets are exact.
package generative
