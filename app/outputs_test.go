package app_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/avro"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// lastChangelog returns the last committed changelog record of every
// movie: what log compaction keeps and what a full restore rebuilds from.
func lastChangelog(t *testing.T, c app.Config) map[int64]avro.CountAndSum {
	t.Helper()
	reg, err := avro.NewRegistry(c.SchemaRegistry)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	out := map[int64]avro.CountAndSum{}
	for _, m := range readTopic(t, c.Brokers, c.EngineConfig(nil).Topics().Changelog) {
		id, err := engine.Int64Keys.Decode(m.Key)
		if err != nil {
			t.Fatalf("changelog key %x: %v", m.Key, err)
		}
		v, err := reg.DecodeCountAndSum(context.Background(), m.Value)
		if err != nil {
			t.Fatalf("changelog value of movie %d at %d: %v", id, m.Offset, err)
		}
		out[id] = v
	}
	return out
}

// diffTopics compares the last committed changelog record and the last
// committed rating-averages value of every movie with the truth and
// describes the differences (nil when both topics are exact).
func diffTopics(t *testing.T, c app.Config, truth map[int64]testkit.Movie) error {
	t.Helper()
	cl := lastChangelog(t, c)
	avgs := readAverages(t, c.Brokers, c.OutputTopic)
	var bad []string
	ids := make([]int64, 0, len(truth))
	for id := range truth {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	wrongCL, wrongAvg := 0, 0
	for _, id := range ids {
		want := truth[id]
		if got, ok := cl[id]; !ok || got.Count != want.Count || got.Sum/float64(got.Count) != want.Rating {
			if wrongCL++; wrongCL <= 3 {
				bad = append(bad, fmt.Sprintf("changelog movie %d: got count %d sum %v, want count %d avg %v", id, got.Count, got.Sum, want.Count, want.Rating))
			}
		}
		if got, ok := avgs[id]; !ok || got != want.Rating {
			if wrongAvg++; wrongAvg <= 3 {
				bad = append(bad, fmt.Sprintf("%s movie %d: got %v (present %v), want %v", c.OutputTopic, id, got, ok, want.Rating))
			}
		}
	}
	if len(cl) != len(truth) || len(avgs) != len(truth) {
		bad = append(bad, fmt.Sprintf("changelog has %d movies, averages %d, truth %d", len(cl), len(avgs), len(truth)))
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%d changelog and %d averages of %d movies wrong: %v", wrongCL, wrongAvg, len(truth), bad)
}

// waitCommitted waits until the group's committed offset of every
// partition of topic has reached the partition's end: everything written
// to it so far is processed and its offsets committed.
func waitCommitted(t *testing.T, c app.Config, topic string) {
	t.Helper()
	client := testClient(t, c.Brokers)
	admin := testAdmin(t, c.Brokers)
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	testkit.Eventually(t, 60*time.Second, "offsets of "+topic+" committed", func() error {
		offs, err := admin.ListConsumerGroupOffsets(c.ApplicationID, map[string][]int32{topic: parts})
		if err != nil {
			return err
		}
		for _, p := range parts {
			end, err := engineEnd(client, topic, p)
			if err != nil {
				return err
			}
			b := offs.GetBlock(topic, p)
			if end > 0 && (b == nil || b.Offset < end) {
				return fmt.Errorf("%s/%d: committed %v, end %d", topic, p, b, end)
			}
		}
		return nil
	})
}

// engineEnd is the offset after the last data record of topic/p: the end a
// consumer commits after reading everything (transaction markers after it
// do not count).
func engineEnd(client sarama.Client, topic string, p int32) (int64, error) {
	end := int64(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := engine.ReadCommitted(ctx, client, topic, p, func(r engine.CommittedRecord) error {
		end = r.Offset + 1
		return nil
	})
	return end, err
}

// createCompactingChangelog creates c's changelog topic before the engine
// does, configured so that the broker compacts it during a test: tiny
// segments, any dirty ratio, markers removed at once.
func createCompactingChangelog(t *testing.T, c app.Config) {
	t.Helper()
	createTopic(t, c.Brokers, c.EngineConfig(nil).Topics().Changelog, c.Partitions, map[string]string{
		"cleanup.policy":            "compact",
		"segment.ms":                "1000",
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       "100",
		"min.compaction.lag.ms":     "0",
		"max.message.bytes":         "1100000",
	})
}

// waitCompacted waits until the broker has compacted c's changelog: in
// every partition, fewer than half of the offsets still hold a record.
// Uncompacted, nearly every offset does (only transaction markers don't).
func waitCompacted(t *testing.T, c app.Config) {
	t.Helper()
	client := testClient(t, c.Brokers)
	topic := c.EngineConfig(nil).Topics().Changelog
	testkit.Eventually(t, 120*time.Second, "changelog compacted", func() error {
		for p := int32(0); p < c.Partitions; p++ {
			var n, last int64
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := engine.ReadCommitted(ctx, client, topic, p, func(r engine.CommittedRecord) error {
				n, last = n+1, r.Offset
				return nil
			})
			cancel()
			if err != nil {
				return err
			}
			if last == 0 || float64(n) >= 0.5*float64(last+1) {
				return fmt.Errorf("%s/%d: %d records over %d offsets", topic, p, n, last+1)
			}
			t.Logf("%s/%d compacted: %d records over %d offsets", topic, p, n, last+1)
		}
		return nil
	})
}

// testClient returns a sarama client of brokers, closed when the test ends.
func testClient(t *testing.T, brokers []string) sarama.Client {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// testAdmin returns a cluster admin of brokers, closed when the test ends.
func testAdmin(t *testing.T, brokers []string) sarama.ClusterAdmin {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	admin, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	return admin
}

// diffRepartition checks that the committed repartition records hold every
// input record exactly once, and each input partition's records in input
// order per repartition partition: what the aggregate's duplicate check
// relies on. Under exactly-once a member that lost an input partition
// cannot get a record in; a zombie's forwards interleaved with the new
// owner's would show here as duplicates or out-of-order offsets.
func diffRepartition(t *testing.T, c app.Config) error {
	t.Helper()
	client := testClient(t, c.Brokers)
	inParts, err := client.Partitions(c.InputTopic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", c.InputTopic, err)
	}
	type src struct {
		p int32
		o int64
	}
	seen := map[src]int{}
	var bad []string
	last := map[[2]int32]int64{} // (repartition p, input p) -> last input offset
	outOfOrder, dups := 0, 0
	for _, m := range readTopic(t, c.Brokers, c.EngineConfig(nil).Topics().Repartition) {
		sp, _ := findHeader(m.Headers, engine.HeaderSourcePartition)
		so, _ := findHeader(m.Headers, engine.HeaderSourceOffset)
		var s src
		if _, err := fmt.Sscan(sp, &s.p); err != nil {
			t.Fatalf("repartition %d/%d: source partition %q: %v", m.Partition, m.Offset, sp, err)
		}
		if _, err := fmt.Sscan(so, &s.o); err != nil {
			t.Fatalf("repartition %d/%d: source offset %q: %v", m.Partition, m.Offset, so, err)
		}
		if seen[s]++; seen[s] == 2 {
			if dups++; dups == 1 {
				t.Log(describeBatches(client, m.Topic, m.Partition, m.Offset))
				t.Logf("first duplicate: input %d/%d at repartition %d/%d", s.p, s.o, m.Partition, m.Offset)
			}
			if dups <= 3 {
				bad = append(bad, fmt.Sprintf("input %d/%d forwarded twice (again at repartition %d/%d)", s.p, s.o, m.Partition, m.Offset))
			}
		}
		k := [2]int32{m.Partition, s.p}
		if l, ok := last[k]; ok && s.o <= l {
			if outOfOrder++; outOfOrder <= 3 {
				bad = append(bad, fmt.Sprintf("repartition %d/%d: input %d/%d after input offset %d", m.Partition, m.Offset, s.p, s.o, l))
			}
		}
		last[k] = max(last[k], s.o)
	}
	missing := 0
	for _, p := range inParts {
		end, err := engineEnd(client, c.InputTopic, p)
		if err != nil {
			t.Fatalf("end of %s/%d: %v", c.InputTopic, p, err)
		}
		for o := int64(0); o < end; o++ {
			if seen[src{p, o}] == 0 {
				if missing++; missing <= 3 {
					bad = append(bad, fmt.Sprintf("input %d/%d never forwarded", p, o))
				}
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("repartition topic: %d input records missing, %d forwarded twice, %d out of order: %v", missing, dups, outOfOrder, bad)
}

// findHeader returns the value of the first header named key.
func findHeader(hs []*sarama.RecordHeader, key string) (string, bool) {
	for _, h := range hs {
		if h != nil && string(h.Key) == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// describeBatches describes the record batches of topic/p around offset
// at, as a read_committed fetch returns them (producer, epoch, control and
// transactional flags) with the aborted transactions the broker lists: the
// evidence when diffRepartition finds a record twice.
func describeBatches(client sarama.Client, topic string, p int32, at int64) string {
	broker, err := client.Leader(topic, p)
	if err != nil {
		return err.Error()
	}
	from := max(at-150, 0)
	req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 100, MinBytes: 1, MaxBytes: 1 << 20, Isolation: sarama.ReadCommitted}
	req.AddBlock(topic, p, from, 1<<20, -1)
	resp, err := broker.Fetch(req)
	if err != nil {
		return err.Error()
	}
	b := resp.GetBlock(topic, p)
	if b == nil {
		return "no block"
	}
	out := fmt.Sprintf("fetch %s/%d from %d: hwm %d lso %d aborted:", topic, p, from, b.HighWaterMarkOffset, b.LastStableOffset)
	for _, a := range b.AbortedTransactions {
		out += fmt.Sprintf(" (pid %d first %d)", a.ProducerID, a.FirstOffset)
	}
	for _, rs := range b.RecordsSet {
		rb := rs.RecordBatch
		if rb == nil || rb.FirstOffset > at+5 {
			break
		}
		if rb.Control && len(rb.Records) > 0 && len(rb.Records[0].Key) >= 4 {
			kind := "COMMIT"
			if rb.Records[0].Key[3] == 0 {
				kind = "ABORT"
			}
			out += fmt.Sprintf("\n  %s marker at %d pid %d epoch %d", kind, rb.FirstOffset, rb.ProducerID, rb.ProducerEpoch)
			continue
		}
		out += fmt.Sprintf("\n  batch %d..%d pid %d epoch %d txn %v records %d", rb.FirstOffset,
			rb.FirstOffset+int64(rb.LastOffsetDelta), rb.ProducerID, rb.ProducerEpoch, rb.IsTransactional, len(rb.Records))
	}
	return out
}

// produceAll produces count ratings over movies ids with seed into c's
// input topic, waits until the broker has them, and returns the truth.
func produceAll(t *testing.T, c app.Config, count, movies int64, seed uint64) map[int64]testkit.Movie {
	t.Helper()
	truth := map[int64]testkit.Movie{}
	producerInto(t, c, movies, truth, map[int64]float64{})(count, seed)
	return truth
}

// producerInto returns a function that produces count ratings over movies
// ids with seed into c's input topic, waits until the broker has them,
// and adds them to truth (sums holds the running sums truthOf needs).
// Call it from the test goroutine.
func producerInto(t *testing.T, c app.Config, movies int64, truth map[int64]testkit.Movie, sums map[int64]float64) func(count int64, seed uint64) {
	return func(count int64, seed uint64) {
		t.Helper()
		p := produceConfig(c, count, movies, seed)
		truthOf(p, truth, sums)
		if _, err := app.Produce(context.Background(), p, nil); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// waitOutputsExact waits until the group has committed every input and
// repartition offset, checks the last committed changelog record and
// average of every movie against truth (reporting differences as errors,
// prefixed with when), waits until the API at api (http://host:port)
// answers every movie exactly, and returns the instance's stats.
func waitOutputsExact(t *testing.T, c app.Config, api string, truth map[int64]testkit.Movie, when string) testkit.APIStats[engine.Stats] {
	t.Helper()
	waitCommitted(t, c, c.InputTopic)
	waitCommitted(t, c, c.EngineConfig(nil).Topics().Repartition)
	if err := diffTopics(t, c, truth); err != nil {
		t.Errorf("%s: %v", when, err)
	}
	waitAllExact(t, strings.TrimPrefix(api, "http://"), truth)
	var st testkit.APIStats[engine.Stats]
	if _, err := testkit.GetJSON(api+"/api/stats", &st); err != nil {
		t.Fatal(err)
	}
	return st
}
