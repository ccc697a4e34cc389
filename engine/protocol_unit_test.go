package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// TestUnitSkipRules feeds the aggregate hand-written repartition records:
// a record at an offset not above its document's version, or whose input
// source offset is not above the one recorded for that input partition,
// is skipped, and DuplicatesSkipped counts exactly those.
func TestUnitSkipRules(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	type rec struct {
		movie int64
		value float64
		srcP  int32 // -1: no source headers
		srcO  int64
	}
	tests := []struct {
		name     string
		g        engine.Guarantee
		seed     []movieStats
		recs     []rec
		want     map[int64]movieStats
		wantSkip int64
	}{{
		name: "source re-forwarded by the rekey stage",
		g:    engine.ExactlyOnce,
		recs: []rec{
			{1, 4, 0, 10},
			{1, 4, 0, 10}, // the same input record again: skipped
			{1, 6, 0, 11},
			{1, 8, 0, 9}, // an older input offset of the same input partition: skipped
			{1, 2, 1, 0}, // another input partition: applied
			{2, 5, -1, 0},
		},
		want:     map[int64]movieStats{1: {Count: 3, Sum: 12}, 2: {Count: 1, Sum: 5}},
		wantSkip: 2,
	}, {
		name: "offsets at or below the stored version",
		g:    engine.AtLeastOnce,
		seed: []movieStats{{MovieID: 1, Count: 2, Sum: 10, Version: 1}},
		recs: []rec{
			{1, 5, -1, 0}, // offset 0 <= version 1: skipped
			{1, 5, -1, 0}, // offset 1 <= version 1: skipped
			{1, 7, -1, 0},
			{1, 9, -1, 0},
		},
		want:     map[int64]movieStats{1: {Count: 4, Sum: 26}},
		wantSkip: 2,
	}, {
		name: "both rules across movies",
		g:    engine.ExactlyOnce,
		seed: []movieStats{{MovieID: 3, Count: 1, Sum: 1, Version: 0, Sources: map[int32]int64{0: 50}}},
		recs: []rec{
			{3, 9, 0, 60}, // offset 0 <= version 0: skipped
			{3, 9, 0, 50}, // source 50 <= 50: skipped
			{3, 3, 0, 51},
			{4, 4, 0, 1},
			{4, 4, 0, 1}, // skipped
		},
		want:     map[int64]movieStats{3: {Count: 2, Sum: 4}, 4: {Count: 1, Sum: 4}},
		wantSkip: 3,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memstore.New()
			if len(tt.seed) > 0 {
				seed(t, store, 0, 0, tt.seed...)
			}
			r := newRig(t, nil, unitConfig(nil, tt.g), store)
			for _, x := range tt.recs {
				r.repartitionRecord(t, x.movie, x.value, x.srcP, x.srcO)
			}
			r.start(t)
			eventually(t, "every repartition record handled", func() error {
				s := r.e.Stats()
				if got := s.RecordsProcessed + s.DuplicatesSkipped; got != int64(len(tt.recs)) {
					return fmt.Errorf("processed+skipped = %d, want %d", got, len(tt.recs))
				}
				return r.storeHas(tt.want)()
			})
			if got := r.e.Stats().DuplicatesSkipped; got != tt.wantSkip {
				t.Errorf("DuplicatesSkipped: got %d, want %d", got, tt.wantSkip)
			}
			if got, want := r.e.Stats().RecordsProcessed, int64(len(tt.recs))-tt.wantSkip; got != want {
				t.Errorf("RecordsProcessed: got %d, want %d", got, want)
			}
		})
	}
}

// eventsOf returns the events of the transactional producer txnID.
func eventsOf(evs []event, txnID string) []event {
	var out []event
	for _, e := range evs {
		if e.TxnID == txnID {
			out = append(out, e)
		}
	}
	return out
}

