// Package fault is the one classifier of errors that applying changes,
// building a transform and running a statement share (ADR 0013): an error
// belongs to one key's data, every key would hit it, or it may pass by
// itself.
package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class is what an error means for the keys being written.
type Class int

const (
	// Transient errors may pass by themselves: retry with backoff.
	Transient Class = iota
	// Data errors belong to the rows being written: another key would
	// not hit them, so the failing key is isolated and held.
	Data
	// Halt errors every key reproduces (a dropped object, a revoked
	// privilege): pause the transform once, naming the cause.
	Halt
)

func (c Class) String() string {
	switch c {
	case Data:
		return "data"
	case Halt:
		return "halt"
	default:
		return "transient"
	}
}

// dataClasses are SQLSTATE classes of errors about the values written:
// data exceptions, integrity constraints, limits a value exceeds (a group
// key too long for its index), a PL/pgSQL RAISE (a user trigger), and a
// user function failing.
var dataClasses = map[string]bool{"22": true, "23": true, "54": true, "P0": true, "38": true, "39": true}

// haltClasses are SQLSTATE classes no retry and no key cures: undefined
// objects, missing privileges, syntax, unsupported features, invalid
// schema, catalog, grantor or role names.
var haltClasses = map[string]bool{"42": true, "0A": true, "2B": true, "3D": true, "3F": true, "0L": true, "0P": true}

// Classify says what err means for the keys being written.
func Classify(err error) Class {
	if err == nil {
		return Transient
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 {
		switch class := pe.Code[:2]; {
		case dataClasses[class]:
			return Data
		case haltClasses[class]:
			return Halt
		}
	}
	return Transient
}

// Disconnected reports whether err means the connection or the server
// went away, so retrying on a new connection may cure it: SQLSTATE class
// 08, an administrator or crash shutdown (57P01–57P03), too many
// connections while the server restarts (53300), EOF, a closed
// connection, socket and DNS errors. Not a timeout of the caller's own:
// context.DeadlineExceeded is a net.Error too, so only socket errors
// count.
func Disconnected(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			return true
		}
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &op) || errors.As(err, &dns)
}

// TransientConnect reports whether a connection attempt failed for a reason that
// passes by itself: the server is starting up or shutting down (57P01–
// 57P03), has no connection slot free (53300), or dropped the connection
// (EOF, reset). A refused or unresolvable address, or an authentication
// failure, is not: retrying would only hide the mistake.
func TransientConnect(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53300", "57P01", "57P02", "57P03":
			return true
		}
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// SQLState is the SQLSTATE of err, or "" when PostgreSQL did not send it.
func SQLState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Message is the message PostgreSQL gave (with its detail), or the error
// as text: what a halt, a held key or a refusal quotes.
func Message(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Detail != "" {
			return pe.Message + " (" + pe.Detail + ")"
		}
		return pe.Message
	}
	return err.Error()
}

// TimedOut reports whether err is a wait that ran out of time rather
// than a failure: PostgreSQL cancelled a statement at statement_timeout
// (57014) or gave up a lock at lock_timeout (55P03), or the caller's
// deadline passed while waiting for a connection or for the server. The
// call contract (ADR 0040) reports these as timeout errors.
func TimedOut(err error) bool {
	if err == nil {
		return false
	}
	switch SQLState(err) {
	case "57014", "55P03":
		return true
	}
	return pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)
}
