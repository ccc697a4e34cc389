package docstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/keepstate/keepstate/engine"
)

// tableIngestJob is one table's bulk-load buffer being written out in the
// background as ingested files (see tableBulk and kvIngester).
type tableIngestJob struct {
	t           *table
	docs        []engine.Doc // one per key
	checkpoints map[int32]int64
	olds        map[string]tablePrior // entries of the keys earlier buffers wrote
	done        chan struct{}
	// Set by the job before done is closed:
	written []cached
	fresh   int
	err     error
}

// startTableIngest hands tc's buffer to a background ingestion (none may
// be in flight). While it runs, tc's entries are only read: every path
// that changes them awaits the job first, under wmu, and Loads do not
// learn (the cache is pinned). The caller holds wmu.
func (s *Store) startTableIngest(tc *tableCache) error {
	if err := s.guard.check(); err != nil {
		return err
	}
	bulk := &tc.bulk
	job := &tableIngestJob{t: bulk.t, docs: bulk.docs, checkpoints: bulk.checkpoints,
		olds: map[string]tablePrior{}, done: make(chan struct{})}
	var unknown [][]byte
	for _, d := range job.docs {
		if p, ok := tc.m.get(string(d.Key)); ok && p.exists {
			job.olds[string(d.Key)] = p
		} else if bulk.overflow && bulk.seen.mayContain(d.Key) {
			unknown = append(unknown, d.Key)
		}
	}
	if len(unknown) > 0 {
		if err := job.readOlds(s, unknown); err != nil {
			return err
		}
	}
	bulk.docs, bulk.at, bulk.checkpoints = nil, nil, nil
	bulk.job = job
	tc.begin() // ended by awaitTableIngest
	go func() {
		defer close(job.done)
		job.err = s.runTableIngest(job)
	}()
	return nil
}

// readOlds reads into olds the stored documents of keys the overflowed
// cache may not hold (the committed state holds every earlier buffer).
// The caller holds wmu.
func (job *tableIngestJob) readOlds(s *Store, keys [][]byte) error {
	keys = sortedKeys(keys)
	snap := s.kv.snapshot()
	defer snap.release()
	return job.t.readPriors(snap, keys, func(i int, p tablePrior) { job.olds[string(keys[i])] = p })
}

// runTableIngest writes job's documents and checkpoints out as ingested
// files.
func (s *Store) runTableIngest(job *tableIngestJob) error {
	start := time.Now()
	snap := s.kv.snapshot()
	meta, err := snap.get(job.t.l.collKey)
	if err == nil {
		meta = slices.Clone(meta)
	}
	snap.release()
	if err != nil {
		return err
	}
	runs, err := job.entries(meta)
	if err != nil {
		return err
	}
	if err := s.kv.(kvIngester).ingest(runs); err != nil {
		return fmt.Errorf("ingest table %s bulk load (%d docs): %w", job.t.spec.Name, len(job.docs), err)
	}
	s.counts.ingests.Add(1)
	s.log.Info("docstore table bulk load written", "table", job.t.spec.Name, "docs", len(job.docs), "fresh", job.fresh,
		"partitions", len(job.checkpoints), "took", time.Since(start))
	return nil
}

// awaitTableIngest waits for tc's ingestion in flight, if any, and records
// what it wrote in the write cache; if it failed, its documents and
// checkpoints go back under the newer buffer and its error is returned.
// The caller holds wmu.
func (s *Store) awaitTableIngest(tc *tableCache) error {
	job := tc.bulk.job
	if job == nil {
		return nil
	}
	<-job.done
	tc.bulk.job = nil
	defer tc.end() // begun by startTableIngest
	if job.err != nil {
		bulk := &tc.bulk
		if bulk.checkpoints == nil {
			bulk.checkpoints = map[int32]int64{}
		}
		newer := bulk.docs
		bulk.docs, bulk.at = nil, nil
		bulk.add(job.docs)
		bulk.add(newer)
		for p, cp := range job.checkpoints {
			if _, ok := bulk.checkpoints[p]; !ok {
				bulk.checkpoints[p] = cp
			}
		}
		tc.buffered.Store(true)
		return job.err
	}
	for _, w := range job.written {
		tc.bulk.seen.add([]byte(w.key))
	}
	s.tcache.putAll(tc, job.written, s.cacheMax)
	return nil
}

