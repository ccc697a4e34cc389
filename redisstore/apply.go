package redisstore

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// applyLua applies one batch atomically. Every check runs before the first
// write, so a refused batch writes nothing (Redis does not roll back a
// script that fails half-way).
//
// KEYS: 1 epoch, 2 checkpoint, 3 batch token, 4 by-avg, 5 stream,
// 6 members of the partition, 6+i the hash of document i.
// ARGV: 1 epoch, 2 checkpoint, 3 replay "1"/"0", 4 stream max length (0: no
// stream), 5 batch token, 6 partition, then 7 values per document:
// id count sum avg version sources rank.
//
// Reply: {1, applied, skipped}; {2, 0, 0} when this very batch was applied
// already (a retry of a call whose reply was lost); {0, "epoch", current or
// "none"} when ARGV epoch is not the claimed one;
// {0, "version", movie id, stored version}.
//
// Integers (epochs, versions) are compared as decimal strings so that
// values beyond 2^53 stay exact.
const applyLua = `
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

if redis.call('GET', KEYS[3]) == ARGV[5] then return {2, 0, 0} end

local current = redis.call('GET', KEYS[1])
if not current or cmp(ARGV[1], current) ~= 0 then return {0, 'epoch', current or 'none'} end

local want = {KEYS[2], 'string', KEYS[3], 'string', KEYS[4], 'zset', KEYS[5], 'stream', KEYS[6], 'set'}
for i = 1, #want, 2 do
  local t = redis.call('TYPE', want[i])['ok']
  if t ~= 'none' and t ~= want[i+1] then
    return redis.error_reply('WRONGTYPE key ' .. want[i] .. ' holds a ' .. t .. ', want a ' .. want[i+1])
  end
end

local n = #KEYS - 6
local replay = ARGV[3] == '1'
local seen = {}
local oldRank = {}
local apply = {}
for i = 1, n do
  local key = KEYS[6 + i]
  local base = 7 + (i - 1) * 7
  local version = ARGV[base + 4]
  local prev = seen[key]
  if prev == nil then
    local cur = redis.call('HMGET', key, 'version', 'rank')
    prev, oldRank[key] = cur[1], cur[2]
  end
  if prev and cmp(version, prev) <= 0 then
    if not replay then return {0, 'version', ARGV[base], prev} end
  else
    apply[#apply + 1] = i
    seen[key] = version
  end
end

local maxlen = tonumber(ARGV[4])
for _, i in ipairs(apply) do
  local key = KEYS[6 + i]
  local base = 7 + (i - 1) * 7
  local id, count, avg, rank = ARGV[base], ARGV[base + 1], ARGV[base + 3], ARGV[base + 6]
  local old = oldRank[key]
  if old and old ~= rank then redis.call('ZREM', KEYS[4], old) end
  oldRank[key] = rank
  redis.call('HSET', key, 'id', id, 'count', count, 'sum', ARGV[base + 2], 'avg', avg,
    'partition', ARGV[6], 'version', ARGV[base + 4], 'sources', ARGV[base + 5], 'rank', rank)
  redis.call('ZADD', KEYS[4], 0, rank)
  redis.call('SADD', KEYS[6], id)
  if maxlen > 0 then
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'movieId', id, 'avg', avg, 'count', count)
  end
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[3], ARGV[5])
return {1, #apply, n - #apply}
`

var applyScript = redis.NewScript(applyLua)

// fencedError is the refusal of a batch; it wraps engine.ErrFenced.
type fencedError struct {
	partition int32
	reason    string
}

func (e *fencedError) Error() string {
	return fmt.Sprintf("redisstore: apply partition %d refused: %s: %v", e.partition, e.reason, engine.ErrFenced)
}

func (e *fencedError) Unwrap() error { return engine.ErrFenced }

