package redisstore

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// writeLog remembers, per partition (its batch token key), the batch tokens
// this Store may have left in Redis under the current epoch: the last batch
// whose EXEC succeeded and the batches sent since whose outcome is unknown.
// A batch that then finds another token stored, under the same epoch, knows
// that Redis lost acknowledged writes (and the checkpoint with them; see
// the package doc), so the partition must be restored from the store's
// checkpoint again rather than written on top of the hole.
type writeLog struct {
	mu sync.Mutex
	m  map[string]*tokens // by batch token key
}

type tokens struct {
	epoch int64
	maybe []string // the confirmed token first, then those of unknown outcome
}

// maxUnknown bounds the tokens of unknown outcome kept per partition.
const maxUnknown = 16

// lost reports whether stored, the token Redis holds for b's partition,
// cannot have been written by this Store under b's epoch. The first batch
// of an epoch takes what it finds as the baseline.
func (l *writeLog) lost(b *batchTx, stored string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.m[b.tokenKey]
	if t == nil || t.epoch != b.Epoch {
		if l.m == nil {
			l.m = make(map[string]*tokens)
		}
		l.m[b.tokenKey] = &tokens{epoch: b.Epoch, maybe: []string{stored}}
		return false
	}
	return !slices.Contains(t.maybe, stored)
}

// sending records that b's EXEC is about to be sent (after lost).
func (l *writeLog) sending(b *batchTx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.m[b.tokenKey]
	if t == nil || t.epoch != b.Epoch {
		return
	}
	if len(t.maybe) > maxUnknown {
		t.maybe = append(t.maybe[:1], t.maybe[2:]...)
	}
	t.maybe = append(t.maybe, b.token)
}

// applied records that b's EXEC succeeded: its token is the one stored.
func (l *writeLog) applied(b *batchTx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.m[b.tokenKey]; t != nil && t.epoch == b.Epoch {
		t.maybe = append(t.maybe[:0], b.token)
	}
}

// forget drops what is known of the partitions whose token keys start with
// prefix (a dropped partition, a reset table).
func (l *writeLog) forget(prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.m, func(k string, _ *tokens) bool { return strings.HasPrefix(k, prefix) })
}
