package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/internal/testkit"
)

// saramaConfig is the client configuration keepstate uses: Kafka 3.6
// protocol, idempotent producer with one request in flight and acks=all,
// static group membership.
func saramaConfig(instanceID string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "keepstate-testkit"
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Net.MaxOpenRequests = 1
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.InstanceId = instanceID
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = time.Second
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	return cfg
}

// TestIntegrationSaramaSmoke runs sarama (admin, idempotent producer,
// static-membership consumer group) against kfake, or against Apache Kafka
// with KEEPSTATE_TEST_KAFKA=real.
func TestIntegrationSaramaSmoke(t *testing.T) {
	saramaSmoke(t, testkit.Kafka(t))
}

// TestKfakeSaramaAPIs runs the smoke scenario on kfake while recording
// every request sarama sends, checks that the scenario exercised the APIs
// keepstate depends on, and logs the versions used.
func TestKfakeSaramaAPIs(t *testing.T) {
	k := testkit.StartKfake(t)
	var mu sync.Mutex
	seen := map[int16]map[int16]bool{}
	k.Cluster().KeepControl()
	k.Cluster().Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if seen[req.Key()] == nil {
			seen[req.Key()] = map[int16]bool{}
		}
		seen[req.Key()][req.GetVersion()] = true
		return nil, nil, false
	})
	saramaSmoke(t, k.Brokers())

	mu.Lock()
	defer mu.Unlock()
	var keys []int
	for key := range seen {
		keys = append(keys, int(key))
	}
	sort.Ints(keys)
	for _, key := range keys {
		var vs []int
		for v := range seen[int16(key)] {
			vs = append(vs, int(v))
		}
		sort.Ints(vs)
		t.Logf("sarama sent %s (key %d) versions %v", kmsg.NameForKey(int16(key)), key, vs)
	}
	want := []kmsg.Key{
		kmsg.ApiVersions, kmsg.Metadata, kmsg.CreateTopics, kmsg.InitProducerID,
		kmsg.Produce, kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.SyncGroup,
		kmsg.OffsetFetch, kmsg.Fetch, kmsg.OffsetCommit, kmsg.ListOffsets,
		kmsg.DescribeGroups, kmsg.DescribeConfigs,
	}
	for _, key := range want {
		if len(seen[int16(key)]) == 0 {
			t.Errorf("sarama never sent %s: the smoke scenario no longer covers it", kmsg.NameForKey(int16(key)))
		}
	}
}

