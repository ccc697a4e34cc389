package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
)

// order and spend are a second job shape: JSON orders keyed by a string
// customer id, summed per customer, indexed by total and by tier.
type order struct {
	Customer string  `json:"customer"`
	Amount   float64 `json:"amount"`
}

type spend struct {
	Count int64   `json:"count"`
	Total float64 `json:"total"`
	Max   float64 `json:"max"`
}

var errBadOrder = errors.New("bad order")

func spendJob() engine.Job[string, order, spend] {
	return engine.Job[string, order, spend]{
		Name: "customers",
		Decode: func(ctx context.Context, b []byte) (order, error) {
			o, err := engine.JSON[order]()(ctx, b)
			if err == nil && (o.Amount < 0 || math.IsNaN(o.Amount) || math.IsInf(o.Amount, 0)) {
				err = fmt.Errorf("amount %v: %w", o.Amount, errBadOrder)
			}
			return o, err
		},
		Key:  func(o order) (string, error) { return engine.StringKeys.Parse(o.Customer) },
		Keys: engine.StringKeys,
		Add: func(s *spend, o order) {
			s.Count++
			s.Total += o.Amount
			s.Max = max(s.Max, o.Amount)
		},
		Indexes: []engine.Index[spend]{
			engine.NumberIndex("total", func(s spend) float64 { return s.Total }),
			engine.StringIndex("tier", func(s spend) string {
				if s.Total >= 100 {
					return "gold"
				}
				return "basic"
			}),
		},
	}
}

// jobRig runs spendJob on a kfake cluster and a memstore table.
type jobRig struct {
	c      *kcluster
	table  engine.Table
	cfg    engine.Config
	topics engine.Topics
	e      *engine.Engine
	cancel context.CancelFunc
	done   chan error
}

func newJobRig(t *testing.T, c *kcluster, g engine.Guarantee, store *memstore.Store) *jobRig {
	t.Helper()
	cfg := unitConfig(c, g)
	cfg.ApplicationID = "unit-customers"
	cfg.InputTopic = "orders"
	cfg.OutputTopic = ""
	cfg.RepartitionTopic = "unit-customers-repartition"
	cfg.ChangelogTopic = "unit-customers-changelog"
	cfg.DLQTopic = "unit-customers-dlq"
	topics := cfg.Topics()
	for _, topic := range []string{topics.Input, topics.Repartition} {
		if err := c.CreateTopic(topic, 1); err != nil && c.Partitions(topic) == 0 {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	runner, err := spendJob().Runner()
	if err != nil {
		t.Fatalf("Runner: %v", err)
	}
	table, err := store.OpenTable(context.Background(), runner.Spec())
	if err != nil {
		t.Fatalf("OpenTable: %v", err)
	}
	e, err := engine.NewJob(cfg, table, runner)
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	r := &jobRig{c: c, table: table, cfg: cfg, topics: topics, e: e, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *jobRig) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("Run: got %v, want nil after cancel", err)
	}
	r.cancel = nil
}

func (r *jobRig) send(t *testing.T, values ...string) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: r.topics.Input, Value: []byte(v)})
	}
	if err := r.c.appendBatch(recs...); err != nil {
		t.Fatalf("append orders: %v", err)
	}
}

// hasSpend returns nil once the table holds exactly want for each customer.
func hasSpend(table engine.Table, want map[string]spend) func() error {
	return func() error {
		for id, w := range want {
			d, err := table.Get(context.Background(), []byte(id))
			if err != nil {
				return fmt.Errorf("customer %s: %w", id, err)
			}
			var got spend
			if err := json.Unmarshal(d.Value, &got); err != nil {
				return fmt.Errorf("customer %s: %w", id, err)
			}
			if got != w {
				return fmt.Errorf("customer %s: got %+v, want %+v", id, got, w)
			}
		}
		return nil
	}
}

