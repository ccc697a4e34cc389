package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
	"github.com/keepstate/keepstate/internal/testkit"
	"github.com/keepstate/keepstate/movies"
)

// unitTimeout bounds every wait of the engine unit tests (on kfake).
const unitTimeout = 10 * time.Second

// unitSerde is a movies.Serde without a registry: a rating is a zero
// magic byte, the movie id and the rating (big-endian); a CountAndSum is
// the count and the sum. Anything else fails to decode. failNext makes the
// next DecodeRating calls report the registry unavailable.
type unitSerde struct {
	mu       sync.Mutex
	failNext int
}

var errMalformed = errors.New("malformed test record")

func ratingValue(movie int64, rating float64) []byte {
	b := []byte{0}
	b = binary.BigEndian.AppendUint64(b, uint64(movie))
	return binary.BigEndian.AppendUint64(b, math.Float64bits(rating))
}

func (s *unitSerde) DecodeRating(_ context.Context, b []byte) (avro.Rating, error) {
	s.mu.Lock()
	if s.failNext > 0 {
		s.failNext--
		s.mu.Unlock()
		return avro.Rating{}, fmt.Errorf("test: %w", avro.ErrRegistryUnavailable)
	}
	s.mu.Unlock()
	if len(b) != 17 || b[0] != 0 {
		return avro.Rating{}, fmt.Errorf("rating of %d bytes: %w", len(b), errMalformed)
	}
	return avro.Rating{MovieID: int64(binary.BigEndian.Uint64(b[1:])), Rating: math.Float64frombits(binary.BigEndian.Uint64(b[9:]))}, nil
}

func (s *unitSerde) EncodeCountAndSum(_ context.Context, _ string, v avro.CountAndSum) ([]byte, error) {
	b := binary.BigEndian.AppendUint64(nil, uint64(v.Count))
	return binary.BigEndian.AppendUint64(b, math.Float64bits(v.Sum)), nil
}

func (s *unitSerde) DecodeCountAndSum(_ context.Context, b []byte) (avro.CountAndSum, error) {
	if len(b) != 16 {
		return avro.CountAndSum{}, fmt.Errorf("count and sum of %d bytes: %w", len(b), errMalformed)
	}
	return avro.CountAndSum{Count: int64(binary.BigEndian.Uint64(b)), Sum: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}, nil
}

// movieStats is a movie as the tests state it: its aggregate and the
// processing metadata of its table document.
type movieStats struct {
	MovieID   int64
	Partition int32
	Count     int64
	Sum       float64
	Version   int64
	Sources   map[int32]int64
}

// doc returns m as the movie table's document.
func (m movieStats) doc() engine.Doc {
	a := movies.Agg{Count: m.Count, Sum: m.Sum}
	return engine.Doc{Key: engine.Int64Keys.Append(nil, m.MovieID), Partition: m.Partition, Version: m.Version,
		Sources: m.Sources, Value: movies.Values{}.Append(nil, a), Index: []engine.IndexValue{engine.Num(a.Avg())}}
}

// statsOf reads a movie table document.
func statsOf(d engine.Doc) (movieStats, error) {
	id, err := engine.Int64Keys.Decode(d.Key)
	if err != nil {
		return movieStats{}, err
	}
	a, err := movies.Values{}.Decode(context.Background(), "", d.Value)
	if err != nil {
		return movieStats{}, err
	}
	return movieStats{MovieID: id, Partition: d.Partition, Count: a.Count, Sum: a.Sum, Version: d.Version, Sources: d.Sources}, nil
}

// movieTable opens the movie table of s.
func movieTable(t testing.TB, s *memstore.Store) engine.Table {
	t.Helper()
	tb, err := s.OpenTable(context.Background(), movies.Spec)
	if err != nil {
		t.Fatalf("open movie table: %v", err)
	}
	return tb
}

// recordingStore is a memstore movie table that notes every Apply in the
// cluster's request log ("store-apply p=.. checkpoint=.. docs=.. replay=..")
// before applying it, so tests can order store writes among Kafka
// operations. failApply and failLoad, when set, fail the next Apply or
// Load calls with their errors.
type recordingStore struct {
	engine.Table
	store *memstore.Store
	c     *kcluster

	mu        sync.Mutex
	failApply []error
	failLoad  []error
}

const storeApply = "store-apply"

