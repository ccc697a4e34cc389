package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
)

// luaReadDocs reads the documents of index members and returns, for each,
// its key then the values of the hash fields ARGV[8..], flattened. kind is
// "n" (members are 8 bytes then the key) or "s" (value, 0x00, key).
const luaReadDocs = luaHex + `
local function readDocs(members, kind, prefix)
  local fields = {}
  for i = 8, #ARGV do fields[#fields + 1] = ARGV[i] end
  local out = {}
  for _, m in ipairs(members) do
    local key
    if kind == 'n' then
      key = string.sub(m, 9)
    else
      key = string.sub(m, string.find(m, '\0', 1, true) + 1)
    end
    local v = redis.call('HMGET', prefix .. hex(key), unpack(fields))
    if v[1] then
      out[#out + 1] = key
      for j = 1, #fields do out[#out + 1] = v[j] end
    end
  end
  return out
end
`

// tableQueryScript reads one page of an index and the documents it names in
// one atomic step, so a page never mixes two batches.
//
// KEYS: 1 the index's sorted set. ARGV: 1 start, 2 stop (ZRANGE BYLEX
// bounds, already swapped for REV), 3 limit, 4 document key prefix, 5 the
// index's kind "n"/"s", 6 "1" for REV, 7 unused, 8.. the hash fields.
var tableQueryScript = redis.NewScript(luaReadDocs + `
local args = {'ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'BYLEX'}
if ARGV[6] == '1' then args[#args + 1] = 'REV' end
args[#args + 1] = 'LIMIT'
args[#args + 1] = 0
args[#args + 1] = ARGV[3]
return readDocs(redis.call(unpack(args)), ARGV[5], ARGV[4])
`)

// tableTiesScript is tableQueryScript for a descending query of a TiesAscending
// table: values descending, equal values by key ascending. It walks value
// groups from the top: a REV range of one member finds the next lower
// value, a forward range reads that value's members in key order. Every
// group yields at least one member, so a page costs at most 2*limit
// ranges however many documents tie.
//
// ARGV: 1 lower bound, 2 upper bound (of the whole query), 3 limit,
// 4 document key prefix, 5 kind, 6 and 7 the range of the rest of the
// cursor's own value group ("" when none), 8.. the hash fields.
var tableTiesScript = redis.NewScript(luaReadDocs + `
local limit = tonumber(ARGV[3])
local members = {}
local function take(start, stop)
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], start, stop, 'BYLEX', 'LIMIT', 0, limit - #members)) do
    members[#members + 1] = m
  end
end
local function succ(p)
  local b = {string.byte(p, 1, -1)}
  local i = #b
  while i > 0 and b[i] == 255 do b[i] = 0; i = i - 1 end
  b[i] = b[i] + 1
  return string.char(unpack(b))
end
if ARGV[6] ~= '' then take(ARGV[6], ARGV[7]) end
local top = ARGV[2]
while #members < limit do
  local m = redis.call('ZRANGE', KEYS[1], top, ARGV[1], 'BYLEX', 'REV', 'LIMIT', 0, 1)[1]
  if not m then break end
  local group, stop
  if ARGV[5] == 'n' then
    group = string.sub(m, 1, 8)
    stop = succ(group)
  else
    local i = string.find(m, '\0', 1, true)
    group = string.sub(m, 1, i)
    stop = string.sub(m, 1, i - 1) .. '\1'
  end
  take('[' .. group, '(' .. stop)
  top = '(' .. group
end
return readDocs(members, ARGV[5], ARGV[4])
`)

