package redisstore

// Migration of the movie layout (doc.go) into the table "movies", in three
// steps, each atomic and idempotent, so that a crash anywhere leaves a
// state the next open completes:
//
//  1. Per partition, one script moves the epoch (the table's becomes the
//     larger of the two, so the next claim is above every earlier one),
//     the checkpoint and the token (unless the table has its own) and
//     deletes the old keys, so a writer holding an old epoch is refused.
//  2. Chunks of movie hashes (SCAN <prefix>movie:*) are moved by one script
//     each: a movie whose hash still holds the version read becomes a
//     document (unless the table holds a newer one) and its hash goes.
//  3. The old members sets and by-avg go; the marker K migrated is set.
//
// One instance migrates at a time, holding the lock K migrating (renewed
// after every step); the others poll for the marker or take an expired
// lock over. Two instances running at once still agree: a movie is moved
// by exactly one script. The stream is left as it is (the table's stream
// continues it). An old-build writer claiming a partition after step 1
// writes the movie layout again, which nothing migrates: stop every old
// instance before the first open.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keepstate/keepstate/engine"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// MovieTableName is the table the movie layout migrates into.
const MovieTableName = "movies"

// The lock's lifetime, how often a waiting instance looks for the marker,
// the movies moved per script and the connections moving them.
const (
	migrateLockTTL = 30 * time.Second
	migratePoll    = 100 * time.Millisecond
	migrateChunk   = 1000
	migrateWorkers = 2
)

// errLockLost marks a migration whose lock expired and was taken by
// another instance; the other instance completes it while this one waits.
var errLockLost = errors.New("migration lock lost")

// migrateMetaScript moves one partition's epoch, checkpoint and batch
// token. KEYS: 1..3 old epoch, checkpoint, token; 4..6 the table's.
var migrateMetaScript = redis.NewScript(`
local e = redis.call('GET', KEYS[1])
if e then
  local cur = redis.call('GET', KEYS[4])
  if not cur or tonumber(cur) < tonumber(e) then redis.call('SET', KEYS[4], e) end
end
for i = 2, 3 do
  local v = redis.call('GET', KEYS[i])
  if v and redis.call('EXISTS', KEYS[i + 3]) == 0 then redis.call('SET', KEYS[i + 3], v) end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
`)

// migrateMoviesScript moves a chunk of movies (step 2). Their by-avg
// members and old memberships stay until step 3 deletes those sets whole:
// removing a million members one by one would double the time. KEYS: 1 the
// table's avg index. ARGV: per movie, 9 values: movie key, version, table
// document key, table members set, raw key, partition, sources (""
// for none), value, index field. Reply: movies moved.
var migrateMoviesScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 9 do
  local mk, ver, dk, tmk, key = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local p, src, val, idx = ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8]
  if redis.call('HGET', mk, 'version') == ver then
    local cur = redis.call('HGET', dk, 'v')
    if not cur or tonumber(cur) < tonumber(ver) then
      if cur then redis.call('ZREM', KEYS[1], redis.call('HGET', dk, '0') .. key) end
      if src == '' then
        if cur then redis.call('HDEL', dk, 's') end
        redis.call('HSET', dk, 'p', p, 'v', ver, 'd', val, '0', idx)
      else
        redis.call('HSET', dk, 'p', p, 'v', ver, 's', src, 'd', val, '0', idx)
      end
      redis.call('ZADD', KEYS[1], 0, idx .. key)
      redis.call('SADD', tmk, key)
    end
    redis.call('DEL', mk)
    n = n + 1
  end
end
return n
`)

// Lock scripts: renew the lock unless another instance holds it (taking
// it again when it expired), release it only while holding it.
// KEYS: 1 lock. ARGV: 1 token, 2 lifetime in ms (renew).
var (
	migrateRenewScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)
	migrateReleaseScript = redis.NewScript(
		`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// isMovieSpec reports whether spec is the movie job's table, the one the
// movie layout migrates into.
func isMovieSpec(spec engine.TableSpec) bool {
	return spec.Name == MovieTableName && spec.TiesAscending &&
		len(spec.Indexes) == 1 && spec.Indexes[0].Kind == engine.IndexNumber
}

// legacyKeys are the key names of the movie layout (see doc.go).
type legacyKeys struct{ prefix string }

func (k legacyKeys) movies() string { return k.prefix + "movie:" }
func (k legacyKeys) byAvg() string  { return k.prefix + "by-avg" }
func (k legacyKeys) parts() string  { return k.prefix + "partition:" }
func (k legacyKeys) partition(p int32, what string) string {
	return k.parts() + formatInt(int64(p)) + ":" + what
}

