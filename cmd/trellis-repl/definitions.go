package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	trellis "github.com/trellis-repl/trellis-repl"
)

// cmdDefinitions lists each transform's definition, the tables it reads
// and its state. It only reads.
func cmdDefinitions(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("definitions", flag.ContinueOnError)
	var c common
	c.register(fs)
	asJSON := fs.Bool("json", false, "print a JSON array (name, schema, sql, shape, target, columns, query, sources, state, settings, reads, read_by)")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, ReadOnly: true, MaxConnections: 1})
	if err != nil {
		return err
	}
	defer t.Close()
	defs, err := t.Definitions(ctx, fs.Args()...)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, defs)
	}
	if len(defs) == 0 {
		fmt.Fprintln(stdout, "no transforms; `trellis-repl apply` defines them")
		return nil
	}
	for i, d := range defs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s  %s, %s into %s\n", d.Name, d.State, d.Shape, d.Target)
		fmt.Fprintf(stdout, "  sources: %s\n", strings.Join(d.Sources, ", "))
		if len(d.Settings) > 0 {
			fmt.Fprintf(stdout, "  settings: %s\n", strings.Join(d.Settings, ", "))
		}
		if len(d.Reads) > 0 {
			fmt.Fprintf(stdout, "  reads transforms: %s\n", strings.Join(d.Reads, ", "))
		}
		if len(d.ReadBy) > 0 {
			fmt.Fprintf(stdout, "  read by: %s\n", strings.Join(d.ReadBy, ", "))
		}
		fmt.Fprintf(stdout, "  %s;\n", d.SQL)
	}
	return nil
}
