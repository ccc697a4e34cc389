package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// maxApplyAttempts bounds how often a batch's optimistic transaction runs:
// again after a watched key changed under it (a new claim, a dropped
// partition), or after a transport error that left the outcome unknown.
const maxApplyAttempts = 4

// errWrongType marks a key of the store that another program gave another
// type (a plain string where the stream lives, say).
var errWrongType = errors.New("wrong key type")

// luaHex is the Lua helper that turns a raw document key into the hex of
// its hash's name.
const luaHex = `
local function hex(s)
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end
`

// tableDropScript deletes the documents, index members and checkpoint of one
// partition in one atomic step; the epoch stays so that an old owner
// remains fenced.
//
// KEYS: 1 members, 2 checkpoint, 3 batch token, 3+j the sorted set of
// index j. ARGV: 1 document key prefix, 2 partition, 3 index kinds.
// Reply: documents deleted.
var tableDropScript = redis.NewScript(luaHex + `
local kinds = ARGV[3]
local ni = #kinds
local fields = {'p'}
for j = 1, ni do fields[#fields + 1] = tostring(j - 1) end
local n = 0
for _, k in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local hk = ARGV[1] .. hex(k)
  local v = redis.call('HMGET', hk, unpack(fields))
  if v[1] == ARGV[2] then
    for j = 1, ni do
      if v[1 + j] then
        local sep = ''
        if string.sub(kinds, j, j) == 's' then sep = '\0' end
        redis.call('ZREM', KEYS[3 + j], v[1 + j] .. sep .. k)
      end
    end
    redis.call('DEL', hk)
    n = n + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return n
`)

// Apply writes b atomically in one optimistic transaction (runBatch):
// every document's hash, index members and membership, the checkpoint and
// any stream entries (WithTableStream) — or nothing. It fails with
// engine.ErrInvalid, before sending anything, for a document that fails
// Doc.Validate or is of another partition (on a cluster: by PartitionFor
// too); with engine.ErrFenced when b.Epoch is not the claimed epoch or
// (unless b.Replay) a document is not newer than the stored one; with
// engine.ErrUnavailable when Redis cannot be reached. A retried attempt
// whose reply was lost is recognised. Safe for concurrent use.
func (t *table) Apply(ctx context.Context, b engine.DocBatch) error {
	tx, err := t.batch(b)
	if err != nil {
		return err
	}
	return t.s.runBatch(ctx, tx)
}

// typedKey is a key a batch writes and the type it must have, if it exists.
type typedKey struct{ key, typ string }

// batchTx is one batch of one partition, formatted for Redis and written
// atomically by an optimistic transaction (runBatch).
type batchTx struct {
	engine.DocBatch
	t      *table
	op     string     // for errors: "table orders: apply partition 3"
	token  string     // random: recognises this batch's own earlier attempt
	hks    []string   // the hash key of each document
	fields []string   // the hash fields read: the version, then the index values
	typed  []typedKey // the keys written, checked before writing

	epochKey, cpKey, tokenKey, members string

	reads map[string]*redis.SliceCmd // the stored documents, by hash key
}