// partitionOf returns the partition of a movie layout partition key
// ("<prefix>partition:<p>:<what>").
func (k legacyKeys) partitionOf(key string) (int32, bool) {
	rest, ok := strings.CutPrefix(key, k.parts())
	ps, what, cut := strings.Cut(rest, ":")
	p, err := strconv.ParseInt(ps, 10, 32)
	valid := slices.Contains([]string{"members", "checkpoint", "epoch", "batch"}, what)
	return int32(p), ok && cut && err == nil && valid
}

// legacyFields are the movie hash fields the migration reads, in order.
var legacyFields = []string{"id", "count", "sum", "partition", "version", "sources"}

// migration is one run of the migration into t.
type migration struct {
	s     *Store
	t     *table
	old   legacyKeys
	lock  string
	token string
	ttl   time.Duration
	chunk int
	parts int

	mu    sync.Mutex // serialises step and guards moved
	moved int
}

// migrateMovies converts the movie layout under the store's prefix into t
// unless the marker says it is done, or waits for another instance doing
// it. It returns when the marker is set, or with an error.
func (s *Store) migrateMovies(ctx context.Context, t *table) error {
	if s.keys.cluster {
		return nil // the movie layout ran on a single server only
	}
	m := &migration{s: s, t: t, old: legacyKeys{prefix: s.keys.prefix}, lock: t.keys.migrating(),
		ttl: cmp.Or(s.migrateTTL, migrateLockTTL), chunk: cmp.Or(s.migrateChunk, migrateChunk)}
	for waiting := false; ; waiting = true {
		n, err := s.client.Exists(ctx, t.keys.migrated()).Result()
		if err != nil || n == 1 {
			return wrap("migrate movie layout", err)
		}
		m.token = rand.Text()
		got, err := s.client.SetNX(ctx, m.lock, m.token, m.ttl).Result()
		if err != nil {
			return wrap("migrate movie layout", err)
		}
		if got {
			err := m.run(ctx)
			// A background context: release the lock even when ctx ended.
			rerr := migrateReleaseScript.Run(context.WithoutCancel(ctx), s.client, []string{m.lock}, m.token).Err()
			if rerr != nil && err == nil {
				err = wrap("migrate movie layout: release lock", rerr)
			}
			if !errors.Is(err, errLockLost) {
				return err
			}
			s.log.Warn("another instance took the movie layout migration over", "lock", m.lock)
		}
		if !waiting {
			s.log.Info("waiting for another instance to migrate the movie layout", "lock", m.lock)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisstore: migrate movie layout: waiting for %s: %w", m.lock, ctx.Err())
		case <-time.After(migratePoll):
		}
	}
}

