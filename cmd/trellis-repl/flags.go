package main

// Flag conventions shared by every command (ADR 0017 §7): `CMD --help`
// prints the command's usage and flags and exits 0; every flag can also
// be set from the environment; exit codes are 0 ok, 1 failed, 2 bad usage,
// 3 behind or unhealthy.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/trellis-repl/trellis-repl/internal/redact"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
	// exitBehind: status --check or await found a transform behind or
	// unhealthy.
	exitBehind = 3
)

// commandUsage is each command's usage line(s), printed by CMD --help
// above its flags.
var commandUsage = map[string]string{
	"apply": "usage: trellis-repl apply [--dsn URL] [--schema NAME] (-f FILE | -e SQL)\n" +
		"Validates definition statements and applies them in one transaction.",
	"run": "usage: trellis-repl run [--dsn URL] [--schema NAME] [--data-dir DIR] [--capture auto|logical|trigger] [flags]\n" +
		"Builds the transforms and keeps them exact until stopped (SIGINT, SIGTERM).",
	"status": "usage: trellis-repl status [--dsn URL] [--schema NAME] [--json | --check [--max-lag D] | --watch[=INTERVAL]] [NAME...]\n" +
		"Reads every transform's state (only reads: a role with pg_monitor and SELECT on the instance schema can run it).\n" +
		"--check prints one line per problem and exits 3 when a transform is paused, quarantined, holds keys,\n" +
		"fails to apply or build, waits for capture, lags more than --max-lag, or no runner is attached.",
	"definitions": "usage: trellis-repl definitions [--dsn URL] [--schema NAME] [--json] [NAME...]\n" +
		"Lists each transform's definition, sources and state (only reads).",
	"await": "usage: trellis-repl await [--dsn URL] [--schema NAME] [--timeout D] [NAME...]\n" +
		"Waits until every write committed before the call is reflected in the named transforms (and those they read),\n" +
		"or in every transform not paused by a user; exits 3 on timeout, naming the transforms still behind (only reads).",
	"doctor": "usage: trellis-repl doctor [--dsn URL] [--schema NAME] [--json]\n" +
		"Checks what the server and role allow for capture; changes nothing.",
	"self-check": "usage: trellis-repl self-check [--dsn URL] [--wait] [--strict] [--repair] [--timeout D] [--page-size N] [--json] TRANSFORM\n" +
		"       trellis-repl self-check [--dsn URL] [--wait] [--json] --job ID\n" +
		"Compares a target with a fresh run of its query as a job in the catalog (the runner runs it; with --wait and\n" +
		"no runner attached, this process does). Exits 3 unless the report is converged (or a repair left nothing).",
	"held": "usage: trellis-repl held [--dsn URL] [--json] [--since TIME]\n" +
		"       trellis-repl held [--dsn URL] [--json] [--limit N] [--after CURSOR] TRANSFORM\n" +
		"Lists the keys held in quarantine (only reads).",
	"release": "usage: trellis-repl release [--dsn URL] TRANSFORM TABLE KEY...\n" +
		"       trellis-repl release [--dsn URL] --all TRANSFORM\n" +
		"Releases held keys: they are re-derived from the current rows.",
	"quarantine": "usage: trellis-repl quarantine [--dsn URL] [--json] [TRANSFORM]\n" +
		"Lists the quarantined transforms, or one transform's quarantine state (only reads).",
	"version": "usage: trellis-repl version\nPrints the module version and the VCS commit it was built from.",
	"bench":   benchUsage,
}

// envNote closes every command's help.
const envNote = `
Every flag can also be set in the environment as TRELLIS_<FLAG> (upper case, '-' as '_':
--max-lag is TRELLIS_MAX_LAG); a flag given on the command line wins. --dsn is read from
TRELLIS_DATABASE_URL, then the libpq PG* variables. bench's flags are TRELLIS_BENCH_<FLAG>.
Exit codes: 0 ok, 1 failed (code: sentence on stderr), 2 bad usage, 3 behind or unhealthy
(status --check, await).
`

// helpRequested is CMD --help: its text goes to stdout, exit 0.
type helpRequested struct{ text string }