// Apply writes b atomically (one Lua script): all documents, their sorted
// set entries and partition membership, one stream entry per written
// document, and the checkpoint — or nothing. It returns an error wrapping
// engine.ErrInvalid (checked before anything is sent) when a document fails
// Validate or belongs to another partition than b; engine.ErrFenced when
// b.Epoch is not the partition's claimed epoch (a newer claim, or Redis
// lost the claim with its data) or (unless b.Replay) a document
// is not newer than the stored one; engine.ErrUnavailable when Redis cannot
// be reached. A call retried by the client after a lost reply is recognised
// and not refused. Safe for concurrent use.
func (s *Store) Apply(ctx context.Context, b engine.Batch) error {
	keys, args, err := s.batchArgs(b)
	if err != nil {
		return err
	}
	return s.runApply(ctx, b, keys, args)
}

// batchArgs validates b and builds the KEYS and ARGV of applyLua, with a
// fresh random batch token.
func (s *Store) batchArgs(b engine.Batch) ([]string, []any, error) {
	keys := make([]string, 6, 6+len(b.Docs))
	keys[0], keys[1], keys[2] = s.keys.epoch(b.Partition), s.keys.checkpoint(b.Partition), s.keys.batch(b.Partition)
	keys[3], keys[4], keys[5] = s.keys.byAvg(), s.keys.stream(), s.keys.members(b.Partition)
	replay := "0"
	if b.Replay {
		replay = "1"
	}
	args := make([]any, 6, 6+7*len(b.Docs))
	args[0], args[1], args[2] = formatInt(b.Epoch), formatInt(b.Checkpoint), replay
	args[3], args[4], args[5] = formatInt(max(s.opts.streamMax, 0)), rand.Text(), formatInt(int64(b.Partition))
	for _, d := range b.Docs {
		if err := d.Validate(); err != nil {
			return nil, nil, fmt.Errorf("redisstore: apply partition %d: %w", b.Partition, err)
		}
		if d.Partition != b.Partition {
			return nil, nil, fmt.Errorf("redisstore: apply partition %d: movie %d belongs to partition %d: %w",
				b.Partition, d.MovieID, d.Partition, engine.ErrInvalid)
		}
		avg := d.Avg()
		keys = append(keys, s.keys.movie(d.MovieID))
		args = append(args, formatInt(d.MovieID), formatInt(d.Count), formatFloat(d.Sum), formatFloat(avg),
			formatInt(d.Version), encodeSources(d.Sources), rank(avg, d.MovieID))
	}
	return keys, args, nil
}

// runApply runs applyLua (EVALSHA, falling back to EVAL after a Redis
// restart flushed the script cache) and decodes its reply.
func (s *Store) runApply(ctx context.Context, b engine.Batch, keys []string, args []any) error {
	reply, err := applyScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return wrap(fmt.Sprintf("apply partition %d", b.Partition), err)
	}
	status, _ := reply[0].(int64)
	switch {
	case status == 0 && len(reply) == 3 && reply[1] == "epoch":
		s.log.Debug("batch fenced by epoch", "partition", b.Partition, "epoch", b.Epoch, "current", reply[2])
		return &fencedError{partition: b.Partition,
			reason: fmt.Sprintf("epoch %d is not the claimed epoch %v (claimed since by another writer, or Redis lost its data)", b.Epoch, reply[2])}
	case status == 0 && len(reply) == 4 && reply[1] == "version":
		s.log.Debug("batch fenced by version", "partition", b.Partition, "movie", reply[2], "stored_version", reply[3])
		return &fencedError{partition: b.Partition,
			reason: fmt.Sprintf("movie %v is not newer than the stored version %v", reply[2], reply[3])}
	case (status == 1 || status == 2) && len(reply) == 3:
		applied, _ := reply[1].(int64)
		skipped, _ := reply[2].(int64)
		s.log.Debug("batch applied", "partition", b.Partition, "checkpoint", b.Checkpoint,
			"applied", applied, "skipped", skipped, "retried", status == 2)
		return nil
	}
	return fmt.Errorf("redisstore: apply partition %d: unexpected script reply %v", b.Partition, reply)
}