// batch validates b and formats it into a batch transaction, with a fresh
// random batch token.
func (t *table) batch(b engine.DocBatch) (*batchTx, error) {
	p := b.Partition
	tx := &batchTx{DocBatch: b, t: t, token: rand.Text(),
		op:       fmt.Sprintf("table %s: apply partition %d%s", t.spec.Name, p, t.keys.where(p)),
		hks:      make([]string, len(b.Docs)),
		fields:   append([]string{fieldVersion}, t.fields[fixedFields:]...),
		epochKey: t.keys.epoch(p), cpKey: t.keys.checkpoint(p), tokenKey: t.keys.batch(p),
		members: t.keys.members(p)}
	for i, d := range b.Docs {
		if err := d.Validate(t.spec); err != nil {
			return nil, fmt.Errorf("redisstore: apply partition %d: %w", p, err)
		}
		if d.Partition != p {
			return nil, fmt.Errorf("redisstore: table %s: apply partition %d: key %x belongs to partition %d: %w",
				t.spec.Name, p, d.Key, d.Partition, engine.ErrInvalid)
		}
		if h := t.home(d.Key); t.keys.cluster && h != p {
			return nil, fmt.Errorf("redisstore: table %s: apply partition %d: key %x hashes to partition %d of %d (PartitionFor): %w",
				t.spec.Name, p, d.Key, h, t.spec.Partitions, engine.ErrInvalid)
		}
		tx.hks[i] = t.keys.doc(p, d.Key)
	}
	tx.typed = []typedKey{{tx.cpKey, "string"}, {tx.tokenKey, "string"}, {tx.members, "set"}}
	for _, k := range t.indexKeys(p) {
		tx.typed = append(tx.typed, typedKey{k, "zset"})
	}
	if t.stream != nil {
		tx.typed = append(tx.typed, typedKey{t.streamKey(p), "stream"})
	}
	return tx, nil
}

// fenced is the refusal of a batch of partition p; it wraps engine.ErrFenced.
func fenced(p int32, format string, args ...any) error {
	reason := fmt.Sprintf(format, args...)
	return fmt.Errorf("redisstore: apply partition %d refused: %s: %w", p, reason, engine.ErrFenced)
}

// runBatch writes b or nothing. Each attempt WATCHes the partition's epoch,
// checkpoint and batch token; reads the token, the epoch, the types of the
// keys it writes and the stored documents; checks them; and then writes in
// MULTI/EXEC, with the checkpoint and the token. A claim, apply or drop of
// the partition before EXEC makes EXEC write nothing, and the next attempt
// reads again. An attempt that finds its own token applied is a retry of
// one whose reply was lost, and succeeds without writing. Another client
// changing the type of a shared key (an index, the stream) between the
// read and EXEC is not detected.
func (s *Store) runBatch(ctx context.Context, b *batchTx) error {
	var last error
	for range maxApplyAttempts {
		err := s.attempt(ctx, b)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, engine.ErrFenced), errors.Is(err, errCorrupt), errors.Is(err, errWrongType):
			return err
		case errors.Is(err, redis.TxFailedErr):
			s.log.Debug("batch raced a change of its partition; reading again", "op", b.op)
		case !transient(err) || ctx.Err() != nil:
			return wrap(b.op, err)
		}
		last = err
	}
	return wrap(b.op, last)
}

// attempt runs one optimistic transaction of b on a connection of its own.
// It returns redis.TxFailedErr when a watched key changed before EXEC,
// which then wrote nothing.
func (s *Store) attempt(ctx context.Context, b *batchTx) error {
	return s.client.Watch(ctx, func(tx *redis.Tx) error { return s.attemptOn(ctx, tx, b) },
		b.epochKey, b.cpKey, b.tokenKey)
}

