package redisstore

import (
	"context"
	"crypto/rand"
	"fmt"

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

// tableApplyLua applies one DocBatch atomically. Every check runs before
// the first write, so a refused batch writes nothing.
//
// KEYS: 1 epoch, 2 checkpoint, 3 batch token, 4 members of the partition,
// 4+j the sorted set of index j (1..ni), then the hash of each document.
// ARGV: 1 epoch, 2 checkpoint, 3 replay "1"/"0", 4 batch token,
// 5 partition, 6 index kinds ("n" or "s" per index), then 5+ni values per
// document: key, version, flags ("<has sources><has value>", "0"/"1"),
// sources, value, the ni index fields (storedIndex).
//
// Reply: {1, applied, skipped}; {2, 0, 0} when this very batch was applied
// already (a retry of a call whose reply was lost); {0, "epoch", current or
// "none"}; {0, "version", key, stored version}.
const tableApplyLua = `
local function cmp(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then if na then return -1 else return 1 end end
  local r
  if a == b then return 0
  elseif #a ~= #b then if #a < #b then r = -1 else r = 1 end
  elseif a < b then r = -1 else r = 1 end
  if na then r = -r end
  return r
end

if redis.call('GET', KEYS[3]) == ARGV[4] then return {2, 0, 0} end

local current = redis.call('GET', KEYS[1])
if not current or current ~= ARGV[1] then return {0, 'epoch', current or 'none'} end

local kinds = ARGV[6]
local ni = #kinds
local want = {KEYS[2], 'string', KEYS[3], 'string', KEYS[4], 'set'}
for j = 1, ni do want[#want + 1] = KEYS[4 + j]; want[#want + 1] = 'zset' end
for i = 1, #want, 2 do
  local t = redis.call('TYPE', want[i])['ok']
  if t ~= 'none' and t ~= want[i + 1] then
    return redis.error_reply('WRONGTYPE key ' .. want[i] .. ' holds a ' .. t .. ', want a ' .. want[i + 1])
  end
end
local sep = {}
for j = 1, ni do
  if string.sub(kinds, j, j) == 's' then sep[j] = '\0' else sep[j] = '' end
end

local first = 5 + ni
local n = #KEYS - first + 1
local stride = 5 + ni
local replay = ARGV[3] == '1'
local fields = {'v'}
for j = 1, ni do fields[#fields + 1] = tostring(j - 1) end
local seen, old, apply = {}, {}, {}
for i = 1, n do
  local hk = KEYS[first + i - 1]
  local base = 7 + (i - 1) * stride
  local version = ARGV[base + 1]
  local prev = seen[hk]
  if prev == nil then
    local cur = redis.call('HMGET', hk, unpack(fields))
    prev = cur[1]
    local o = {}
    for j = 1, ni do o[j] = cur[1 + j] end
    old[hk] = o
  end
  if prev and cmp(version, prev) <= 0 then
    if not replay then return {0, 'version', ARGV[base], prev} end
  else
    apply[#apply + 1] = i
    seen[hk] = version
  end
end

for _, i in ipairs(apply) do
  local hk = KEYS[first + i - 1]
  local base = 7 + (i - 1) * stride
  local key, flags = ARGV[base], ARGV[base + 2]
  local o = old[hk]
  local h = {'p', ARGV[5], 'v', ARGV[base + 1]}
  for j = 1, ni do
    local nv = ARGV[base + 4 + j]
    if o[j] ~= nv then -- an unchanged value keeps its member
      if o[j] then redis.call('ZREM', KEYS[4 + j], o[j] .. sep[j] .. key) end
      redis.call('ZADD', KEYS[4 + j], 0, nv .. sep[j] .. key)
    end
    o[j] = nv
    h[#h + 1] = tostring(j - 1)
    h[#h + 1] = nv
  end
  local gone = {}
  if string.sub(flags, 1, 1) == '1' then
    h[#h + 1] = 's'; h[#h + 1] = ARGV[base + 3]
  else
    gone[#gone + 1] = 's'
  end
  if string.sub(flags, 2, 2) == '1' then
    h[#h + 1] = 'd'; h[#h + 1] = ARGV[base + 4]
  else
    gone[#gone + 1] = 'd'
  end
  redis.call('HSET', hk, unpack(h))
  if #gone > 0 then redis.call('HDEL', hk, unpack(gone)) end
  redis.call('SADD', KEYS[4], key)
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], ARGV[4])
return {1, #apply, n - #apply}
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

var (
	tableApplyScript = redis.NewScript(tableApplyLua)
	tableDropScript  = redis.NewScript(tableDropLua)
)

// Apply writes b atomically (one Lua script): every document's hash, its
// index members and partition membership, and the checkpoint — or
// nothing. It returns an error wrapping engine.ErrInvalid (checked before
// anything is sent) when a document fails Doc.Validate or belongs to
// another partition than b; engine.ErrFenced when b.Epoch is not the
// partition's claimed epoch (a newer claim, or Redis lost the claim with
// its data) or (unless b.Replay) a document is not newer than the stored
// one; engine.ErrUnavailable when Redis cannot be reached. A call retried
// after a lost reply is recognised and not refused. Safe for concurrent
// use.
func (t *table) Apply(ctx context.Context, b engine.DocBatch) error {
	keys, args, err := t.batchArgs(b)
	if err != nil {
		return err
	}
	reply, err := tableApplyScript.Run(ctx, t.s.client, keys, args...).Slice()
	if err != nil {
		return wrap(fmt.Sprintf("table %s: apply partition %d", t.spec.Name, b.Partition), err)
	}
	status, _ := reply[0].(int64)
	switch {
	case status == 0 && len(reply) == 3 && reply[1] == "epoch":
		t.s.log.Debug("batch fenced by epoch", "table", t.spec.Name, "partition", b.Partition, "epoch", b.Epoch, "current", reply[2])
		return &fencedError{partition: b.Partition, reason: fmt.Sprintf(
			"table %s: epoch %d is not the claimed epoch %v (claimed since by another writer, or Redis lost its data)",
			t.spec.Name, b.Epoch, reply[2])}
	case status == 0 && len(reply) == 4 && reply[1] == "version":
		key, _ := reply[2].(string)
		t.s.log.Debug("batch fenced by version", "table", t.spec.Name, "partition", b.Partition, "key", fmt.Sprintf("%x", key), "stored_version", reply[3])
		return &fencedError{partition: b.Partition, reason: fmt.Sprintf(
			"table %s: key %x is not newer than the stored version %v", t.spec.Name, key, reply[3])}
	case (status == 1 || status == 2) && len(reply) == 3:
		applied, _ := reply[1].(int64)
		skipped, _ := reply[2].(int64)
		t.s.log.Debug("batch applied", "table", t.spec.Name, "partition", b.Partition, "checkpoint", b.Checkpoint,
			"applied", applied, "skipped", skipped, "retried", status == 2)
		return nil
	}
	return fmt.Errorf("redisstore: table %s: apply partition %d: unexpected script reply %v", t.spec.Name, b.Partition, reply)
}

// batchArgs validates b and builds the KEYS and ARGV of tableApplyLua, with
// a fresh random batch token.
func (t *table) batchArgs(b engine.DocBatch) ([]string, []any, error) {
	ni := len(t.spec.Indexes)
	keys := make([]string, 0, 4+ni+len(b.Docs))
	keys = append(keys, t.keys.epoch(b.Partition), t.keys.checkpoint(b.Partition), t.keys.batch(b.Partition),
		t.keys.members(b.Partition))
	keys = append(keys, t.idx...)
	replay := "0"
	if b.Replay {
		replay = "1"
	}
	args := make([]any, 0, 6+(5+ni)*len(b.Docs))
	args = append(args, formatInt(b.Epoch), formatInt(b.Checkpoint), replay, rand.Text(),
		formatInt(int64(b.Partition)), t.kinds)
	for _, d := range b.Docs {
		if err := d.Validate(t.spec); err != nil {
			return nil, nil, fmt.Errorf("redisstore: apply partition %d: %w", b.Partition, err)
		}
		if d.Partition != b.Partition {
			return nil, nil, fmt.Errorf("redisstore: table %s: apply partition %d: key %x belongs to partition %d: %w",
				t.spec.Name, b.Partition, d.Key, d.Partition, engine.ErrInvalid)
		}
		flags := []byte("00")
		if d.Sources != nil {
			flags[0] = '1'
		}
		if d.Value != nil {
			flags[1] = '1'
		}
		keys = append(keys, t.keys.doc(d.Key))
		args = append(args, string(d.Key), formatInt(d.Version), string(flags), encodeSources(d.Sources), string(d.Value))
		for i, ix := range t.spec.Indexes {
			args = append(args, storedIndex(d.Index[i], ix.Kind))
		}
	}
	return keys, args, nil
}

// DropPartition deletes every document, index member and the checkpoint
// of partition p in one atomic script, keeping its epoch, so the next
// owner restores it from the whole changelog. Dropping an empty partition
// is not an error. The script blocks Redis for the time it takes (about a
// second per few hundred thousand documents). Safe for concurrent use.
func (t *table) DropPartition(ctx context.Context, p int32) error {
	keys := append([]string{t.keys.members(p), t.keys.checkpoint(p), t.keys.batch(p)}, t.idx...)
	n, err := tableDropScript.Run(ctx, t.s.client, keys,
		t.keys.docPrefix(), formatInt(int64(p)), t.kinds).Int64()
	if err != nil {
		return wrap(fmt.Sprintf("table %s: drop partition %d", t.spec.Name, p), err)
	}
	t.s.log.Info("partition dropped", "table", t.spec.Name, "partition", p, "documents", n)
	return nil
}
