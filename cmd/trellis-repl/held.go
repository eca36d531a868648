package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// cmdHeld lists keys held in quarantine: every transform's since a time,
// or one transform's a page at a time.
func cmdHeld(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("held", flag.ContinueOnError)
	var c common
	c.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	since := fs.String("since", "", "only keys last poisoned at or after this time (RFC 3339, or a duration ago such as 1h)")
	limit := fs.Int("limit", 100, "with TRANSFORM: keys per page")
	after := fs.String("after", "", "with TRANSFORM: continue after this cursor (the next_cursor a page printed)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageError{"held takes at most one transform name"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, ReadOnly: true, MaxConnections: 1})
	if err != nil {
		return err
	}
	defer t.Close()
	if fs.NArg() == 1 {
		if *since != "" {
			return usageError{"--since lists every transform's keys; give it without a transform name"}
		}
		page, err := t.HeldKeysPage(ctx, fs.Arg(0), *limit, *after)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, page)
		}
		if err := printHeld(stdout, page.Keys); err != nil {
			return err
		}
		if len(page.Keys) == *limit {
			fmt.Fprintf(stdout, "more: trellis-repl held %s --after %s\n", fs.Arg(0), page.NextCursor)
		}
		return nil
	}
	var from time.Time
	if *since != "" {
		if from, err = parseSince(*since, time.Now()); err != nil {
			return usageError{"--since: " + err.Error()}
		}
	}
	ks, err := t.PoisonedSince(ctx, from)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, ks)
	}
	return printHeld(stdout, ks)
}

// parseSince reads an RFC 3339 time or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-01T10:00:00Z) nor a duration (1h)", s)
	}
	return t, nil
}

func printHeld(w io.Writer, ks []trellis.PoisonEntry) error {
	if len(ks) == 0 {
		fmt.Fprintln(w, "no keys held")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSFORM\tTABLE\tKEY\tSQLSTATE\tPOISONED AT\tERROR")
	for _, k := range ks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.Transform, k.SourceTable, k.KeyText, k.SQLState,
			k.PoisonedAt.Format(time.RFC3339), oneLine(k.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "release one: trellis-repl release TRANSFORM TABLE KEY...; all of a transform's: trellis-repl release --all TRANSFORM")
	return nil
}

// cmdRelease releases one held key (its values, one argument per key
// column) or all of a transform's.
func cmdRelease(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var c common
	c.register(fs)
	all := fs.Bool("all", false, "release every key the transform holds")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *all && fs.NArg() != 1 || !*all && fs.NArg() < 3 {
		return usageError{"release needs TRANSFORM TABLE KEY... (one value per key column), or --all TRANSFORM"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema})
	if err != nil {
		return err
	}
	defer t.Close()
	if *all {
		n, err := t.ReleaseAll(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "released %d keys of %s\n", n, fs.Arg(0))
		return nil
	}
	key := fs.Args()[2:]
	if err := t.ReleaseKey(ctx, fs.Arg(0), fs.Arg(1), key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "released key %s of %s for %s\n", strings.Join(key, ", "), fs.Arg(1), fs.Arg(0))
	return nil
}

// cmdQuarantine prints the quarantine state of one transform, or lists the
// quarantined ones.
func cmdQuarantine(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("quarantine", flag.ContinueOnError)
	var c common
	c.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageError{"quarantine takes at most one transform name"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, ReadOnly: true, MaxConnections: 1})
	if err != nil {
		return err
	}
	defer t.Close()
	var es []trellis.QuarantineEntry
	if fs.NArg() == 1 {
		e, err := t.QuarantineStatus(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		es = []trellis.QuarantineEntry{e}
	} else if es, err = t.Quarantined(ctx); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, es)
	}
	if len(es) == 0 {
		fmt.Fprintln(stdout, "no transform is quarantined")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSFORM\tSTATE\tSINCE\tHELD KEYS")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", e.Transform, e.State, e.Since.Format(time.RFC3339), e.HeldKeys)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