// entries turns the job's buffer into the runs of its ingestion (one per
// key family) in key order, no key twice, and sets written and fresh. A
// document not newer than what an earlier buffer wrote is skipped. Keys
// and values are cut from a few large buffers (arena): a million small
// allocations cost the garbage collector more than the writer's copies.
func (job *tableIngestJob) entries(meta []byte) ([][]kvEntry, error) {
	t := job.t
	l, spec := t.l, t.spec
	order := byKey(job.docs) // key order is document key order (hex _ids)
	n := len(order)
	docs := make([]kvEntry, 0, n)
	index := make([]kvEntry, 0, n*len(spec.Indexes))
	members := make([]kvEntry, 0, n)
	job.written = make([]cached, 0, n)
	enc := newTableEncoder()
	var arena []byte
	cut := func(start int) []byte { return arena[start:len(arena):len(arena)] }
	var vals []byte // index values of the document at hand
	for _, i := range order {
		d := job.docs[i]
		k := string(d.Key)
		old, exists := job.olds[k]
		if exists && d.Version <= old.version {
			continue
		}
		if cap(arena)-len(arena) < 4096+len(d.Key)*8 {
			arena = make([]byte, 0, max(1<<20, len(d.Key)*16))
		}
		olds := old.indexData()
		vals = vals[:0]
		for pos, ix := range spec.Indexes {
			start := len(vals)
			vals = appendIndexValue(vals, d.Index[pos], ix.Kind)
			v := vals[start:]
			if exists {
				var o []byte
				o, olds = nextIndexValue(olds, ix.Kind)
				if bytes.Equal(o, v) {
					continue // the entry is there already
				}
				start := len(arena)
				arena = l.rawIndexEntry(arena, pos, o, d.Key)
				index = append(index, kvEntry{key: cut(start), del: true})
			}
			start = len(arena)
			arena = l.rawIndexEntry(arena, pos, v, d.Key)
			index = append(index, kvEntry{key: cut(start), value: []byte{}})
		}
		member := func(p int32, del bool) {
			start := len(arena)
			arena = append(binary.BigEndian.AppendUint32(append(append(arena, l.prefix...), tabMembers), uint32(p)), d.Key...)
			e := kvEntry{key: cut(start), del: del}
			if !del {
				e.value = memberMark
			}
			members = append(members, e)
		}
		switch {
		case !exists:
			job.fresh++
			member(d.Partition, false)
		case old.part != d.Partition:
			member(old.part, true)
			member(d.Partition, false)
		}
		data := enc.encode(spec, d)
		start := len(arena)
		arena = l.docKey(arena, d.Key)
		key := cut(start)
		if cap(arena)-len(arena) < len(data) {
			arena = make([]byte, 0, max(1<<20, len(data)))
		}
		start = len(arena)
		arena = append(arena, data...)
		docs = append(docs, kvEntry{key: key, value: cut(start)})
		job.written = append(job.written, cached{k, docPrior(spec, d)})
	}
	sortEntries(index, len(l.prefix)+1)
	sortEntries(members, len(l.prefix)+1)
	var small []kvEntry
	for _, p := range slices.Sorted(maps.Keys(job.checkpoints)) {
		small = append(small, kvEntry{key: l.partKey(tabCheckpoint, p), value: int64Value(job.checkpoints[p])})
	}
	runs := [][]kvEntry{small, members, index, docs}
	if job.fresh > 0 {
		sized, err := withSize(meta, func(n int) int { return n + job.fresh })
		if err != nil {
			return nil, err
		}
		runs = append(runs, []kvEntry{{key: slices.Clone(l.collKey), value: sized}})
	}
	return orderRuns(runs)
}

// byKey returns the positions in docs in key order.
func byKey(docs []engine.Doc) []int32 {
	return keyOrder(len(docs), 0, func(i int32) []byte { return docs[i].Key })
}

// head8 returns the first 8 bytes of b as a big-endian number, zero-padded.
func head8(b []byte) uint64 {
	var buf [8]byte
	copy(buf[:], b)
	return binary.BigEndian.Uint64(buf[:])
}

// sortEntries sorts entries by key.
func sortEntries(entries []kvEntry, skip int) {
	sorted := make([]kvEntry, len(entries))
	for j, i := range keyOrder(len(entries), skip, func(i int32) []byte { return entries[i].key }) {
		sorted[j] = entries[i]
	}
	copy(entries, sorted)
}

// keyOrder returns the positions 0..n-1 sorted by key(i). The keys share
// their first skip bytes (a key family's prefix), so most comparisons are
// decided by the next 16, compared as two numbers: it sorts small items.
func keyOrder(n, skip int, key func(i int32) []byte) []int32 {
	type item struct {
		h1, h2 uint64
		i      int32
	}
	items := make([]item, n)
	for i := range items {
		k := key(int32(i))
		rest := k[min(skip, len(k)):]
		items[i] = item{h1: head8(rest), h2: head8(rest[min(8, len(rest)):]), i: int32(i)}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Or(cmp.Compare(a.h1, b.h1), cmp.Compare(a.h2, b.h2)); c != 0 {
			return c
		}
		return bytes.Compare(key(a.i), key(b.i))
	})
	out := make([]int32, n)
	for j, it := range items {
		out[j] = it.i
	}
	return out
}

// orderRuns drops the empty runs and orders the others by their first
// keys; it fails when one overlaps the next (each must be a key range of
// its own).
func orderRuns(runs [][]kvEntry) ([][]kvEntry, error) {
	runs = slices.DeleteFunc(runs, func(r []kvEntry) bool { return len(r) == 0 })
	slices.SortFunc(runs, func(a, b []kvEntry) int { return bytes.Compare(a[0].key, b[0].key) })
	for i := 1; i < len(runs); i++ {
		if prev := runs[i-1]; bytes.Compare(prev[len(prev)-1].key, runs[i][0].key) >= 0 {
			return nil, fmt.Errorf("bulk load: key runs overlap at %q", runs[i][0].key)
		}
	}
	return runs, nil
}