// TestUnitFlushOrder checks the order of one flush against the store
// write, from the cluster's request log: under exactly-once, the
// transaction (its partitions added, the changelog and averages sent, the
// offsets added and committed to it, then its commit) and only then the
// store write, whose checkpoint is one past the transaction's last
// changelog record (its commit marker is at the checkpoint); under
// at-least-once, records sent, store write, then the offset commit.
func TestUnitFlushOrder(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	ratings := []rating{{1, 8}, {2, 6}, {1, 4}, {3, 10}}
	for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
		t.Run(string(g), func(t *testing.T) {
			r := newRig(t, nil, unitConfig(nil, g), nil)
			r.start(t)
			r.rate(t, 0, ratings[:2]...)
			eventually(t, "first batch stored", r.storeHas(totals(ratings[:2])))
			r.rate(t, 0, ratings[2:]...)
			eventually(t, "second batch stored", r.storeHas(totals(ratings)))
			r.stop(t)

			evs := r.c.Events()
			changelog, err := r.c.Records(r.topics.Changelog, 0)
			if err != nil {
				t.Fatal(err)
			}
			txn := r.topics.TransactionalID(0)
			live := 0
			for i, e := range evs {
				n, ok := parseApply(e)
				if !ok || n.replay || n.docs == 0 {
					continue
				}
				live++
				if n.checkpoint < 1 || n.checkpoint > int64(len(changelog)) {
					t.Fatalf("store write #%d: checkpoint %d outside the changelog (%d records)", e.Seq, n.checkpoint, len(changelog))
				}
				if last := changelog[n.checkpoint-1]; last.State != stateCommitted {
					t.Errorf("store write #%d: changelog record below checkpoint %d is %v, want committed data", e.Seq, n.checkpoint, last.State)
				}
				before := evs[:i]
				if g == engine.ExactlyOnce {
					if n.checkpoint >= int64(len(changelog)) || changelog[n.checkpoint].State != stateMarker {
						t.Errorf("store write #%d: want the commit marker at checkpoint %d", e.Seq, n.checkpoint)
					}
					if err := checkTxn(lastTxn(eventsOf(before, txn)), r.topics); err != nil {
						t.Errorf("store write #%d: the transaction before it: %v", e.Seq, err)
					}
					continue
				}
				// at-least-once: the last changelog send precedes the write, and
				// the next repartition offset commit follows it.
				lastSend, lastCommit := -1, -1
				for k, b := range before {
					switch {
					case b.Kind == evSend && b.Topic == r.topics.Changelog && b.Err == nil:
						lastSend = k
					case b.Kind == evOffsetCommit && b.Topic == r.topics.Repartition && b.Err == nil:
						lastCommit = k
					}
				}
				if lastSend < 0 || lastCommit > lastSend {
					t.Errorf("store write #%d: want a changelog send after the last repartition offset commit (send at %d, commit at %d)", e.Seq, lastSend, lastCommit)
				}
				next := slices.IndexFunc(evs[i+1:], func(b event) bool {
					return b.Kind == evOffsetCommit && b.Topic == r.topics.Repartition
				})
				if next < 0 {
					t.Errorf("store write #%d: no repartition offset commit after it", e.Seq)
				}
			}
			if live < 2 {
				t.Errorf("live store writes: got %d, want at least 2 (one per batch)", live)
			}
			if got, want := r.e.Stats().TransactionsCommitted > 0, g == engine.ExactlyOnce; got != want {
				t.Errorf("TransactionsCommitted > 0: got %v, want %v", got, want)
			}
		})
	}
}

// lastTxn returns the requests of a producer's last transaction in evs
// (the producer's events): those after the end of the one before it (or
// after the producer's initialisation), through its EndTxn.
func lastTxn(mine []event) []event {
	k := len(mine) - 2
	for k >= 0 && mine[k].Kind != evCommit && mine[k].Kind != evAbort && mine[k].Kind != evInitProducer {
		k--
	}
	return mine[k+1:]
}