func TestUnitGenericJob(t *testing.T) {
	t.Parallel() // each test runs on its own cluster
	for _, g := range []engine.Guarantee{engine.ExactlyOnce, engine.AtLeastOnce} {
		t.Run(string(g), func(t *testing.T) {
			c := newCluster(t)
			store := memstore.New()
			r := newJobRig(t, c, g, store)
			r.send(t,
				`{"customer":"ann","amount":60}`,
				`{"customer":"bob","amount":5}`,
				`{"customer":"ann","amount":70}`,
				`not json`,
				`{"customer":"","amount":1}`,
				`{"customer":"bob","amount":-1}`,
				`{"customer":"cy","amount":0.5}`)
			want := map[string]spend{
				"ann": {Count: 2, Total: 130, Max: 70},
				"bob": {Count: 1, Total: 5, Max: 5},
				"cy":  {Count: 1, Total: 0.5, Max: 0.5},
			}
			eventually(t, "table holds every customer's totals", hasSpend(r.table, want))
			eventually(t, "three bad orders dead-lettered", func() error {
				recs, err := c.CommittedRecords(r.topics.DLQ, 0)
				if err != nil {
					return err
				}
				if len(recs) != 3 {
					return fmt.Errorf("got %d dead letters, want 3", len(recs))
				}
				return nil
			})

			t.Run("index query", func(t *testing.T) {
				page, err := r.table.Query(context.Background(), engine.IndexQuery{Index: "total", Min: engine.Num(1), HasMin: true, Desc: true, Limit: 10})
				if err != nil {
					t.Fatalf("Query: %v", err)
				}
				var got []string
				for _, d := range page.Docs {
					got = append(got, string(d.Key))
				}
				if fmt.Sprint(got) != "[ann bob]" {
					t.Errorf("total >= 1, desc: got %v, want [ann bob]", got)
				}
				page, err = r.table.Query(context.Background(), engine.IndexQuery{Index: "tier", Min: engine.Str("gold"), Max: engine.Str("gold"), HasMin: true, HasMax: true, Limit: 10})
				if err != nil || len(page.Docs) != 1 || string(page.Docs[0].Key) != "ann" {
					t.Errorf("tier = gold: got %d docs, %v; want [ann]", len(page.Docs), err)
				}
			})

			t.Run("last changelog record per key", func(t *testing.T) {
				eventually(t, "changelog holds the totals", func() error {
					recs, err := c.CommittedRecords(r.topics.Changelog, 0)
					if err != nil {
						return err
					}
					last := map[string]spend{}
					for _, rec := range recs {
						var s spend
						if err := json.Unmarshal(rec.Value, &s); err != nil {
							return fmt.Errorf("changelog record of %s: %w", rec.Key, err)
						}
						last[string(rec.Key)] = s
					}
					for id, w := range want {
						if last[id] != w {
							return fmt.Errorf("changelog %s: got %+v, want %+v", id, last[id], w)
						}
					}
					return nil
				})
			})

			// A restart on the same store resumes without replaying the
			// changelog; a new store is restored from it.
			r.stop(t)
			r.send(t, `{"customer":"ann","amount":1}`)
			want["ann"] = spend{Count: 3, Total: 131, Max: 70}
			r2 := newJobRig(t, c, g, store)
			eventually(t, "restarted engine applies the new order", hasSpend(r2.table, want))
			if got := r2.e.Stats().ChangelogRestored; got != 0 {
				t.Errorf("restart on the same store: restored %d changelog records, want 0", got)
			}
			r2.stop(t)
			r3 := newJobRig(t, c, g, memstore.New())
			eventually(t, "a new store is restored from the changelog", hasSpend(r3.table, want))
			if got := r3.e.Stats().ChangelogRestored; got == 0 {
				t.Errorf("new store: restored 0 changelog records, want > 0")
			}
		})
	}
}

func TestUnitJobValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(j *engine.Job[string, order, spend])
	}{
		{"no name", func(j *engine.Job[string, order, spend]) { j.Name = "" }},
		{"bad name", func(j *engine.Job[string, order, spend]) { j.Name = "Customers!" }},
		{"no decode", func(j *engine.Job[string, order, spend]) { j.Decode = nil }},
		{"no key", func(j *engine.Job[string, order, spend]) { j.Key = nil }},
		{"no add", func(j *engine.Job[string, order, spend]) { j.Add = nil }},
		{"no key codec", func(j *engine.Job[string, order, spend]) { j.Keys = engine.KeyCodec[string]{} }},
		{"duplicate index", func(j *engine.Job[string, order, spend]) { j.Indexes = append(j.Indexes, j.Indexes[0]) }},
		{"zero index", func(j *engine.Job[string, order, spend]) { j.Indexes = append(j.Indexes, engine.Index[spend]{}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := spendJob()
			tt.edit(&j)
			if _, err := j.Runner(); !errors.Is(err, engine.ErrInvalid) {
				t.Errorf("Runner: got %v, want an error wrapping ErrInvalid", err)
			}
		})
	}
	if _, err := spendJob().Runner(); err != nil {
		t.Errorf("valid job: got %v, want nil", err)
	}
}