// run performs the three steps while holding the lock.
func (m *migration) run(ctx context.Context) error {
	start := time.Now()
	for _, step := range []func(context.Context) error{m.partitions, m.movies, m.finish} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	msg := "movie layout migrated"
	if m.moved == 0 && m.parts == 0 {
		msg = "no movie layout to migrate"
	}
	m.s.log.Info(msg, "table", m.t.spec.Name, "movies", m.moved, "partitions", m.parts,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// scan calls fn with each page of the keys under prefix (the old layout
// ran on a single server only).
func (m *migration) scan(ctx context.Context, prefix string, fn func([]string) error) error {
	var fnErr error
	err := scanNode(ctx, m.s.client, keys{prefix: prefix}.pattern(), int64(m.chunk), func(page []string) error {
		fnErr = fn(page)
		return fnErr
	})
	if err != nil && fnErr == nil {
		return wrap("migrate movie layout: scan", err)
	}
	return err
}

// partitions is step 1.
func (m *migration) partitions(ctx context.Context) error {
	var parts []int32
	err := m.scan(ctx, m.old.parts(), func(page []string) error {
		for _, k := range page {
			if p, ok := m.old.partitionOf(k); ok && !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range parts {
		tk := m.t.keys
		err := migrateMetaScript.Run(ctx, m.s.client, []string{
			m.old.partition(p, "epoch"), m.old.partition(p, "checkpoint"), m.old.partition(p, "batch"),
			tk.epoch(p), tk.checkpoint(p), tk.batch(p)}).Err()
		if err != nil {
			return wrap(fmt.Sprintf("migrate movie layout: partition %d", p), err)
		}
		if err := m.step(ctx, "partition"); err != nil {
			return err
		}
	}
	m.parts = len(parts)
	return nil
}

// movies is step 2: SCAN passes until one finds no movie left (a second
// pass finds none unless something wrote movies meanwhile).
func (m *migration) movies(ctx context.Context) error {
	const maxPasses = 4
	for range maxPasses {
		found, err := m.pass(ctx)
		if err != nil || found == 0 {
			return err
		}
	}
	return fmt.Errorf("redisstore: migrate movie layout: movies keep appearing under %s after %d passes (is an instance of the old build still writing?)",
		m.old.movies(), maxPasses)
}

// pass scans the movie hashes once, moving the pages on up to
// migrateWorkers connections at once (so that the client's work on one
// chunk overlaps Redis's on another), and returns how many it found.
func (m *migration) pass(ctx context.Context) (int, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(migrateWorkers)
	found := 0
	err := m.scan(gctx, m.old.movies(), func(page []string) error {
		found += len(page)
		g.Go(func() error { return m.moveChunk(gctx, page) })
		return gctx.Err() // a move failed
	})
	if werr := g.Wait(); werr != nil {
		return found, werr
	}
	return found, err
}

// moveChunk reads the movies of mks and moves them with one script: each
// becomes the document of key id (8 bytes big-endian), value count and
// the sum's bits (8 bytes big-endian each) and index the average.
func (m *migration) moveChunk(ctx context.Context, mks []string) error {
	cmds, err := m.s.hmget(ctx, false, mks, legacyFields)
	if err != nil {
		return wrap("migrate movie layout: read movies", err)
	}
	args := make([]any, 0, 9*len(mks))
	for i, c := range cmds {
		mv, ok, err := decodeLegacy(c.Val())
		if err != nil {
			return fmt.Errorf("redisstore: migrate movie layout: %s: %w", mks[i], err)
		}
		if !ok {
			continue // moved since the scan
		}
		key := binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(mv.id))
		val := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(mv.count))
		val = binary.BigEndian.AppendUint64(val, math.Float64bits(mv.sum))
		avg := 0.0
		if mv.count != 0 {
			avg = mv.sum / float64(mv.count)
		}
		args = append(args, mks[i], mv.version, m.t.keys.doc(0, key), m.t.keys.members(int32(mv.partition)),
			string(key), formatInt(mv.partition), mv.sources, string(val),
			storedIndex(engine.Num(avg), engine.IndexNumber))
	}
	if len(args) == 0 {
		return nil
	}
	n, err := migrateMoviesScript.Run(ctx, m.s.client, []string{m.t.keys.index(0, m.t.spec.Indexes[0].Name)}, args...).Int()
	if err != nil {
		return wrap("migrate movie layout: move movies", err)
	}
	m.mu.Lock()
	m.moved += n
	m.mu.Unlock()
	return m.step(ctx, "movies")
}

// legacyMovie is a movie hash of the movie layout, with the values the
// table document keeps as strings as they were stored.
type legacyMovie struct {
	id, count, partition int64
	sum                  float64
	version, sources     string
}

// decodeLegacy parses the legacyFields of a movie hash; ok is false when
// the hash does not exist.
func decodeLegacy(vals []any) (mv legacyMovie, ok bool, err error) {
	str, has, err := hashStrings(legacyFields, vals)
	if err != nil || !slices.Contains(has, true) {
		return mv, false, err
	}
	var errs [5]error
	mv.id, errs[0] = strconv.ParseInt(str[0], 10, 64)
	mv.count, errs[1] = strconv.ParseInt(str[1], 10, 64)
	mv.sum, errs[2] = strconv.ParseFloat(str[2], 64)
	mv.partition, errs[3] = strconv.ParseInt(str[3], 10, 32)
	_, errs[4] = strconv.ParseInt(str[4], 10, 64)
	for i, e := range errs {
		if e != nil {
			return mv, false, fmt.Errorf("field %s %q: %w", legacyFields[i], str[i], errCorrupt)
		}
	}
	src, err := decodeSources(str[5])
	mv.version, mv.sources = str[4], encodeSources(src)
	return mv, err == nil, err
}

// finish is step 3.
func (m *migration) finish(ctx context.Context) error {
	err := m.scan(ctx, m.old.parts(), func(page []string) error {
		gone := slices.DeleteFunc(page, func(k string) bool {
			_, ok := m.old.partitionOf(k)
			return !ok
		})
		if len(gone) == 0 {
			return nil
		}
		return m.s.client.Unlink(ctx, gone...).Err()
	})
	if err != nil {
		return wrap("migrate movie layout: delete members sets", err)
	}
	if err := m.s.client.Unlink(ctx, m.old.byAvg()).Err(); err != nil {
		return wrap("migrate movie layout: delete by-avg", err)
	}
	if err := m.step(ctx, "finish"); err != nil {
		return err
	}
	return wrap("migrate movie layout: mark done", m.s.client.Set(ctx, m.t.keys.migrated(), "1", 0).Err())
}

// step renews the lock after a step, failing when another instance took
// it over, and runs the test hook; one step at a time.
func (m *migration) step(ctx context.Context, what string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok, err := migrateRenewScript.Run(ctx, m.s.client, []string{m.lock}, m.token, m.ttl.Milliseconds()).Int()
	if err != nil {
		return wrap("migrate movie layout: renew lock", err)
	}
	if ok != 1 {
		return fmt.Errorf("redisstore: migrate movie layout: %s expired and was taken: %w", m.lock, errLockLost)
	}
	if m.s.migrateHook != nil {
		return m.s.migrateHook(what)
	}
	return nil
}