func saramaSmoke(t *testing.T, brokers []string) {
	const partitions = 3
	topic := testkit.UniqueName(t, "smoke")
	compacted := testkit.UniqueName(t, "smoke-changelog")
	defaulted := testkit.UniqueName(t, "smoke-default")
	group := testkit.UniqueName(t, "smoke-group")
	instance := testkit.UniqueName(t, "smoke-instance")
	cfg := saramaConfig(instance)

	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		t.Fatalf("NewClusterAdmin: %v", err)
	}
	defer admin.Close()

	compact := "compact"
	creates := []struct {
		name   string
		detail *sarama.TopicDetail
		want   int
	}{
		{topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, partitions},
		{compacted, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1,
			ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, partitions},
		// -1: the broker's default (num.partitions=3, kfake DefaultKfakePartitions).
		{defaulted, &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1}, testkit.DefaultKfakePartitions},
	}
	for _, c := range creates {
		if err := admin.CreateTopic(c.name, c.detail, false); err != nil {
			t.Fatalf("CreateTopic %s: %v", c.name, err)
		}
	}
	testkit.Eventually(t, 30*time.Second, "topics visible", func() error {
		md, err := admin.DescribeTopics([]string{topic, compacted, defaulted})
		if err != nil {
			return err
		}
		for i, m := range md {
			if !errors.Is(m.Err, sarama.ErrNoError) {
				return fmt.Errorf("%s: %w", m.Name, m.Err)
			}
			if got := len(m.Partitions); got != creates[i].want {
				return fmt.Errorf("%s: got %d partitions, want %d", m.Name, got, creates[i].want)
			}
		}
		return nil
	})
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Errorf("CreateTopic of an existing topic: got %v, want %v", err, sarama.ErrTopicAlreadyExists)
	}
	results, err := admin.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: compacted}},
		sarama.DescribeConfigsOptions{})
	if err != nil {
		t.Fatalf("DescribeConfigs %s: %v", compacted, err)
	}
	policy := ""
	for _, r := range results {
		if !errors.Is(r.ErrorCode, sarama.ErrNoError) {
			t.Fatalf("DescribeConfigs %s: %v %s", r.Name, r.ErrorCode, r.ErrorMsg)
		}
		for _, e := range r.Configs {
			if e.Name == "cleanup.policy" {
				policy = e.Value
			}
		}
	}
	if policy != "compact" {
		t.Errorf("%s cleanup.policy: got %q, want compact", compacted, policy)
	}

	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatalf("NewSyncProducer: %v", err)
	}
	defer producer.Close()
	sent := map[string]bool{}
	produce := func(from, to int) {
		t.Helper()
		next := map[int32]int64{}
		for i := from; i < to; i++ {
			v := "value-" + strconv.Itoa(i)
			msg := &sarama.ProducerMessage{Topic: topic, Partition: int32(i % partitions),
				Key: sarama.StringEncoder("k" + strconv.Itoa(i)), Value: sarama.StringEncoder(v)}
			p, off, err := producer.SendMessage(msg)
			if err != nil {
				t.Fatalf("SendMessage %d: %v", i, err)
			}
			if want, ok := next[p]; ok && off != want {
				t.Errorf("message %d on partition %d: got offset %d, want %d (gap or duplicate)", i, p, off, want)
			}
			next[p] = off + 1
			sent[v] = true
		}
	}
	produce(0, 30)

	// First member: consumes everything, commits, leaves.
	got := consumeGroup(t, brokers, cfg, group, topic, 30, admin, instance)
	for v := range sent {
		if !got[v] {
			t.Errorf("consumer group did not receive %q", v)
		}
	}
	testkit.Eventually(t, 20*time.Second, "offsets committed", func() error {
		resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
		if err != nil {
			return err
		}
		for p := int32(0); p < partitions; p++ {
			b := resp.GetBlock(topic, p)
			if b == nil {
				return fmt.Errorf("partition %d: no committed offset", p)
			}
			if b.Offset != 10 {
				return fmt.Errorf("partition %d: committed %d, want 10", p, b.Offset)
			}
		}
		return nil
	})

	// Same static member again: resumes from the committed offsets and
	// sees only the new records. The first member closed without leaving
	// the group (static members do not send LeaveGroup), so only static
	// membership lets it back in before the session timeout expires it.
	produce(30, 36)
	start := time.Now()
	got = consumeGroup(t, brokers, cfg, group, topic, 6, admin, instance)
	if took := time.Since(start); took >= cfg.Consumer.Group.Session.Timeout {
		t.Errorf("restarted static member took %v to consume, want < session timeout %v", took, cfg.Consumer.Group.Session.Timeout)
	} else {
		t.Logf("restarted static member consumed again after %v", took)
	}
	for i := 30; i < 36; i++ {
		if v := "value-" + strconv.Itoa(i); !got[v] {
			t.Errorf("restarted member did not receive %q", v)
		}
	}
	for v := range got {
		if n, _ := strconv.Atoi(v[len("value-"):]); n < 30 {
			t.Errorf("restarted member received %q again: committed offsets were not used", v)
		}
	}
}

// consumeGroup joins group with cfg, collects want distinct values from
// topic (failing after a deadline), checks that the member is listed with
// its static instance id, and closes the group.
func consumeGroup(t *testing.T, brokers []string, cfg *sarama.Config, group, topic string, want int,
	admin sarama.ClusterAdmin, instance string) map[string]bool {
	t.Helper()
	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		t.Fatalf("NewConsumerGroup: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &collector{values: make(chan string, 1000)}
	done := make(chan error, 1)
	go func() {
		var err error
		for ctx.Err() == nil && err == nil {
			err = cg.Consume(ctx, []string{topic}, h)
		}
		done <- err
	}()
	stop := func() error {
		cancel()
		err := <-done
		if cerr := cg.Close(); err == nil {
			err = cerr
		}
		return err
	}

	got := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(got) < want {
		select {
		case v := <-h.values:
			got[v] = true
		case err := <-done:
			done <- err
			_ = stop()
			t.Fatalf("consume stopped after %d of %d values: %v", len(got), want, err)
		case <-deadline:
			_ = stop()
			t.Fatalf("consumed %d of %d values in 60s", len(got), want)
		}
	}
	testkit.Eventually(t, 10*time.Second, "static member listed", func() error {
		ds, err := admin.DescribeConsumerGroups([]string{group})
		if err != nil {
			return err
		}
		if len(ds) != 1 || len(ds[0].Members) != 1 {
			return fmt.Errorf("got %+v, want one group with one member", ds)
		}
		for _, m := range ds[0].Members {
			if m.GroupInstanceId == nil || *m.GroupInstanceId != instance {
				return fmt.Errorf("member instance id %v, want %q", m.GroupInstanceId, instance)
			}
		}
		return nil
	})
	if err := stop(); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
		t.Fatalf("consumer group: %v", err)
	}
	// Drain values delivered after the count was reached.
	for {
		select {
		case v := <-h.values:
			got[v] = true
		default:
			return got
		}
	}
}

// collector is a sarama.ConsumerGroupHandler that sends every value to
// values and marks it consumed.
type collector struct{ values chan string }

func (*collector) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*collector) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (c *collector) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			c.values <- string(m.Value)
			s.MarkMessage(m, "")
		case <-s.Context().Done():
			return nil
		}
	}
}
