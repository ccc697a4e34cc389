package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// luaHex is the Lua helper that turns a raw document key into the hex of
// its hash's name.
const luaHex = `
local function hex(s)
  return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end))
end
`

// tableDropLua deletes the documents, index members and checkpoint of one
// partition in one atomic step; the epoch stays so that an old owner
// remains fenced.
//
// KEYS: 1 members, 2 checkpoint, 3 batch token, 3+j the sorted set of
// index j. ARGV: 1 document key prefix, 2 partition, 3 index kinds.
// Reply: documents deleted.
const tableDropLua = luaHex + `
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
`

var tableDropScript = redis.NewScript(tableDropLua)

// Apply writes b atomically, in one optimistic transaction (runBatch):
// every document's hash, its index members and partition membership, the
// checkpoint and, when the table has a stream (WithTableStream), one
// stream entry per written document — or nothing. It returns an error
// wrapping engine.ErrInvalid (checked before anything is sent) when a
// document fails Doc.Validate or belongs to another partition than b (on
// a cluster: or its key's PartitionFor is another partition);
// engine.ErrFenced when b.Epoch is not the partition's claimed epoch (a
// newer claim, or Redis lost the claim with its data) or (unless b.Replay)
// a document is not newer than the stored one; engine.ErrUnavailable when
// Redis cannot be reached. An attempt whose reply was lost is recognised
// and not refused. Safe for concurrent use.
func (t *table) Apply(ctx context.Context, b engine.DocBatch) error {
	tx, err := t.batch(b)
	if err != nil {
		return err
	}
	return t.s.runBatch(ctx, tx)
}

// tableWrite is one document of a batch, formatted for Redis.
type tableWrite struct {
	hk, key, version, sources, value string
	hasSources, hasValue             bool
	index                            []string // storedIndex of each index value
	v                                int64
}

// batch validates b and formats it into a batch transaction, with a fresh
// random batch token.
func (t *table) batch(b engine.DocBatch) (*batchTx, error) {
	p := b.Partition
	docs := make([]tableWrite, len(b.Docs))
	ni := len(t.spec.Indexes)
	index := make([]string, len(b.Docs)*ni) // one block for every document's index values
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
		w := tableWrite{hk: t.keys.doc(p, d.Key), key: string(d.Key), version: formatInt(d.Version), v: d.Version,
			sources: encodeSources(d.Sources), value: string(d.Value), hasSources: d.Sources != nil, hasValue: d.Value != nil,
			index: index[i*ni : (i+1)*ni : (i+1)*ni]}
		for j, ix := range t.spec.Indexes {
			w.index[j] = storedIndex(d.Index[j], ix.Kind)
		}
		docs[i] = w
	}
	members, idx := t.keys.members(p), t.indexKeys(p)
	tx := newBatchTx(fmt.Sprintf("table %s: apply partition %d%s", t.spec.Name, p, t.keys.where(p)), "table "+t.spec.Name+": ",
		p, b.Epoch, b.Checkpoint, t.keys.epoch(p), t.keys.checkpoint(p), t.keys.batch(p))
	tx.typed = append(tx.typed, typedKey{members, "set"})
	for _, k := range idx {
		tx.typed = append(tx.typed, typedKey{k, "zset"})
	}
	if t.stream != nil {
		tx.typed = append(tx.typed, typedKey{t.streamKey(p), "stream"})
	}
	fields := make([]string, 0, 1+ni)
	fields = append(fields, fieldVersion)
	for j := range ni {
		fields = append(fields, strconv.Itoa(j))
	}
	sep := make([]string, ni)
	for j, ix := range t.spec.Indexes {
		if ix.Kind != engine.IndexNumber {
			sep[j] = "\x00"
		}
	}

	var reads map[string]*redis.SliceCmd
	tx.read = func(ctx context.Context, pipe redis.Pipeliner) {
		reads = make(map[string]*redis.SliceCmd, len(docs))
		for _, d := range docs {
			if _, ok := reads[d.hk]; !ok {
				reads[d.hk] = pipe.HMGet(ctx, d.hk, fields...)
			}
		}
	}
	tx.plan = func() (func(context.Context, redis.Pipeliner), error) {
		// Check every document before the first write. A key written
		// twice is written once, with its last document: only the final
		// state of a key reaches Redis (its stream entries excepted).
		apply := make([]int, 0, len(docs))
		last := make(map[string]int, len(docs)) // hash key -> last applied document
		for i, d := range docs {
			var prev int64
			var ok bool
			var err error
			if j, seen := last[d.hk]; seen {
				prev, ok = docs[j].v, true
			} else if prev, ok, err = storedVersion(reads[d.hk].Val()[0], d.hk); err != nil {
				return nil, err
			}
			if ok && d.v <= prev {
				if !b.Replay {
					t.s.log.Debug("batch fenced by version", "table", t.spec.Name, "partition", p,
						"key", fmt.Sprintf("%x", d.key), "stored_version", prev)
					return nil, &fencedError{partition: p, reason: fmt.Sprintf(
						"table %s: key %x is not newer than the stored version %d", t.spec.Name, d.key, prev)}
				}
				continue
			}
			apply = append(apply, i)
			last[d.hk] = i
		}
		t.s.log.Debug("batch checked", "table", t.spec.Name, "partition", p, "checkpoint", b.Checkpoint,
			"apply", len(apply), "skip", len(docs)-len(apply))
		part := formatInt(int64(p))
		return func(ctx context.Context, pipe redis.Pipeliner) {
			if len(apply) == 0 {
				return
			}
			// The index members: a stored member that is not the final one
			// goes, a final one that was not stored comes (an unchanged
			// value keeps its member).
			for j := range ni {
				var gone []any
				var add []redis.Z
				for _, i := range apply {
					d := &docs[i]
					if last[d.hk] != i {
						continue
					}
					o, had := reads[d.hk].Val()[1+j].(string)
					if had && o == d.index[j] {
						continue
					}
					if had {
						gone = append(gone, o+sep[j]+d.key)
					}
					add = append(add, redis.Z{Member: d.index[j] + sep[j] + d.key})
				}
				if len(gone) > 0 {
					pipe.ZRem(ctx, idx[j], gone...)
				}
				if len(add) > 0 {
					pipe.ZAdd(ctx, idx[j], add...)
				}
			}
			keys := make([]any, 0, len(last))
			for _, i := range apply {
				d := &docs[i]
				if last[d.hk] != i {
					continue
				}
				h := make([]any, 0, 2*(fixedFields+ni))
				h = append(h, fieldPartition, part, fieldVersion, d.version)
				for j, nv := range d.index {
					h = append(h, fields[1+j], nv)
				}
				var gone []string
				if d.hasSources {
					h = append(h, fieldSources, d.sources)
				} else {
					gone = append(gone, fieldSources)
				}
				if d.hasValue {
					h = append(h, fieldValue, d.value)
				} else {
					gone = append(gone, fieldValue)
				}
				pipe.HSet(ctx, d.hk, h...)
				if len(gone) > 0 {
					pipe.HDel(ctx, d.hk, gone...)
				}
				keys = append(keys, d.key)
			}
			pipe.SAdd(ctx, members, keys...)
			if st := t.stream; st != nil {
				for _, i := range apply {
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: t.streamKey(p), MaxLen: st.MaxLen, Approx: true,
						Values: st.Fields(b.Docs[i])})
				}
			}
		}, nil
	}
	return tx, nil
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
