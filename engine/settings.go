package engine

// settings.go owns the session settings a definition's results depend on
// (ADR 0037): which are recorded with the plan at define (recordSettings),
// how every session that evaluates the query applies them (SessionSettings),
// and the built-ins that are stable only because they read those settings
// (settingsOnly), resolved to OIDs by signature against the catalog.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Setting is one session setting recorded with a plan.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// recordedSettings are the settings that change what a built-in prints or
// computes without reading the clock or the database: the time zone, the
// date, interval and number styles, the locale's formats.
var recordedSettings = []string{"TimeZone", "DateStyle", "IntervalStyle", "lc_monetary", "lc_numeric", "lc_time",
	"extra_float_digits", "timezone_abbreviations"}

// recordSettings reads the recorded settings from the defining session
// (or a session's defaults).
func recordSettings(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]Setting, error) {
	rows, err := db.Query(ctx, `SELECT s, current_setting(s) FROM unnest($1::text[]) WITH ORDINALITY AS u(s, i) ORDER BY i`, recordedSettings)
	if err != nil {
		return nil, fmt.Errorf("read the session's settings: %w", err)
	}
	defer rows.Close()
	var out []Setting
	for rows.Next() {
		var s Setting
		if err := rows.Scan(&s.Name, &s.Value); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// SessionSettings are the settings a session evaluating the plan's query
// runs with: the appliers' pinned text settings (textSettings), then the
// definition's own where it recorded them (a plan stored before ADR 0037
// has none and keeps the pins and the server's time zone).
func (p *Plan) SessionSettings() [][2]string {
	out := append([][2]string{}, textSettings...)
	for _, s := range p.Settings {
		replaced := false
		for i := range out {
			if out[i][0] == s.Name {
				out[i][1], replaced = s.Value, true
			}
		}
		if !replaced {
			out = append(out, [2]string{s.Name, s.Value})
		}
	}
	return out
}

// ApplySettings sets the plan's session settings for the current
// transaction (set_config(…, true)): for a session that evaluates the
// query outside an applier's (a self-check's snapshot, a comparison).
func (p *Plan) ApplySettings(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) error {
	return setConfig(ctx, db, p.SessionSettings(), true)
}

// setConfig sets settings (name, value pairs) in one statement, for the
// transaction (local) or the session.
func setConfig(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, settings [][2]string, local bool) error {
	if len(settings) == 0 {
		return nil
	}
	names, values := make([]string, len(settings)), make([]string, len(settings))
	for i, kv := range settings {
		names[i], values[i] = kv[0], kv[1]
	}
	if _, err := db.Exec(ctx, `SELECT set_config(n, v, $3) FROM unnest($1::text[], $2::text[]) AS s(n, v)`, names, values, local); err != nil {
		return fmt.Errorf("set %v: %w", names, err)
	}
	return nil
}

// settingsOnly are the built-ins PostgreSQL marks stable only because
// their result depends on the recorded settings — the time zone
// (timestamptz to date, time or timestamp and back, date_trunc, date_part
// and extract over timestamptz, timestamptz ± interval, comparisons of
// timestamptz with date and timestamp, make_timestamptz, to_timestamp and
// to_date with a format), the date and interval styles (their output
// functions, so casts to text), the locale's formats (to_char, money) and
// the output of values of any type (format, concat, ||, the JSON
// builders, array_to_string, array and row output). They never read the
// clock or the database: the input functions (date_in, timestamptz_in …),
// which read 'now' and 'today', are not here, nor are age(x), timetz(time)
// and timezone(text, timetz) (they read the current date), nor enum_out
// (it reads the enum's labels). Signatures are resolved against the
// catalog's own schema at define (settingsOnlyOIDs), so no function of the
// user's can stand for one; one the server lacks is skipped.
var settingsOnly = func() []string {
	out := []string{
		`date(timestamp with time zone)`, `"timestamp"(timestamp with time zone)`,
		`timestamptz(timestamp without time zone)`, `timestamptz(date)`, `timestamptz(date,time without time zone)`,
		`"time"(timestamp with time zone)`, `timetz(timestamp with time zone)`,
		`date_part(text,timestamp with time zone)`, `extract(text,timestamp with time zone)`,
		`date_trunc(text,timestamp with time zone)`, `date_trunc(text,timestamp with time zone,text)`,
		`timestamptz_pl_interval(timestamp with time zone,interval)`, `timestamptz_mi_interval(timestamp with time zone,interval)`,
		`interval_pl_timestamptz(interval,timestamp with time zone)`,
		`make_timestamptz(integer,integer,integer,integer,integer,double precision)`,
		`make_timestamptz(integer,integer,integer,integer,integer,double precision,text)`,
		`to_timestamp(text,text)`, `to_date(text,text)`, `to_number(text,text)`,
		`timestamptz_out(timestamp with time zone)`, `timestamp_out(timestamp without time zone)`, `date_out(date)`,
		`interval_out(interval)`, `cash_out(money)`, `array_out(anyarray)`, `record_out(record)`, `range_out(anyrange)`,
		`to_char(timestamp with time zone,text)`, `to_char(timestamp without time zone,text)`, `to_char(interval,text)`,
		`to_char(numeric,text)`, `to_char(integer,text)`, `to_char(bigint,text)`, `to_char(real,text)`, `to_char(double precision,text)`,
		`money(numeric)`, `money(integer)`, `money(bigint)`, `numeric(money)`,
		`format(text)`, `format(text,"any")`, `concat("any")`, `concat_ws(text,"any")`,
		`textanycat(text,anynonarray)`, `anytextcat(anynonarray,text)`,
		`array_to_string(anyarray,text)`, `array_to_string(anyarray,text,text)`,
		`to_json(anyelement)`, `to_jsonb(anyelement)`, `json_build_object("any")`, `jsonb_build_object("any")`,
		`json_build_array("any")`, `jsonb_build_array("any")`, `row_to_json(record)`, `row_to_json(record,boolean)`,
		`array_to_json(anyarray)`, `array_to_json(anyarray,boolean)`,
		`jsonb_path_exists_tz(jsonb,jsonpath,jsonb,boolean)`, `jsonb_path_match_tz(jsonb,jsonpath,jsonb,boolean)`,
		`jsonb_path_query_first_tz(jsonb,jsonpath,jsonb,boolean)`, `jsonb_path_query_array_tz(jsonb,jsonpath,jsonb,boolean)`,
	}
	for _, cmp := range []string{"lt", "le", "eq", "gt", "ge", "ne", "cmp"} {
		out = append(out,
			fmt.Sprintf("date_%s_timestamptz(date,timestamp with time zone)", cmp),
			fmt.Sprintf("timestamptz_%s_date(timestamp with time zone,date)", cmp),
			fmt.Sprintf("timestamp_%s_timestamptz(timestamp without time zone,timestamp with time zone)", cmp),
			fmt.Sprintf("timestamptz_%s_timestamp(timestamp with time zone,timestamp without time zone)", cmp))
	}
	return out
}()

// settingsOnlyOIDs resolves settingsOnly against the catalog.
func settingsOnlyOIDs(ctx context.Context, db DB) (map[uint32]bool, error) {
	rows, err := db.Query(ctx, `SELECT p FROM (SELECT to_regprocedure('pg_catalog.' || s)::oid AS p FROM unnest($1::text[]) s) r WHERE p IS NOT NULL`, settingsOnly)
	if err != nil {
		return nil, fmt.Errorf("resolve the settings-only built-ins: %w", err)
	}
	defer rows.Close()
	out := map[uint32]bool{}
	for rows.Next() {
		var oid uint32
		if err := rows.Scan(&oid); err != nil {
			return nil, err
		}
		out[oid] = true
	}
	return out, rows.Err()
}