func (s *recordingStore) Apply(ctx context.Context, b engine.DocBatch) error {
	s.mu.Lock()
	var err error
	if len(s.failApply) > 0 {
		err, s.failApply = s.failApply[0], s.failApply[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	s.c.note(storeApply, fmt.Sprintf("p=%d checkpoint=%d docs=%d replay=%v", b.Partition, b.Checkpoint, len(b.Docs), b.Replay))
	return s.Table.Apply(ctx, b)
}

func (s *recordingStore) Load(ctx context.Context, keys [][]byte) (map[string]engine.Doc, error) {
	s.mu.Lock()
	var err error
	if len(s.failLoad) > 0 {
		err, s.failLoad = s.failLoad[0], s.failLoad[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.Table.Load(ctx, keys)
}

// InstanceLocal reports the memstore's Local option.
func (s *recordingStore) InstanceLocal() bool { return s.store.InstanceLocal() }

// ScanPartition lists partition p of the table.
func (s *recordingStore) ScanPartition(ctx context.Context, p int32, fn func(engine.Doc) error) error {
	return s.Table.(engine.TableScanner).ScanPartition(ctx, p, fn)
}

// movie returns the stored movie id, or an error wrapping
// engine.ErrNotFound.
func (s *recordingStore) movie(ctx context.Context, id int64) (movieStats, error) {
	d, err := s.Table.Get(ctx, engine.Int64Keys.Append(nil, id))
	if err != nil {
		return movieStats{}, err
	}
	return statsOf(d)
}

// applyNote is a parsed store-apply event.
type applyNote struct {
	seq        int
	p          int32
	checkpoint int64
	docs       int
	replay     bool
}

func parseApply(e event) (applyNote, bool) {
	if e.Kind != storeApply {
		return applyNote{}, false
	}
	var n applyNote
	if _, err := fmt.Sscanf(e.Detail, "p=%d checkpoint=%d docs=%d replay=%t", &n.p, &n.checkpoint, &n.docs, &n.replay); err != nil {
		return applyNote{}, false
	}
	n.seq = e.Seq
	return n, true
}

// unitConfig is a small, fast engine configuration on cluster c (nil:
// newRig sets the brokers of the cluster it starts).
func unitConfig(c *kcluster, g engine.Guarantee) engine.Config {
	cfg := engine.DefaultConfig()
	cfg.Brokers = nil
	if c != nil {
		cfg.Brokers = c.brokers
	}
	cfg.ApplicationID = "unit"
	cfg.CommitInterval = 30 * time.Millisecond
	cfg.SessionTimeout = time.Second
	cfg.ProcessingGuarantee = g
	cfg.AdvertiseAddr = "127.0.0.1:7001"
	cfg.Partitions = 1
	return cfg
}

// rig is one engine running on a kfake cluster and a recording store.
type rig struct {
	c      *kcluster
	store  *recordingStore
	serde  *unitSerde
	cfg    engine.Config
	topics engine.Topics
	e      *engine.Engine
	cancel context.CancelFunc
	done   chan error
}

// newRig prepares an engine on c (a new cluster when nil) without running
// it; the input topic gets cfg.Partitions partitions.
func newRig(t *testing.T, c *kcluster, cfg engine.Config, store *memstore.Store) *rig {
	t.Helper()
	if c == nil {
		c = newCluster(t)
	}
	cfg.Brokers = c.brokers
	if store == nil {
		store = memstore.New()
	}
	r := &rig{c: c, store: &recordingStore{Table: movieTable(t, store), store: store, c: c}, serde: &unitSerde{}, cfg: cfg, topics: cfg.Topics()}
	n := max(cfg.Partitions, 1)
	for _, topic := range []string{r.topics.Input, r.topics.Repartition} {
		if err := c.CreateTopic(topic, n); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	e, err := newMovieEngine(cfg, r.store, r.serde)
	if err != nil {
		t.Fatalf("new movie engine: %v", err)
	}
	r.e = e
	return r
}

// start runs the engine in the background; the test's cleanup stops it.
func (r *rig) start(t *testing.T) *rig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and waits for it; a second call returns at once.
func (r *rig) stop(t *testing.T) {
	t.Helper()
	if r.done == nil {
		return
	}
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: got %v, want nil after cancel", err)
		}
	case <-time.After(unitTimeout):
		t.Errorf("Run did not return within %v of cancel", unitTimeout)
	}
	r.done = nil
}

// rate appends ratings (movie, rating pairs) to input partition p, in one
// batch.
func (r *rig) rate(t *testing.T, p int32, ratings ...rating) {
	t.Helper()
	var recs []*kgo.Record
	for _, x := range ratings {
		recs = append(recs, &kgo.Record{Topic: r.topics.Input, Partition: p, Value: ratingValue(x.movie, x.value)})
	}
	if err := r.c.appendBatch(recs...); err != nil {
		t.Fatalf("append ratings: %v", err)
	}
}

type rating struct {
	movie int64
	value float64
}

// totals returns the count and sum per movie of ratings.
func totals(rs ...[]rating) map[int64]movieStats {
	out := map[int64]movieStats{}
	for _, batch := range rs {
		for _, x := range batch {
			d := out[x.movie]
			d.MovieID, d.Count, d.Sum = x.movie, d.Count+1, d.Sum+x.value
			out[x.movie] = d
		}
	}
	return out
}

// storeHas returns nil once the store holds exactly want's counts and sums.
func (r *rig) storeHas(want map[int64]movieStats) func() error {
	return func() error {
		for id, w := range want {
			got, err := r.store.movie(context.Background(), id)
			if err != nil {
				return fmt.Errorf("movie %d: %w", id, err)
			}
			if got.Count != w.Count || got.Sum != w.Sum {
				return fmt.Errorf("movie %d: got count %d sum %v, want count %d sum %v", id, got.Count, got.Sum, w.Count, w.Sum)
			}
		}
		return nil
	}
}

// checkStore fails the test unless the store holds exactly want.
func (r *rig) checkStore(t *testing.T, want map[int64]movieStats) {
	t.Helper()
	if err := r.storeHas(want)(); err != nil {
		t.Errorf("store: %v", err)
	}
}

func eventually(t *testing.T, msg string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, unitTimeout, msg, cond)
}

// repartitionRecord writes a repartition record for movie to partition 0
// with the given input source (srcP < 0: no source headers).
func (r *rig) repartitionRecord(t *testing.T, movie int64, value float64, srcP int32, srcO int64) {
	t.Helper()
	var hs []header
	if srcP >= 0 {
		hs = []header{
			{Key: engine.HeaderSourcePartition, Value: []byte(strconv.Itoa(int(srcP)))},
			{Key: engine.HeaderSourceOffset, Value: []byte(strconv.FormatInt(srcO, 10))},
		}
	}
	if _, err := r.c.Append(r.topics.Repartition, 0, engine.Int64Keys.Append(nil, movie), ratingValue(movie, value), hs...); err != nil {
		t.Fatalf("append repartition record: %v", err)
	}
}

// seed claims partition p of store and writes docs with checkpoint.
func seed(t *testing.T, s *memstore.Store, p int32, checkpoint int64, docs ...movieStats) {
	t.Helper()
	ctx := context.Background()
	tb := movieTable(t, s)
	epoch, err := tb.Claim(ctx, p)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	b := engine.DocBatch{Partition: p, Epoch: epoch, Checkpoint: checkpoint}
	for _, m := range docs {
		m.Partition = p
		b.Docs = append(b.Docs, m.doc())
	}
	if err := tb.Apply(ctx, b); err != nil {
		t.Fatalf("seed store: %v", err)
	}
}

// ready returns nil once the engine is ready (every partition RUNNING).
func (r *rig) ready() error { return r.e.Ready() }

// newMovieEngine returns an engine running the movie job on table.
func newMovieEngine(cfg engine.Config, table engine.Table, serde movies.Serde) (*engine.Engine, error) {
	job, err := movies.Job(serde).Runner()
	if err != nil {
		return nil, err
	}
	return engine.NewJob(cfg, table, job)
}

// viewMovie reads movie id through the engine's table view (answered only
// while its partition runs here).
func viewMovie(ctx context.Context, v *engine.TableView, id int64) (movieStats, error) {
	d, err := v.Get(ctx, engine.Int64Keys.Append(nil, id))
	if err != nil {
		return movieStats{}, err
	}
	return statsOf(d)
}

// avgQuery is the movie table's query of every average, highest first.
func avgQuery(limit int) engine.IndexQuery {
	return engine.IndexQuery{Index: "avg", Desc: true, Limit: limit}
}
