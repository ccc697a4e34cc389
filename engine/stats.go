package engine

import (
	"reflect"
	"sync/atomic"
)

// Stats is a snapshot of the engine's counters since the process started.
// It is the one definition of the counters: GET /api/stats (and the
// dashboard) serve it under its JSON names, /metrics exports each field,
// and the tests decode the endpoint into it.
type Stats struct {
	// RecordsProcessed counts records applied to an aggregate.
	RecordsProcessed int64 `json:"recordsProcessed"`
	// RecordsRekeyed counts input records forwarded to the repartition topic.
	RecordsRekeyed int64 `json:"recordsRekeyed"`
	// DuplicatesSkipped counts repartition records skipped as replays or
	// rekey duplicates by the version/sources check.
	DuplicatesSkipped int64 `json:"duplicatesSkipped"`
	// DeadLettered counts records sent to the dead-letter topic.
	DeadLettered int64 `json:"deadLettered"`
	// ChangelogRestored counts changelog records read during restores.
	ChangelogRestored int64 `json:"changelogRestored"`
	// ChangelogSkipped counts changelog records a restore could not read
	// (not framed, not Avro, a bad key or header) and skipped; a decoder
	// that is only unavailable is waited for instead.
	ChangelogSkipped int64 `json:"changelogSkipped"`
	// StoreBatches counts atomic batch writes to the store.
	StoreBatches int64 `json:"storeBatches"`
	// StoreDocsWritten counts documents written in those batches.
	StoreDocsWritten int64 `json:"storeDocsWritten"`
	// FencedWrites counts batches refused because another writer owns the partition.
	FencedWrites int64 `json:"fencedWrites"`
	// TransactionsCommitted counts flush transactions committed (exactly-once).
	TransactionsCommitted int64 `json:"transactionsCommitted"`
	// TransactionsAborted counts flush transactions aborted: fenced by a new
	// owner, or failed; their records are invisible to read_committed readers.
	TransactionsAborted int64 `json:"transactionsAborted"`
	// GroupRestarts counts consumer group sessions ended by an error (a
	// failed task, a fenced or aborted flush, a broker error).
	GroupRestarts int64 `json:"groupRestarts"`
	// ReadLeaseLapses counts the times this instance's read lease ran out
	// (no heartbeat answered within the session timeout: paused, cut off)
	// or was revoked (the group went on without it); meanwhile it answered
	// none of its partitions as owner.
	ReadLeaseLapses int64 `json:"readLeaseLapses"`
	// PartitionsAssigned is the number of repartition partitions this instance owns.
	PartitionsAssigned int64 `json:"partitionsAssigned"`
	// PartitionsRunning is how many of them finished restoring.
	PartitionsRunning int64 `json:"partitionsRunning"`
	// PartitionsStandby is how many partitions this instance keeps as
	// standby replicas (warm-ups included).
	PartitionsStandby int64 `json:"partitionsStandby"`
	// StandbyRecords counts changelog records standbys read into the store.
	StandbyRecords int64 `json:"standbyRecords"`
	// GroupRejoins counts the times a caught-up warm-up made this member
	// rejoin the group, so that its active could move here.
	GroupRejoins int64 `json:"groupRejoins"`
	// PartitionsResumed counts partitions that stayed here across a
	// rebalance and ran on at once, without a restore.
	PartitionsResumed int64 `json:"partitionsResumed"`
}

// counters are the live, atomically updated values behind Stats.
type counters struct {
	processed, rekeyed, duplicates, dead, restored, batches, docs, fenced atomic.Int64
	changelogSkipped                                                      atomic.Int64
	txnCommitted, txnAborted, restarts, leaseLapses                       atomic.Int64
	assigned, running, standbys, standbyRead, rejoins, resumed            atomic.Int64
	departedFences                                                        atomic.Int64 // transactions fenceDeparted initialised
}

func (c *counters) snapshot() Stats {
	return Stats{
		RecordsProcessed:      c.processed.Load(),
		RecordsRekeyed:        c.rekeyed.Load(),
		DuplicatesSkipped:     c.duplicates.Load(),
		DeadLettered:          c.dead.Load(),
		ChangelogRestored:     c.restored.Load(),
		ChangelogSkipped:      c.changelogSkipped.Load(),
		StoreBatches:          c.batches.Load(),
		StoreDocsWritten:      c.docs.Load(),
		FencedWrites:          c.fenced.Load(),
		TransactionsCommitted: c.txnCommitted.Load(),
		TransactionsAborted:   c.txnAborted.Load(),
		GroupRestarts:         c.restarts.Load(),
		PartitionsAssigned:    c.assigned.Load(),
		ReadLeaseLapses:       c.leaseLapses.Load(),
		PartitionsRunning:     c.running.Load(),
		PartitionsStandby:     c.standbys.Load(),
		StandbyRecords:        c.standbyRead.Load(),
		GroupRejoins:          c.rejoins.Load(),
		PartitionsResumed:     c.resumed.Load(),
	}
}

// Add returns the field-by-field sum of s and o (the counters of several
// jobs' engines in one process). Every field of Stats is an int64.
func (s Stats) Add(o Stats) Stats {
	sv, ov := reflect.ValueOf(&s).Elem(), reflect.ValueOf(o)
	for i := range sv.NumField() {
		sv.Field(i).SetInt(sv.Field(i).Int() + ov.Field(i).Int())
	}
	return s
}
