package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("apply: %w", &pgconn.PgError{Code: code}) }
	for _, c := range []struct {
		name string
		err  error
		want Class
	}{
		{"division by zero", pg("22012"), Data},
		{"invalid cast", pg("22P02"), Data},
		{"check violation", pg("23514"), Data},
		{"unique violation", pg("23505"), Data},
		{"not null", pg("23502"), Data},
		{"index row too big", pg("54000"), Data},
		{"user trigger raise", pg("P0001"), Data},
		{"user function", pg("38000"), Data},
		{"undefined table", pg("42P01"), Halt},
		{"undefined column", pg("42703"), Halt},
		{"undefined function", pg("42883"), Halt},
		{"permission denied", pg("42501"), Halt},
		{"feature not supported", pg("0A000"), Halt},
		{"invalid schema", pg("3F000"), Halt},
		{"serialization", pg("40001"), Transient},
		{"deadlock", pg("40P01"), Transient},
		{"lock not available", pg("55P03"), Transient},
		{"admin shutdown", pg("57P01"), Transient},
		{"query canceled", pg("57014"), Transient},
		{"disk full", pg("53100"), Transient},
		{"connection failure", pg("08006"), Transient},
		{"internal", pg("XX000"), Transient},
		{"not from postgres", errors.New("boom"), Transient},
		{"eof", io.ErrUnexpectedEOF, Transient},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("%s: Classify = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDisconnected(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), true},
		{io.EOF, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{context.Canceled, false},
		{errors.New("boom"), false},
	} {
		if got := Disconnected(c.err); got != c.want {
			t.Errorf("Disconnected(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestTransientConnect(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "53300"}, true},
		{&pgconn.PgError{Code: "57P03"}, true},
		{fmt.Errorf("connect: %w", &pgconn.PgError{Code: "57P01"}), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{io.ErrUnexpectedEOF, true},
		{&pgconn.PgError{Code: "28P01"}, false}, // password authentication failed
		{&pgconn.PgError{Code: "3D000"}, false}, // database does not exist
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), false},
		{errors.New("no such host"), false},
	} {
		if got := TransientConnect(tc.err); got != tc.want {
			t.Errorf("TransientConnect(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestTimedOut(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57014"}, true}, // statement_timeout
		{fmt.Errorf("lock: %w", &pgconn.PgError{Code: "55P03"}), true},
		{fmt.Errorf("acquire: %w", context.DeadlineExceeded), true},
		{context.Canceled, false}, // the caller gave up: no timeout
		{&pgconn.PgError{Code: "40P01"}, false},
		{errors.New("boom"), false},
		{nil, false},
	} {
		if got := TimedOut(tc.err); got != tc.want {
			t.Errorf("TimedOut(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
