package replication

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// LostKind says how capture lost continuity.
type LostKind string

// The ways a slot or publication can be lost.
const (
	// SlotMissing: the slot does not exist (dropped, or never created).
	SlotMissing LostKind = "slot_missing"
	// SlotInvalidated: the server removed WAL the slot still needed
	// (wal_status = 'lost', max_slot_wal_keep_size exceeded).
	SlotInvalidated LostKind = "slot_invalidated"
	// PublicationMissing: the publication does not exist, or was created
	// after the slot's current position (pgoutput resolves publications
	// with the historic snapshot of the WAL it decodes).
	PublicationMissing LostKind = "publication_missing"
	// SlotAhead: the slot's confirmed_flush_lsn is beyond the position the
	// consumer asked to resume from (StartLSN), so the changes in between
	// will never be sent (slot advanced by hand, or re-created).
	SlotAhead LostKind = "slot_ahead"
	// SlotUndecodable: the server fails to decode the slot's WAL with an
	// internal error every time it tries (for example PostgreSQL 15's
	// "could not map filenode … to relation OID" after a TRUNCATE in a
	// savepoint committed while the slot was being created): the slot can
	// never move past that point.
	SlotUndecodable LostKind = "slot_undecodable"
)

// SlotLostError reports that capture lost continuity: changes may have been
// missed, so the transforms fed by the slot need a rebuild (a disruption,
// docs/architecture.md §3.9). Run returns it at once instead of retrying.
type SlotLostError struct {
	Kind        LostKind
	Slot        string
	Publication string
	Detail      string // extra facts, e.g. the LSNs of SlotAhead
	Err         error  // the server's error, when there was one
}

// Error is a sentence naming the slot or publication and the way out.
func (e *SlotLostError) Error() string {
	var s string
	switch e.Kind {
	case SlotMissing:
		s = fmt.Sprintf("replication slot %q does not exist; changes since the last confirmed position may be lost, so the transforms must be rebuilt", e.Slot)
	case SlotInvalidated:
		s = fmt.Sprintf("replication slot %q was invalidated because the server removed WAL it still needed (max_slot_wal_keep_size); drop it and rebuild the transforms", e.Slot)
	case PublicationMissing:
		s = fmt.Sprintf("publication %q does not exist at the slot's position; recreate the publication and slot %q and rebuild the transforms", e.Publication, e.Slot)
	case SlotUndecodable:
		s = fmt.Sprintf("the server cannot decode the WAL of replication slot %q (%s); the slot must be re-created and the transforms rebuilt", e.Slot, e.Detail)
	case SlotAhead:
		s = fmt.Sprintf("replication slot %q has confirmed changes beyond the position the consumer resumes from (%s), so the changes in between are lost; rebuild the transforms", e.Slot, e.Detail)
	default:
		s = fmt.Sprintf("replication slot %q lost continuity", e.Slot)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return "replication: " + s
}

// Unwrap exposes the server's error.
func (e *SlotLostError) Unwrap() error { return e.Err }

// UnavailableError reports that this server or role cannot do logical
// capture as configured (wal_level, no REPLICATION attribute, pg_hba, a
// pooler, a standby, a slot of the wrong kind). Run returns it at once;
// it needs an operator, or a switch to trigger capture.
type UnavailableError struct {
	Reason string
	Err    error
}

// Error is the reason plus the server's error.
func (e *UnavailableError) Error() string {
	if e.Err != nil {
		return "replication: logical capture unavailable: " + e.Reason + ": " + e.Err.Error()
	}
	return "replication: logical capture unavailable: " + e.Reason
}

// Unwrap exposes the server's error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// classify turns an error from connecting or streaming into a permanent
// error for the caller, or nil when a reconnect with backoff may cure it
// (network trouble, server restart, walsender terminated, slot busy).
func classify(err error, slot, pub string) error {
	var lost *SlotLostError
	var unavail *UnavailableError
	if errors.As(err, &lost) || errors.As(err, &unavail) {
		return err
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil // network trouble, EOF, a closed connection: retry
	}
	msg := strings.ToLower(pe.Message)
	switch pe.Code {
	case "42704": // undefined_object
		switch {
		case strings.Contains(msg, "publication"):
			return &SlotLostError{Kind: PublicationMissing, Slot: slot, Publication: pub, Err: err}
		case strings.Contains(msg, "replication slot"):
			return &SlotLostError{Kind: SlotMissing, Slot: slot, Publication: pub, Err: err}
		}
		// e.g. an unrecognized configuration parameter in the DSN
		return &UnavailableError{Reason: "the server refused the connection settings", Err: err}
	case "55000": // object_not_in_prerequisite_state
		if strings.Contains(msg, "cannot read from logical replication slot") ||
			strings.Contains(msg, "can no longer get changes") || strings.Contains(msg, "invalidated") {
			return &SlotLostError{Kind: SlotInvalidated, Slot: slot, Publication: pub, Err: err}
		}
		switch {
		case strings.Contains(msg, "wal_level"):
			return &UnavailableError{Reason: "wal_level must be logical", Err: err}
		case strings.Contains(msg, "recovery"):
			return &UnavailableError{Reason: "the server is a standby; connect to the primary", Err: err}
		}
		return &UnavailableError{Reason: fmt.Sprintf("slot %q cannot be used for pgoutput streaming", slot), Err: err}
	case "42501": // insufficient_privilege
		return &UnavailableError{Reason: "the role needs the REPLICATION attribute (ALTER ROLE … REPLICATION)", Err: err}
	case "28000", "28P01": // pg_hba / authentication
		return &UnavailableError{Reason: "the server refused the replication connection (pg_hba.conf or credentials)", Err: err}
	case "3D000": // invalid_catalog_name
		return &UnavailableError{Reason: "the database does not exist", Err: err}
	case "08P01": // protocol_violation: typically a pooler rejecting replication
		return &UnavailableError{Reason: "the connection does not support replication (a connection pooler in the way?); connect to PostgreSQL directly", Err: err}
	case "0A000": // feature_not_supported
		return &UnavailableError{Reason: "the server does not support what the stream needs", Err: err}
	}
	// 55006 (slot active for another PID), 53300 (too many walsenders),
	// 57P01..57P03 (shutdown, terminated, starting up) and the rest: retry.
	return nil
}