// Query answers q from the index's sorted set: one ZRANGE BYLEX (REV when
// descending) of at most q.Limit members and their hashes, in one
// read-only script, so a page costs O(log N + Limit) and never mixes two
// batches. A descending query of a TiesAscending table walks value groups
// instead (tableTiesScript). On a cluster every partition's index is read
// concurrently and the pages merged. An unknown index or a bad bound is an
// error wrapping engine.ErrInvalid. Safe for concurrent use.
func (t *table) Query(ctx context.Context, q engine.IndexQuery) (engine.DocPage, error) {
	pos, kind, err := q.Validate(t.spec)
	if err != nil {
		return engine.DocPage{}, fmt.Errorf("redisstore: query: %w", err)
	}
	var lo, hi string
	if q.HasMin {
		lo = lowerBound(q.Min, kind)
	}
	if q.HasMax {
		hi = upperBound(q.Max, kind)
	}
	// ARGV 6 and 7: "1" for REV, or (ties) the rest of the cursor's group.
	script, rev, arg6, arg7 := tableQueryScript, false, "0", ""
	switch c := q.After; {
	case q.Desc && t.spec.TiesAscending:
		script, arg6 = tableTiesScript, ""
		if c == nil {
			break
		}
		if _, nul := cutNUL(c.Value.Str); kind == engine.IndexString && nul {
			hi = tighter(hi, afterBound(*c, kind), true) // no group of its own
			break
		}
		if q.InRange(c.Value, kind) { // the cursor's value group, after its key
			arg6, arg7 = afterBound(*c, kind), upperBound(c.Value, kind)
		}
		hi = tighter(hi, "("+indexMember(storedIndex(c.Value, kind), kind, ""), true) // then lower values
	case q.Desc:
		rev, arg6 = true, "1"
		if c != nil {
			hi = tighter(hi, afterBound(*c, kind), true)
		}
	case c != nil:
		lo = tighter(lo, afterBound(*c, kind), false)
	}
	start, stop := cmp.Or(lo, "-"), cmp.Or(hi, "+")
	if rev {
		start, stop = stop, start
	}
	args := []any{start, stop, q.Limit, "", t.kinds[pos : pos+1], arg6, arg7}
	for _, f := range t.fields {
		args = append(args, f)
	}
	n := t.partitions()
	pages, errs := make([][]engine.Doc, n), make([]error, n)
	var wg sync.WaitGroup
	for p := range n {
		wg.Go(func() { pages[p], errs[p] = t.queryPartition(ctx, script, p, pos, args) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return engine.DocPage{}, err
	}
	page := engine.DocPage{Docs: pages[0]}
	if n > 1 {
		// Each partition's page is in the query's order: merged, the
		// first Limit documents are the table's page.
		page.Docs = slices.Concat(pages...)
		slices.SortStableFunc(page.Docs, t.spec.DocOrder(pos, kind, q.Desc))
		page.Docs = page.Docs[:min(len(page.Docs), q.Limit)]
	}
	if n := len(page.Docs); n > 0 && n == q.Limit {
		last := page.Docs[n-1]
		page.Next = &engine.IndexCursor{Value: last.Index[pos], Key: slices.Clone(last.Key)}
	}
	return page, nil
}

// queryPartition runs a query script on the indexes of partition p (the
// table's on a single server); args are the script's with an empty
// document key prefix, which it fills in.
func (t *table) queryPartition(ctx context.Context, script *redis.Script, p int32, pos int, args []any) ([]engine.Doc, error) {
	args = slices.Clone(args)
	args[3] = t.keys.docPrefix(p)
	vals, err := script.Run(ctx, t.s.client, []string{t.keys.index(p, t.spec.Indexes[pos].Name)}, args...).Slice()
	if err != nil {
		return nil, wrap(fmt.Sprintf("table %s: query %s", t.spec.Name, t.spec.Indexes[pos].Name), err)
	}
	stride := 1 + len(t.fields)
	if len(vals)%stride != 0 {
		return nil, fmt.Errorf("redisstore: table %s: query: %d values in reply: %w", t.spec.Name, len(vals), errCorrupt)
	}
	docs := make([]engine.Doc, 0, len(vals)/stride)
	for i := 0; i < len(vals); i += stride {
		key, ok := vals[i].(string)
		if !ok {
			return nil, fmt.Errorf("redisstore: table %s: query: key of type %T: %w", t.spec.Name, vals[i], errCorrupt)
		}
		d, ok, err := t.decode([]byte(key), vals[i+1:i+stride])
		if err != nil {
			return nil, fmt.Errorf("redisstore: table %s: query: key %x: %w", t.spec.Name, key, err)
		}
		if !ok {
			return nil, fmt.Errorf("redisstore: table %s: query: empty document %x: %w", t.spec.Name, key, errCorrupt)
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// scanChunk is the SSCAN/SCAN page size and the pipelined read size.
const scanChunk = 1000

// ScanPartition calls fn for each document of partition p in unspecified
// order, stopping at (and returning) fn's first error. It walks the
// partition's members set (SSCAN, pipelined reads), so it costs the
// partition's size, not the database's. Documents written or deleted
// meanwhile may or may not be seen; each key is passed at most once. Safe
// for concurrent use.
func (t *table) ScanPartition(ctx context.Context, p int32, fn func(engine.Doc) error) error {
	seen := make(map[string]bool)
	op := fmt.Sprintf("scan partition %d", p)
	var cursor uint64
	for {
		members, next, err := t.s.client.SScan(ctx, t.keys.members(p), cursor, "", scanChunk).Result()
		if err != nil {
			return wrap(fmt.Sprintf("table %s: %s%s", t.spec.Name, op, t.keys.where(p)), err)
		}
		keys := make([][]byte, 0, len(members))
		for _, m := range members {
			if !seen[m] {
				seen[m] = true
				keys = append(keys, []byte(m))
			}
		}
		err = t.readDocs(ctx, p, false, keys, op, op+": key %x", func(d engine.Doc) error {
			if d.Partition != p {
				return nil // moved since the member was listed
			}
			return fn(d)
		})
		if err != nil || next == 0 {
			return err
		}
		cursor = next
	}
}

// Reset deletes every document, index and checkpoint of the table, and
// its stream, with SCAN and UNLINK (never KEYS). It keeps the epochs (so
// an old writer still alive stays fenced), the spec (the table stays open)
// and the migration marker. Concurrent writes may survive it. Safe for
// concurrent use.
func (t *table) Reset(ctx context.Context) error {
	t.s.written.forget(t.keys.root)
	deleted := 0
	err := t.s.scanKeys(ctx, t.keys.pattern(), scanChunk, func(batch []string) error {
		batch = slices.DeleteFunc(batch, t.keys.kept)
		if len(batch) == 0 {
			return nil
		}
		deleted += len(batch)
		return t.s.unlink(ctx, batch)
	})
	if err == nil && t.stream != nil && !t.keys.cluster { // on a cluster the streams matched the pattern
		var n int64
		n, err = t.s.client.Unlink(ctx, t.streamKey(0)).Result()
		deleted += int(n)
	}
	if err != nil {
		return wrap(fmt.Sprintf("table %s: reset", t.spec.Name), err)
	}
	t.s.log.Info("table reset", "table", t.spec.Name, "keys", deleted)
	return nil
}
