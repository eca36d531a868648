// Package plant injects known bugs into the engine for the generative
// suite to catch (issue: "planted bugs it must catch"). Only test builds
// with the `trellisplant` build tag can turn one on, through the
// TRELLIS_TEST_PLANT environment variable; in every other build Active is
// a constant false the compiler removes.
package plant

// The planted bugs.
const (
	// SkipLedgerUpdate: aggregate appliers do not write the ledger.
	SkipLedgerUpdate = "skip_ledger_update"
	// StaleRead: re-derive from a snapshot taken before the previous batch
	// committed.
	StaleRead = "stale_read"
	// DropOldKey: a key-changing UPDATE dirties only the new key.
	DropOldKey = "drop_old_key"
	// KeepEmptyGroup: groups whose row count reaches zero are not deleted.
	KeepEmptyGroup = "keep_empty_group"
	// ConfirmBeforeRecord: the slot is confirmed before the keys are durable.
	ConfirmBeforeRecord = "confirm_before_record"
	// SkipVisibilityWait: re-derive without checking that the snapshot sees
	// the slot transaction.
	SkipVisibilityWait = "skip_visibility_wait"
	// IgnoreLeftJoinNulls: a change to an outer join's NULL-extended side
	// does not widen the scope to the preserved side, so a stale
	// NULL-extended row stays (or a new one never appears).
	IgnoreLeftJoinNulls = "ignore_left_join_nulls"
	// SkipDimensionChange: a change to any source but the first of a join
	// re-derives nothing.
	SkipDimensionChange = "skip_dimension_change"
	// DrainSkipsOpenTxn: the trigger drain takes a position-based cut (rows
	// after the highest one it took), so rows of a transaction still open
	// below the cut are skipped when it commits.
	DrainSkipsOpenTxn = "drain_skips_open_txn"
	// HoldWholeBatch: a batch failing on one key's data holds every key of
	// the batch instead of isolating the failing one (ADR 0013).
	HoldWholeBatch = "hold_whole_batch"
	// DoneClearsRedirtied: a key marked dirty again while its batch is
	// being applied is cleared when that batch completes, so its second
	// change is never re-derived.
	DoneClearsRedirtied = "done_clears_redirtied_key"
	// FlattenNullableComputed: whether a derived table on the
	// NULL-extended side of an outer join may be pulled up is judged on
	// the subquery as written, before its own derived tables are
	// flattened into it, so a computed output or WHERE one level down is
	// pulled up past the outer join (issue 28).
	FlattenNullableComputed = "flatten_nullable_computed"
	// ExistsMissesLastDelete: a NOT EXISTS subquery's dependency join
	// (ADR 0030) is not mirrored, so when the subquery's last matching row
	// goes (its dependency level row disappears) the outer row, which the
	// condition dropped and so no stored row's lineage shows, is not
	// re-derived and never appears (nor does a stored row go when its
	// first match comes).
	ExistsMissesLastDelete = "exists_misses_last_delete"
	// StaleScalar: an aggregate scalar subquery's dependency level does not
	// hold its value (correlated: only its groups; uncorrelated: one
	// constant row read from no row), so when the value moves no level row
	// changes and the outer rows that read it are not re-derived.
	StaleScalar = "stale_scalar"
	// WindowPartitionStale: a window batch (ADR 0033) collects only the
	// partitions the changed rows are in now, not those the target stored
	// them in, so the partition a row left (or was deleted from) is not
	// recomputed: its other rows keep stale values, the row stays.
	WindowPartitionStale = "window_partition_stale"
	// TopKNoRefill: a window batch inserts the rows it re-derives but does
	// not update stored ones, so ranks go stale: when a top-K row is
	// deleted, the next row's row_number stays above the limit and it
	// never enters the top K.
	TopKNoRefill = "topk_no_refill"
	// RecursiveAnchorStale: a recursive CTE's batch (ADR 0035) finds the
	// anchors its changed rows are read by now, not those whose stored
	// derivation read them, so a deleted or re-parented row's old anchors
	// keep the rows it derived.
	RecursiveAnchorStale = "recursive_anchor_stale"
	// ApplierConnectionPerTransform: every transform's worker keeps an
	// applier connection of its own again, outside the connection budget
	// (ADR 0028).
	ApplierConnectionPerTransform = "applier_connection_per_transform"
	// TrustStoreAfterPromotion: the runner keeps its local store across a
	// change of timeline (a promoted standby, a point-in-time restore)
	// instead of discarding it (ADR 0039), so streaming resumes at the
	// store's received position — a future the new timeline never had —
	// and the server skips every transaction the new timeline commits
	// before it.
	TrustStoreAfterPromotion = "trust_store_after_promotion"
	// ColumnBuildSkipsNewChanges: during a column build (ALTER TRANSFORM,
	// ADR 0041) the changes drained between build chunks go through an
	// applier of the previous plan, so a key the build has passed and that
	// changes again is written with the old expression.
	ColumnBuildSkipsNewChanges = "column_build_skips_new_changes"
)

// EnvVar names the environment variable that selects a planted bug.
const EnvVar = "TRELLIS_TEST_PLANT"
