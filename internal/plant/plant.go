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
)

// EnvVar names the environment variable that selects a planted bug.
const EnvVar = "TRELLIS_TEST_PLANT"
