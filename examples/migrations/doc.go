// Package migrations shows trellis-repl transforms defined, and dropped,
// in the same migrations as the tables they read, with the two migration
// tools Go services use most:
//
//   - pressly/goose (goose.go): the tables in SQL migrations, each
//     transform in a Go migration that calls Apply (TransformMigration),
//     run outside goose's transaction because Apply commits on trellis's
//     own connections;
//   - golang-migrate (golangmigrate.go): the trellis statements in .sql
//     files of their own (trellissql/), applied by a small database driver
//     (Driver) that hands each file to Apply and keeps its own version
//     table.
//
// Either way a migration is not one transaction with its version record,
// so a migration interrupted between the two runs again: its statements
// are written to be re-run (CREATE TRANSFORM IF NOT EXISTS going up, DROP
// TRANSFORM IF EXISTS coming down). The module is apart from trellis-repl's
// so that neither tool becomes a dependency of it; `make test` runs its
// tests.
package migrations