func (s *Store) attemptOn(ctx context.Context, tx *redis.Tx, b *batchTx) error {
	var token, epoch *redis.StringCmd
	types := make([]*redis.StatusCmd, len(b.typed))
	b.reads = make(map[string]*redis.SliceCmd, len(b.hks))
	reads, err := tx.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		token, epoch = pipe.Get(ctx, b.tokenKey), pipe.Get(ctx, b.epochKey)
		for i, k := range b.typed {
			types[i] = pipe.Type(ctx, k.key)
		}
		for _, hk := range b.hks {
			if _, ok := b.reads[hk]; !ok {
				b.reads[hk] = pipe.HMGet(ctx, hk, b.fields...)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	// Pipelined reports only the first failed command, and an absent token
	// or epoch (redis.Nil) comes first: a document read that failed (a key
	// another program gave another type) must not pass as an empty one.
	for _, c := range reads {
		if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
			return e
		}
	}
	if token.Val() == b.token {
		s.log.Debug("batch applied by an earlier attempt", "op", b.op)
		return nil
	}
	subject := "table " + b.t.spec.Name + ": "
	if cur, err := epoch.Result(); err != nil || cur != formatInt(b.Epoch) {
		if err != nil {
			cur = "none"
		}
		s.log.Debug("batch fenced by epoch", "op", b.op, "epoch", b.Epoch, "current", cur)
		return fenced(b.Partition,
			"%sepoch %d is not the claimed epoch %s (claimed since by another writer, or Redis lost its data)",
			subject, b.Epoch, cur)
	}
	if stored := token.Val(); s.written.lost(b, stored) {
		s.log.Warn("redis lost acknowledged writes: the partition's batch token is not the last one written",
			"op", b.op, "epoch", b.Epoch)
		return fenced(b.Partition, "%sRedis lost acknowledged writes of epoch %d (its last batch is not there: a failover to a replica that lacked them, or a restart that did not persist them); restore the partition from the store's checkpoint",
			subject, b.Epoch)
	}
	for i, k := range b.typed {
		if t := types[i].Val(); t != "none" && t != k.typ {
			return fmt.Errorf("redisstore: %s: key %s holds a %s, want a %s: %w", b.op, k.key, t, k.typ, errWrongType)
		}
	}
	apply, final, err := b.check()
	if err != nil {
		return err
	}
	if s.beforeExec != nil {
		s.beforeExec()
	}
	s.written.sending(b)
	cmds, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		if len(apply) > 0 {
			b.write(ctx, pipe, apply, final)
		}
		pipe.Set(ctx, b.cpKey, formatInt(b.Checkpoint), 0)
		pipe.Set(ctx, b.tokenKey, b.token, 0)
		return nil
	})
	if err != nil {
		return queuedError(cmds, err)
	}
	s.written.applied(b)
	s.log.Debug("batch applied", "op", b.op, "checkpoint", formatInt(b.Checkpoint))
	return nil
}

// check compares the documents with the stored versions read and returns
// the ones to write: apply, in batch order, and final, the last of apply
// for each key (only the final state of a key reaches Redis, its stream
// entries excepted). A document not newer than the stored one refuses the
// batch unless it replays, which skips the document.
func (b *batchTx) check() (apply, final []int, err error) {
	t := b.t
	last := make(map[string]int, len(b.Docs)) // hash key -> last applied document
	for i, d := range b.Docs {
		hk := b.hks[i]
		j, ok := last[hk]
		prev := b.Docs[j].Version
		if v, isStr := b.reads[hk].Val()[0].(string); !ok && isStr {
			if prev, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, nil, fmt.Errorf("redisstore: %s version %q: %w", hk, v, errCorrupt)
			}
			ok = true
		}
		if ok && d.Version <= prev {
			if !b.Replay {
				t.s.log.Debug("batch fenced by version", "table", t.spec.Name, "partition", b.Partition,
					"key", fmt.Sprintf("%x", d.Key), "stored_version", prev)
				return nil, nil, fenced(b.Partition, "table %s: key %x is not newer than the stored version %d",
					t.spec.Name, d.Key, prev)
			}
			continue
		}
		apply = append(apply, i)
		last[hk] = i
	}
	t.s.log.Debug("batch checked", "table", t.spec.Name, "partition", b.Partition, "checkpoint", b.Checkpoint,
		"apply", len(apply), "skip", len(b.Docs)-len(apply))
	for _, i := range apply {
		if last[b.hks[i]] == i {
			final = append(final, i)
		}
	}
	return apply, final, nil
}

