package docstore

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// removalLog is what a write cache (tableCache) tells a Load about the
// entries that left it: how many times entries left (count, read before
// the Load's snapshot without the lock) and which keys the last
// maxRemovalLog removals took out, so that a Load may teach the cache what
// it read of keys not removed since (tableCaches.learn). Guarded by
// Store.wmu, but for count.
type removalLog[K cmp.Ordered] struct {
	n   atomic.Uint64
	log []removal[K]
}

// removal is one time entries left a cache: the keys it removed (sorted),
// or all of them.
type removal[K cmp.Ordered] struct {
	seq  uint64 // the count it made
	keys []K
	all  bool
}

// maxRemovalLog is how many removals a removalLog remembers: a Load whose
// snapshot is older than all of them learns nothing. Loads last
// milliseconds and a full cache evicts an eighth of itself at a time, so
// a few suffice.
const maxRemovalLog = 8

// count is the number of removals so far; safe without wmu.
func (l *removalLog[K]) count() uint64 { return l.n.Load() }

// removed logs a removal of keys, sorting them in place.
func (l *removalLog[K]) removed(keys []K) {
	slices.Sort(keys)
	l.add(removal[K]{keys: keys})
}

// removedAll logs a removal of every entry.
func (l *removalLog[K]) removedAll() { l.add(removal[K]{all: true}) }

func (l *removalLog[K]) add(r removal[K]) {
	r.seq = l.n.Add(1)
	if len(l.log) == maxRemovalLog {
		l.log[0] = removal[K]{} // release its keys
		l.log = l.log[1:]
	}
	l.log = append(l.log, r)
}

// removedSet is the removals made since a Load's snapshot.
type removedSet[K cmp.Ordered] []removal[K]

// since returns the removals made since count was before, or false when
// the log no longer reaches back that far or one of them removed all.
func (l *removalLog[K]) since(before uint64) (removedSet[K], bool) {
	now := l.n.Load()
	if now == before {
		return nil, true
	}
	i := len(l.log) - int(now-before)
	if i < 0 || l.log[i].seq != before+1 {
		return nil, false
	}
	since := l.log[i:]
	for _, r := range since {
		if r.all {
			return nil, false
		}
	}
	return removedSet[K](since), true
}

// has reports whether one of the removals removed key.
func (rs removedSet[K]) has(key K) bool {
	for _, r := range rs {
		if _, found := slices.BinarySearch(r.keys, key); found {
			return true
		}
	}
	return false
}