// checkTxn returns nil when txn, a task transaction's requests, is: its
// partitions added, then records sent to the changelog and the averages
// (more partitions may be added on the way), then the offsets added and
// committed (the repartition topic's, for the group), then the commit.
func checkTxn(txn []event, topics engine.Topics) error {
	var kinds []string
	for _, e := range txn {
		kinds = append(kinds, e.String())
	}
	fail := func(why string) error { return fmt.Errorf("%s in\n%q", why, kinds) }
	n := len(txn)
	if n < 5 || txn[0].Kind != evAddPartitions {
		return fail("want the partitions added first")
	}
	if txn[n-1].Kind != evCommit || txn[n-1].Err != nil {
		return fail("want a commit last")
	}
	if txn[n-3].Kind != evAddOffsets || txn[n-3].Group != "unit" {
		return fail("want the offsets added after the records sent")
	}
	if txn[n-2].Kind != evTxnOffsets || txn[n-2].Topic != topics.Repartition || txn[n-2].Group != "unit" {
		return fail("want the repartition offsets committed to the transaction before its commit")
	}
	sent := map[string]bool{}
	for _, e := range txn[1 : n-3] {
		switch {
		case e.Kind == evSend && e.Err == nil && (e.Topic == topics.Changelog || e.Topic == topics.Output):
			sent[e.Topic] = true
		case e.Kind == evAddPartitions && e.Err == nil:
		default:
			return fail("unexpected " + e.String())
		}
	}
	if !sent[topics.Changelog] || !sent[topics.Output] {
		return fail("want records sent to the changelog and the averages")
	}
	return nil
}

// TestUnitFailedCommitDropsTheCache fails a flush's CommitTxn, fenced or
// not: the batch never reaches the store, the session restarts, the
// partition is restored and reprocessed, and the final counts are exact
// (a cache kept across the failure would count the batch twice).
func TestUnitFailedCommitDropsTheCache(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	tests := []struct {
		name   string
		err    *kerr.Error
		fenced bool
	}{
		{"fenced", kerr.ProducerFenced, true},
		// The one commit answer that leaves a transaction abortable.
		{"aborted", kerr.UnknownProducerID, false},
	}
	first := []rating{{1, 5}, {1, 7}, {2, 3}}
	second := []rating{{1, 9}, {2, 1}, {3, 4}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := unitConfig(nil, engine.ExactlyOnce)
			cfg.TransactionTimeout = failedTxnTimeout
			r := newRig(t, nil, cfg, nil)
			r.start(t)
			r.rate(t, 0, first...)
			eventually(t, "first batch stored", r.storeHas(totals(first)))
			txn := r.topics.TransactionalID(0)
			r.c.fail(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: txn, Err: tt.err,
				When: func(req kmsg.Request) bool { return req.(*kmsg.EndTxnRequest).Commit }})
			r.rate(t, 0, second...)
			eventually(t, "both batches stored after the restart", r.storeHas(totals(first, second)))
			eventually(t, "partition running again", r.ready)

			s := r.e.Stats()
			if s.GroupRestarts < 1 {
				t.Errorf("GroupRestarts: got %d, want >= 1", s.GroupRestarts)
			}
			if s.TransactionsAborted < 1 {
				t.Errorf("TransactionsAborted: got %d, want >= 1", s.TransactionsAborted)
			}
			if got := s.FencedWrites >= 1; got != tt.fenced {
				t.Errorf("FencedWrites >= 1: got %v (%d), want %v", got, s.FencedWrites, tt.fenced)
			}
			// Between the failed commit and the rejoin, nothing was written.
			evs := r.c.Events()
			failed := slices.IndexFunc(evs, func(e event) bool {
				return e.Kind == evCommit && e.TxnID == txn && e.Err != nil
			})
			if failed < 0 {
				t.Fatalf("no failed commit of %s in the events", txn)
			}
			rejoin := slices.IndexFunc(evs[failed:], func(e event) bool { return e.Kind == evJoin })
			if rejoin < 0 {
				t.Fatalf("no rejoin after the failed commit")
			}
			for _, e := range evs[failed : failed+rejoin] {
				if n, ok := parseApply(e); ok && n.docs > 0 {
					t.Errorf("store written after the failed commit, before the restart: %v", e)
				}
			}
			if !tt.fenced && !slices.ContainsFunc(evs[failed:failed+rejoin], func(e event) bool {
				return e.Kind == evAbort && e.TxnID == txn
			}) {
				t.Errorf("no abort of %s after its failed commit", txn)
			}
			// Every changelog record of the failed transaction is aborted.
			recs, _ := r.c.Records(r.topics.Changelog, 0)
			aborted := 0
			for _, rec := range recs {
				if rec.State == stateAborted {
					aborted++
				}
			}
			if aborted == 0 {
				t.Errorf("aborted changelog records: got 0, want the failed batch's")
			}
			// The failed flush's records were dropped and processed again:
			// all of the second batch, or, when a flush fell between its
			// records (they reach the partition one by one), those of it
			// the failed flush held. Kept instead of dropped, they would
			// be skipped as duplicates after the restart.
			once := int64(len(first) + len(second))
			if got := s.RecordsProcessed; got <= once || got > once+int64(len(second)) {
				t.Errorf("RecordsProcessed (the failed flush's records processed again): got %d, want %d to %d", got, once+1, once+int64(len(second)))
			}
		})
	}
}

