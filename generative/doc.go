// Package generative is trellis-repl's generative convergence suite:
// random programs (schemas, transform definitions, writes and actions the
// oracle does not model) whose oracle is PostgreSQL itself. After the
// writes, a check waits for convergence (WatermarkToken, AwaitConverged)
// and compares every target with its query, two ways with EXCEPT ALL: the
// query as the engine's plan renders it, and the SELECT the program wrote
// (with the target's column types against the query's). A failure prints
// its seed, is shrunk by delta debugging (re-running every candidate on a
// fresh database) and written as a regression file.
//
// # Programs
//
// Generate draws a program from a seed and a Profile: 2–4 tables (composite
// keys, nullable columns, int, bigint, numeric, text, boolean, float8 and
// date over small domains with NULLs, empty strings, extremes, values equal
// but printed differently, long and TOASTed texts), row and aggregate
// transforms within the supported subset, and a body of transactions
// (inserts, upserts, updates of values, group keys and primary keys,
// deletes, TRUNCATE, partial rollbacks, bulk inserts, multi-table
// transactions) and actions: kill -9 of a `trellis-repl run` child (also
// right after the slot's confirmed position moves, while writers keep
// committing), loss of its checkpoint store, PostgreSQL restarts, commits
// held in flight as under synchronous replication, appliers stalled by a
// user's lock on the targets, PAUSE/RESUME, DROP and re-CREATE, concurrent
// writers, both confirm modes, streamed transactions, tiny apply batches.
//
// # Regression files
//
// Program.Format and Parse use a line format: "@kind args" directives, each
// followed by its SQL statements, one per line:
//
//	# seed=3 profile=store ops=42
//	@config confirm=applied runner=cli batch=0 stream=false
//	@sql
//	  CREATE TABLE s0 (c0 int, c1 text, PRIMARY KEY (c0));
//	@apply
//	  CREATE TRANSFORM t0 AS SELECT c1, count(*) AS n FROM s0 GROUP BY c1;
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
//	@check
//
// Programs directly in testdata/regressions are replayed by
// TestRegressions and must pass; failures found by the lanes are written to
// testdata/regressions/pending, to be moved up once the bug is fixed.
//
// # Lanes
//
//   - Fast lane, part of `go test ./generative/`: TestFastLane runs
//     FastLaneCases (fixed seeds covering every action) plus
//     TRELLIS_GEN_RANDOM (default 2) random cases from
//     TRELLIS_GEN_RANDOM_SEED (default the clock, printed).
//   - Soak: `go run ./generative/cmd/soak -duration 30m`, or TestSoak with
//     TRELLIS_GEN_SOAK=30m.
//   - Planted bugs: `go run ./generative/cmd/plantsweep` runs the fast lane
//     under `-tags trellisplant` once per planted bug and reports the catch
//     rate.
//
// Other knobs: TRELLIS_GEN_SEED and TRELLIS_GEN_PROFILE reproduce one case
// (TestSeed); TRELLIS_GEN_FILE replays one file (TestRegressions);
// TRELLIS_GEN_SHRINK is the shrink budget (default 3m, 0 when a bug is
// planted); TRELLIS_GEN_TRACE=1 streams every run's log;
// TRELLIS_GEN_KEEP_DB=1 keeps each run's database for inspection.
//
// Bugs the suite found are fixed and pinned by a program in
// testdata/regressions. The generator avoids only shapes the library
// refuses or pauses on by design: one GROUP BY expression selected twice
// (refused), and a group key longer than a btree entry (paused, halt).
//
// A slot the server itself cannot decode (PostgreSQL 15's "could not map
// filenode", seen about once in 250 soak programs, never replayed) is a
// server fault, not a finding: the run notes it, RESUMEs the paused
// transforms and checks that the rebuilt targets are exact.
package generative