// write queues the writes of the documents check chose: every final
// document's hash, index members and membership, and a stream entry for
// each applied one.
func (b *batchTx) write(ctx context.Context, pipe redis.Pipeliner, apply, final []int) {
	t := b.t
	ni := len(t.spec.Indexes)
	gone, add := make([][]any, ni), make([][]redis.Z, ni)
	keys := make([]any, 0, len(final))
	part := formatInt(int64(b.Partition))
	for _, i := range final {
		d, hk, key := &b.Docs[i], b.hks[i], string(b.Docs[i].Key)
		h := make([]any, 0, 2*(fixedFields+ni))
		h = append(h, fieldPartition, part, fieldVersion, formatInt(d.Version))
		for j, ix := range t.spec.Indexes {
			nv := storedIndex(d.Index[j], ix.Kind)
			h = append(h, b.fields[1+j], nv)
			// A stored member that is not the final one goes, a final one
			// that was not stored comes (an unchanged value keeps its member).
			if o, had := b.reads[hk].Val()[1+j].(string); !had || o != nv {
				if had {
					gone[j] = append(gone[j], indexMember(o, ix.Kind, key))
				}
				add[j] = append(add[j], redis.Z{Member: indexMember(nv, ix.Kind, key)})
			}
		}
		var del []string
		if d.Sources != nil {
			h = append(h, fieldSources, encodeSources(d.Sources))
		} else {
			del = append(del, fieldSources)
		}
		if d.Value != nil {
			h = append(h, fieldValue, string(d.Value))
		} else {
			del = append(del, fieldValue)
		}
		pipe.HSet(ctx, hk, h...)
		if len(del) > 0 {
			pipe.HDel(ctx, hk, del...)
		}
		keys = append(keys, key)
	}
	for j, k := range t.indexKeys(b.Partition) {
		if len(gone[j]) > 0 {
			pipe.ZRem(ctx, k, gone[j]...)
		}
		if len(add[j]) > 0 {
			pipe.ZAdd(ctx, k, add[j]...)
		}
	}
	pipe.SAdd(ctx, b.members, keys...)
	if st := t.stream; st != nil {
		for _, i := range apply {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: t.streamKey(b.Partition), MaxLen: st.MaxLen, Approx: true,
				Values: st.Fields(b.Docs[i])})
		}
	}
}

// queuedError is the error of a failed MULTI/EXEC: when Redis refused to
// queue a command (out of memory, a disk it cannot persist to), EXEC only
// says EXECABORT, and the refusal that says whether to wait and retry is
// the command's own error.
func queuedError(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		if e := c.Err(); e != nil && e != err && transient(e) {
			return e
		}
	}
	return err
}

// DropPartition deletes every document, index member and the checkpoint
// of partition p in one atomic script, keeping its epoch, so the next
// owner restores it from the whole changelog. Dropping an empty partition
// is not an error. The script blocks Redis for the time it takes (about a
// second per few hundred thousand documents). Safe for concurrent use.
func (t *table) DropPartition(ctx context.Context, p int32) error {
	keys := append([]string{t.keys.members(p), t.keys.checkpoint(p), t.keys.batch(p)}, t.indexKeys(p)...)
	n, err := tableDropScript.Run(ctx, t.s.client, keys,
		t.keys.docPrefix(p), formatInt(int64(p)), t.kinds).Int64()
	t.s.written.forget(t.keys.batch(p))
	if err != nil {
		return wrap(fmt.Sprintf("table %s: drop partition %d%s", t.spec.Name, p, t.keys.where(p)), err)
	}
	t.s.log.Info("partition dropped", "table", t.spec.Name, "partition", p, "documents", n)
	return nil
}

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
	if t := l.m[b.tokenKey]; t != nil && t.epoch == b.Epoch {
		return !slices.Contains(t.maybe, stored)
	}
	if l.m == nil {
		l.m = make(map[string]*tokens)
	}
	l.m[b.tokenKey] = &tokens{epoch: b.Epoch, maybe: []string{stored}}
	return false
}

// sending records that b's EXEC is about to be sent (after lost).
func (l *writeLog) sending(b *batchTx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.m[b.tokenKey]; t != nil && t.epoch == b.Epoch {
		if len(t.maybe) > maxUnknown {
			t.maybe = slices.Delete(t.maybe, 1, 2) // the oldest unknown
		}
		t.maybe = append(t.maybe, b.token)
	}
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