// clRecord appends a hand-written changelog record.
func clRecord(t *testing.T, c *kcluster, topic string, d movieStats) {
	t.Helper()
	v, _ := (&unitSerde{}).EncodeCountAndSum(context.Background(), "", avro.CountAndSum{Count: d.Count, Sum: d.Sum})
	var srcs []string
	for p, o := range d.Sources {
		srcs = append(srcs, fmt.Sprintf("%d:%d", p, o))
	}
	hs := []header{
		{Key: engine.HeaderVersion, Value: []byte(strconv.FormatInt(d.Version, 10))},
		{Key: engine.HeaderSources, Value: []byte(strings.Join(srcs, ","))},
	}
	if _, err := c.Append(topic, 0, engine.Int64Keys.Append(nil, d.MovieID), v, hs...); err != nil {
		t.Fatalf("append changelog: %v", err)
	}
}

// TestUnitRestore restores partition 0 from a hand-written changelog:
// from inside it (only the records after the checkpoint), from its log
// start (no checkpoint, or a checkpoint below the start), and from beyond
// its end, which keeps the store and re-seeds the changelog from it.
func TestUnitRestore(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	changelog := []movieStats{
		{MovieID: 1, Count: 1, Sum: 5, Version: 0},
		{MovieID: 2, Count: 1, Sum: 6, Version: 1},
		{MovieID: 1, Count: 2, Sum: 12, Version: 2},
		{MovieID: 3, Count: 1, Sum: 7, Version: 3},
		{MovieID: 2, Count: 2, Sum: 10, Version: 4},
	}
	final := map[int64]movieStats{1: {Count: 2, Sum: 12}, 2: {Count: 2, Sum: 10}, 3: {Count: 1, Sum: 7}}
	tests := []struct {
		name         string
		changelog    []movieStats
		deleteBefore int64
		checkpoint   int64 // < 0: no checkpoint
		stored       []movieStats
		wantRestored int64
	}{
		{name: "checkpoint inside the changelog", changelog: changelog, checkpoint: 3,
			stored: []movieStats{changelog[1], changelog[2]}, wantRestored: 2},
		{name: "no checkpoint", changelog: changelog, checkpoint: -1, wantRestored: 5},
		{name: "checkpoint below the log start", changelog: changelog, deleteBefore: 2, checkpoint: 1,
			stored: []movieStats{changelog[1]}, wantRestored: 3},
		{name: "checkpoint at the end", changelog: changelog, checkpoint: 5,
			stored: []movieStats{changelog[2], changelog[3], changelog[4]}, wantRestored: 0},
		{name: "checkpoint beyond the changelog's end", checkpoint: 50,
			stored: []movieStats{changelog[2], changelog[3], changelog[4]}, wantRestored: 0},
	}
	for _, tt := range tests {
		for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
			t.Run(tt.name+"/"+string(g), func(t *testing.T) {
				c := newCluster(t)
				cfg := unitConfig(c, g)
				topics := cfg.Topics()
				if err := c.CreateTopic(topics.Changelog, 1); err != nil {
					t.Fatal(err)
				}
				for _, d := range tt.changelog {
					clRecord(t, c, topics.Changelog, d)
				}
				if tt.deleteBefore > 0 {
					if err := c.DeleteRecords(topics.Changelog, 0, tt.deleteBefore); err != nil {
						t.Fatal(err)
					}
				}
				store := memstore.New()
				if tt.checkpoint >= 0 {
					seed(t, store, 0, tt.checkpoint, tt.stored...)
				}
				r := newRig(t, c, cfg, store).start(t)
				eventually(t, "partition running", r.ready)
				if got := r.e.Stats().ChangelogRestored; got != tt.wantRestored {
					t.Errorf("ChangelogRestored: got %d, want %d", got, tt.wantRestored)
				}
				r.checkStore(t, final)
				if tt.checkpoint <= int64(len(tt.changelog)) {
					return
				}
				// Re-seeded: the changelog holds every stored document, and the
				// checkpoint is one past the last of them.
				recs, err := c.CommittedRecords(topics.Changelog, 0)
				if err != nil {
					t.Fatal(err)
				}
				var ids []int64
				for _, rec := range recs {
					id, _ := engine.Int64Keys.Decode(rec.Key)
					ids = append(ids, id)
				}
				slices.Sort(ids)
				if want := []int64{1, 2, 3}; !slices.Equal(ids, want) {
					t.Errorf("re-seeded changelog movies: got %v, want %v", ids, want)
				}
				cp, ok, err := movieTable(t, store).Checkpoint(context.Background(), 0)
				if err != nil || !ok {
					t.Fatalf("checkpoint: %v (ok %v)", err, ok)
				}
				if len(recs) > 0 && cp != recs[len(recs)-1].Offset+1 {
					t.Errorf("checkpoint after re-seeding: got %d, want %d (one past the last re-seeded record)", cp, recs[len(recs)-1].Offset+1)
				}
			})
		}
	}
}

