package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	trellis "github.com/trellis-repl/trellis-repl"
)

// cmdAwait waits until every write committed before it started is
// reflected in the named transforms (and those whose targets they read),
// or in every transform not paused by a user. A timeout, or a transform
// that cannot converge, exits 3. It only reads.
func cmdAwait(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("await", flag.ContinueOnError)
	var c common
	c.register(fs)
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long (0: wait as long as it takes)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *timeout < 0 {
		return usageError{"--timeout must not be negative"}
	}
	t, err := trellis.Open(ctx, trellis.Config{DSN: c.dsn, Schema: c.schema, ReadOnly: true, MaxConnections: 1})
	if err != nil {
		return err
	}
	defer t.Close()
	tok, err := t.WatermarkToken(ctx)
	if err != nil {
		return err
	}
	wctx := ctx
	if *timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	start := time.Now()
	if err := t.AwaitTransforms(wctx, tok, fs.Args()...); err != nil {
		if code := trellis.CodeOf(err); code == trellis.CodeTimeout || code == trellis.CodeConflict {
			return exitWith{code: exitBehind, err: err}
		}
		return err
	}
	what := "every transform"
	if fs.NArg() > 0 {
		what = strings.Join(fs.Args(), ", ")
	}
	fmt.Fprintf(stdout, "converged: %s reflects every write committed before %s (waited %s)\n", what, tok, time.Since(start).Round(time.Millisecond))
	return nil
}

// cmdVersion prints the module version and the VCS commit the binary was
// built from.
func cmdVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"version takes no arguments"}
	}
	fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
	return nil
}

// versionLine is "trellis-repl VERSION (commit REV[, modified], TIME) GO".
func versionLine(bi *debug.BuildInfo, ok bool) string {
	version, commit, when, modified := "(devel)", "unknown", "", false
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" {
			version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	line := fmt.Sprintf("trellis-repl %s (commit %s", version, commit)
	if modified {
		line += ", modified"
	}
	if when != "" {
		line += ", " + when
	}
	return line + ") " + runtime.Version()
}
