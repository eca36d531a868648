package trellis

import "context"

// Run maintains every transform until ctx ends: it captures changes (from
// the instance's replication slot, or with triggers where logical
// replication is not available), builds new transforms and keeps live ones
// exact (internal/pipeline draws the dataflow).
//
// One Run per instance schema is active at a time, holding the runner
// lock; another waits as a standby, trying the lock every 500 ms, and
// takes over when the active one dies or loses its connection. A run that
// loses its connection to PostgreSQL (a restart, a terminated backend, the
// network) is torn down and started again after a capped backoff, resuming
// from its checkpoint. Run returns nil once ctx ends, and an error only
// when no reconnect can cure it. It opens at most Config.MaxConnections
// connections, whatever the number of transforms.
func (t *Trellis) Run(ctx context.Context) error { return t.rt.Run(ctx) }

// Readiness is what Run in this process is doing now and whether it is
// ready: the active runner, connected, capturing, not disrupted, and its
// catalog heartbeat recent. It reads no database.
func (t *Trellis) Readiness() Readiness { return t.rt.Readiness() }