// TestUnitRestoreSkipsUnreadableRecords restores a changelog that holds,
// among readable records, records no decoder can read: a value of the
// wrong shape, no version header, a key that is not a movie key. Those
// are skipped and counted in ChangelogSkipped; every readable record is
// restored. (A decoder that is only unavailable is waited for instead:
// TestE2ERegistryDownDuringRestore.)
func TestUnitRestoreSkipsUnreadableRecords(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	c := newCluster(t)
	cfg := unitConfig(c, engine.ExactlyOnce)
	topics := cfg.Topics()
	if err := c.CreateTopic(topics.Changelog, 1); err != nil {
		t.Fatal(err)
	}
	version := func(v int64) header {
		return header{Key: engine.HeaderVersion, Value: []byte(strconv.FormatInt(v, 10))}
	}
	valid, _ := (&unitSerde{}).EncodeCountAndSum(context.Background(), "", avro.CountAndSum{Count: 9, Sum: 90})
	clRecord(t, c, topics.Changelog, movieStats{MovieID: 1, Count: 1, Sum: 5, Version: 0})
	unreadable := []struct {
		key, value []byte
		headers    []header
	}{
		{engine.Int64Keys.Append(nil, 1), []byte("not a count and sum"), []header{version(1)}},
		{engine.Int64Keys.Append(nil, 2), valid, nil},
		{[]byte("movie two"), valid, []header{version(3)}},
	}
	for _, r := range unreadable {
		if _, err := c.Append(topics.Changelog, 0, r.key, r.value, r.headers...); err != nil {
			t.Fatal(err)
		}
	}
	clRecord(t, c, topics.Changelog, movieStats{MovieID: 2, Count: 1, Sum: 7, Version: 4})

	r := newRig(t, c, cfg, memstore.New()).start(t)
	eventually(t, "partition running", r.ready)
	st := r.e.Stats()
	if st.ChangelogRestored != 5 || st.ChangelogSkipped != 3 {
		t.Errorf("ChangelogRestored, ChangelogSkipped = %d, %d; want 5, 3", st.ChangelogRestored, st.ChangelogSkipped)
	}
	r.checkStore(t, map[int64]movieStats{1: {Count: 1, Sum: 5}, 2: {Count: 1, Sum: 7}})
}