func (h helpRequested) Error() string { return "help requested" }

// exitWith ends a command with a given exit code; err, when set, is
// printed like any other error.
type exitWith struct {
	code int
	err  error
}

func (e exitWith) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit %d", e.code)
}

func (e exitWith) Unwrap() error { return e.err }

// envName is the variable that sets flag name of command cmd.
func envName(cmd, name string) string {
	if name == "dsn" && cmd != "bench" {
		return "TRELLIS_DATABASE_URL"
	}
	v := "TRELLIS_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if cmd == "bench" {
		// bench's flags mean other things (--capture, --dsn of a
		// superuser): an instance's environment must not reach them.
		v = "TRELLIS_BENCH_" + strings.TrimPrefix(v, "TRELLIS_")
	}
	return v
}

// parse parses a command's flags (also after positional arguments), then
// sets every flag not given from its environment variable. --help gives
// helpRequested; a bad flag or variable a usageError.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequested{helpText(fs)}
		}
		return usageError{err.Error()}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !given[f.Name] {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	for _, n := range names {
		v, ok := os.LookupEnv(envName(fs.Name(), n))
		if !ok || v == "" && n == "dsn" {
			continue
		}
		if err := fs.Set(n, v); err != nil {
			shown := v
			if n == "dsn" {
				shown = redact.Text(v)
			}
			return usageError{fmt.Sprintf("environment variable %s=%q is not a valid --%s (%s); fix or unset it",
				envName(fs.Name(), n), shown, n, valueHint(fs.Lookup(n), err))}
		}
	}
	return nil
}

// valueHint says what a flag takes, for a value it refused with err.
func valueHint(f *flag.Flag, err error) string {
	switch t := fmt.Sprintf("%T", f.Value); {
	case strings.Contains(t, "duration"):
		return "a duration such as 30s or 5m"
	case strings.Contains(t, "int"):
		return "a whole number"
	case strings.Contains(t, "bool"):
		return "true or false"
	}
	return err.Error()
}

// helpText is a command's usage, its flags with their defaults and how
// the environment sets them.
func helpText(fs *flag.FlagSet) string {
	var b bytes.Buffer
	u, ok := commandUsage[fs.Name()]
	if !ok {
		u = "usage: trellis-repl " + fs.Name() + " [flags]"
	}
	b.WriteString(strings.TrimRight(u, "\n") + "\n\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	b.WriteString(envNote)
	return b.String()
}

// logFlags are the logging flags of a command that logs.
type logFlags struct {
	format, level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text (logfmt) or json (one object per line)")
	fs.StringVar(&l.level, "log-level", "info", "least level logged: debug, info, warn or error")
}

// logger is the command's logger on w. Every string it writes, message and
// attributes, goes through m, so no password reaches the log.
func (l *logFlags) logger(w io.Writer, m *redact.Masker) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q: use debug, info, warn or error", l.level)}
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		return maskAttr(a, m)
	}}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Sprintf("--log-format %q: use text or json", l.format)}
}

// maskAttr masks passwords in a log attribute's value: strings, errors and
// anything else whose text shows one (left as it is otherwise).
func maskAttr(a slog.Attr, m *redact.Masker) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(m.String(a.Value.String()))
	case slog.KindAny:
		v := a.Value.Any()
		var s string
		if err, ok := v.(error); ok {
			s = err.Error()
		} else {
			s = fmt.Sprint(v)
		}
		if masked := m.String(s); masked != s {
			a.Value = slog.StringValue(masked)
		}
	}
	return a
}

// maskerFor masks the passwords of the connection strings args and the
// environment name, and PGPASSWORD.
func maskerFor(args []string) *redact.Masker {
	dsns := []string{os.Getenv("TRELLIS_DATABASE_URL"), os.Getenv("TRELLIS_BENCH_DSN")}
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "dsn" {
			continue
		}
		if hasVal {
			dsns = append(dsns, val)
		} else if i+1 < len(args) {
			dsns = append(dsns, args[i+1])
		}
	}
	return redact.New(redact.Secrets(dsns...)...)
}