// TestUnitFinalFlushOnCancel processes ratings with a commit interval too
// long to flush, then cancels Run: Run returns, the store holds the
// documents and the repartition and input offsets are committed.
func TestUnitFinalFlushOnCancel(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	ratings := []rating{{1, 2}, {1, 4}, {2, 9}}
	for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
		t.Run(string(g), func(t *testing.T) {
			cfg := unitConfig(nil, g)
			cfg.CommitInterval = time.Hour
			cfg.IdleFlush = 0 // only the final flush may write
			r := newRig(t, nil, cfg, nil).start(t)
			r.rate(t, 0, ratings...)
			eventually(t, "ratings processed", func() error {
				if got := r.e.Stats().RecordsProcessed; got != int64(len(ratings)) {
					return fmt.Errorf("processed %d of %d", got, len(ratings))
				}
				return nil
			})
			if _, err := r.store.movie(context.Background(), 1); !errors.Is(err, engine.ErrNotFound) {
				t.Fatalf("store before the final flush: got %v, want ErrNotFound (nothing flushed yet)", err)
			}
			r.stop(t)
			r.checkStore(t, totals(ratings))
			recs, _ := r.c.CommittedRecords(r.topics.Repartition, 0)
			if len(recs) != len(ratings) {
				t.Fatalf("repartition records: got %d, want %d", len(recs), len(ratings))
			}
			if got, ok := r.c.CommittedOffset("unit", r.topics.Repartition, 0); !ok || got != recs[len(recs)-1].Offset+1 {
				t.Errorf("committed repartition offset: got %d (%v), want %d", got, ok, recs[len(recs)-1].Offset+1)
			}
			if got, ok := r.c.CommittedOffset("unit", r.topics.Input, 0); !ok || got != int64(len(ratings)) {
				t.Errorf("committed input offset: got %d (%v), want %d", got, ok, len(ratings))
			}
		})
	}
}

// TestUnitDeadLetters sends malformed records to the dead-letter topic,
// from the rekey stage (undecodable or out-of-range ratings) and from the
// aggregate (a bad repartition key, a key that does not match the rating),
// with a reason header, and loses none of the good ones.
func TestUnitDeadLetters(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	good := []rating{{1, 3}, {2, 4}, {1, 5}}
	for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
		t.Run(string(g), func(t *testing.T) {
			r := newRig(t, nil, unitConfig(nil, g), nil)
			r.rate(t, 0, good[0])
			if _, err := r.c.Append(r.topics.Input, 0, []byte("k"), []byte("not a rating")); err != nil {
				t.Fatal(err)
			}
			r.rate(t, 0, rating{7, 11}) // out of range
			r.rate(t, 0, good[1:]...)
			if _, err := r.c.Append(r.topics.Repartition, 0, []byte("bad"), ratingValue(8, 1)); err != nil {
				t.Fatal(err)
			}
			if _, err := r.c.Append(r.topics.Repartition, 0, engine.Int64Keys.Append(nil, 9), ratingValue(10, 1)); err != nil {
				t.Fatal(err)
			}
			r.start(t)
			eventually(t, "good ratings stored", r.storeHas(totals(good)))
			eventually(t, "dead letters committed", func() error {
				recs, err := r.c.CommittedRecords(r.topics.DLQ, 0)
				if err != nil {
					return err
				}
				if len(recs) != 4 {
					return fmt.Errorf("dead letters: got %d, want 4", len(recs))
				}
				return nil
			})
			recs, _ := r.c.CommittedRecords(r.topics.DLQ, 0)
			var from []string
			for _, rec := range recs {
				h := rec.Headers
				if h[engine.HeaderDLQReason] == "" {
					t.Errorf("dead letter at %d: no reason header (headers %v)", rec.Offset, h)
				}
				from = append(from, h[engine.HeaderDLQTopic]+"/"+h[engine.HeaderDLQOffset])
			}
			slices.Sort(from)
			want := []string{r.topics.Input + "/1", r.topics.Input + "/2", r.topics.Repartition + "/0", r.topics.Repartition + "/1"}
			if !slices.Equal(from, want) {
				t.Errorf("dead letters from: got %v, want %v", from, want)
			}
			eventually(t, "dead letters counted", func() error {
				if got := r.e.Stats().DeadLettered; got != 4 {
					return fmt.Errorf("DeadLettered: got %d, want 4", got)
				}
				return nil
			})
		})
	}
}
