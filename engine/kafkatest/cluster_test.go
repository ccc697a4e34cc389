package kafkatest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/kafkatest"
)

func txnConfig(id string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Producer.Transaction.ID = id
	return cfg
}

func newTopic(t *testing.T, c *kafkatest.Cluster, name string, n int32) {
	t.Helper()
	if err := c.CreateTopic(name, n); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func producer(t *testing.T, c *kafkatest.Cluster, id string) sarama.SyncProducer {
	t.Helper()
	p, err := c.NewSyncProducer(txnConfig(id))
	if err != nil {
		t.Fatalf("producer %s: %v", id, err)
	}
	return p
}

func send(t *testing.T, p sarama.SyncProducer, topic string, values ...string) {
	t.Helper()
	var msgs []*sarama.ProducerMessage
	for _, v := range values {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// committedValues reads topic/0 through the engine.Log as a restore does.
func committedValues(t *testing.T, c *kafkatest.Cluster, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := c.NewLog(nil)
	start, err := l.Start(ctx, topic, 0)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	end, err := l.StableEnd(ctx, topic, 0)
	if err != nil {
		t.Fatalf("stable end: %v", err)
	}
	var out []string
	err = l.ReadCommitted(ctx, topic, 0, start, end, func(r engine.CommittedRecord) error {
		out = append(out, string(r.Value))
		return nil
	})
	if err != nil {
		t.Fatalf("read committed: %v", err)
	}
	return out
}

func TestTransactionsAreInvisibleUntilCommit(t *testing.T) {
	c := kafkatest.New()
	newTopic(t, c, "t", 1)
	p := producer(t, c, "x")
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	send(t, p, "t", "a", "b")
	if got, _ := c.CommittedRecords("t", 0); len(got) != 0 {
		t.Fatalf("committed records of an open transaction: got %d, want 0", len(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := c.NewLog(nil).StableEnd(ctx, "t", 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StableEnd with an open transaction: got %v, want a deadline error", err)
	}
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	send(t, p, "t", "aborted")
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if got, want := committedValues(t, c, "t"), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("committed values: got %q, want %q", got, want)
	}
	recs, _ := c.Records("t", 0)
	var states []kafkatest.RecordState
	for _, r := range recs {
		states = append(states, r.State)
	}
	want := []kafkatest.RecordState{kafkatest.Committed, kafkatest.Committed, kafkatest.Marker, kafkatest.Aborted, kafkatest.Marker}
	if !slices.Equal(states, want) {
		t.Errorf("record states: got %v, want %v", states, want)
	}
}

func TestNewProducerFencesTheOldOne(t *testing.T) {
	c := kafkatest.New()
	newTopic(t, c, "t", 1)
	old := producer(t, c, "x")
	if err := old.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	send(t, old, "t", "zombie")
	_ = producer(t, c, "x")
	if err := old.CommitTxn(); !errors.Is(err, sarama.ErrProducerFenced) {
		t.Errorf("commit of the fenced producer: got %v, want %v", err, sarama.ErrProducerFenced)
	}
	if err := old.BeginTxn(); !errors.Is(err, sarama.ErrProducerFenced) {
		t.Errorf("begin of the fenced producer: got %v, want %v", err, sarama.ErrProducerFenced)
	}
	if st := old.TxnStatus(); st&sarama.ProducerTxnFlagFatalError == 0 {
		t.Errorf("status of the fenced producer: got %v, want the fatal flag", st)
	}
	if got := committedValues(t, c, "t"); len(got) != 0 {
		t.Errorf("committed values: got %q, want none (the zombie's transaction is aborted)", got)
	}
}

// recorder hands over the first session it sets up.
type recorder struct {
	once sync.Once
	ch   chan sarama.ConsumerGroupSession
}

func (r *recorder) Setup(s sarama.ConsumerGroupSession) error {
	r.once.Do(func() { r.ch <- s })
	return nil
}
func (r *recorder) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (r *recorder) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	<-s.Context().Done()
	return nil
}

// join runs a member of group (advertising addr) in the background until
// ctx ends, rejoining after each session; it returns the member's first
// session and the results of its Consume calls.
func join(t *testing.T, ctx context.Context, c *kafkatest.Cluster, group, addr string) (sarama.ConsumerGroupSession, <-chan error) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Consumer.Group.Member.UserData = []byte(addr)
	cg, err := c.NewConsumerGroup(group, cfg)
	if err != nil {
		t.Fatalf("consumer group: %v", err)
	}
	r := &recorder{ch: make(chan sarama.ConsumerGroupSession, 1)}
	done := make(chan error, 100)
	go func() {
		defer cg.Close()
		for ctx.Err() == nil {
			done <- cg.Consume(ctx, []string{"t"}, r)
		}
	}()
	select {
	case s := <-r.ch:
		return s, done
	case <-time.After(5 * time.Second):
		t.Fatalf("no session for %s", addr)
	}
	return nil, nil
}

func TestOffsetsCommitWithTheTransactionAndAreFencedByGeneration(t *testing.T) {
	c := kafkatest.New()
	newTopic(t, c, "t", 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, done := join(t, ctx, c, "g", "a:1")
	if got, want := s.Claims()["t"], []int32{0, 1}; !slices.Equal(got, want) {
		t.Fatalf("claims of the only member: got %v, want %v", got, want)
	}
	meta := sarama.NewConsumerGroupMetadataFromSession(s, "g", nil)
	offsets := map[string][]*sarama.PartitionOffsetMetadata{"t": {{Partition: 0, Offset: 7}}}

	p := producer(t, c, "x")
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := p.AddOffsetsToTxnWithGroupMetadata(offsets, meta); err != nil {
		t.Fatalf("add offsets: %v", err)
	}
	if _, ok := c.CommittedOffset("g", "t", 0); ok {
		t.Fatalf("offset committed before the transaction commits")
	}
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got, ok := c.CommittedOffset("g", "t", 0); !ok || got != 7 {
		t.Fatalf("committed offset: got %d (%v), want 7", got, ok)
	}

	// A second member joins: the first session ends, the generation moves on.
	s2, _ := join(t, ctx, c, "g", "b:2")
	if err := <-done; err != nil {
		t.Fatalf("first session: %v", err)
	}
	if s2.GenerationID() <= s.GenerationID() {
		t.Fatalf("generation after a join: got %d, want > %d", s2.GenerationID(), s.GenerationID())
	}
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	offsets["t"][0].Offset = 9
	if err := p.AddOffsetsToTxnWithGroupMetadata(offsets, meta); err != nil {
		t.Fatalf("add offsets: %v", err)
	}
	err := p.CommitTxn()
	if !errors.Is(err, sarama.ErrIllegalGeneration) && !errors.Is(err, sarama.ErrUnknownMemberId) {
		t.Fatalf("commit with the old generation: got %v, want ErrIllegalGeneration or ErrUnknownMemberId", err)
	}
	if st := p.TxnStatus(); st&sarama.ProducerTxnFlagAbortableError == 0 {
		t.Errorf("status after a refused offset commit: got %v, want abortable", st)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if got, _ := c.CommittedOffset("g", "t", 0); got != 7 {
		t.Errorf("committed offset after the refused commit: got %d, want 7", got)
	}

	admin, _ := c.NewClusterAdmin(nil)
	groups, err := admin.DescribeConsumerGroups([]string{"g"})
	if err != nil || len(groups) != 1 {
		t.Fatalf("describe: %v, %d groups", err, len(groups))
	}
	owners := map[int32]string{}
	for _, m := range groups[0].Members {
		md, err := m.GetMemberMetadata()
		if err != nil {
			t.Fatalf("member metadata: %v", err)
		}
		asg, err := m.GetMemberAssignment()
		if err != nil || asg == nil {
			t.Fatalf("member assignment: %v", err)
		}
		for _, p := range asg.Topics["t"] {
			owners[p] = string(md.UserData)
		}
	}
	if len(owners) != 2 || owners[0] == owners[1] {
		t.Errorf("owners after the second join: got %v, want each partition owned by another member", owners)
	}
}

func TestFailNextInjectsOnce(t *testing.T) {
	c := kafkatest.New()
	newTopic(t, c, "t", 1)
	p := producer(t, c, "x")
	boom := errors.New("boom")
	c.FailNext(kafkatest.Op{Kind: kafkatest.OpSend, Topic: "t"}, boom)
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	err := p.SendMessages([]*sarama.ProducerMessage{{Topic: "t", Value: sarama.StringEncoder("v")}})
	var pes sarama.ProducerErrors
	if !errors.As(err, &pes) || len(pes) != 1 || !errors.Is(pes[0].Err, boom) {
		t.Fatalf("send: got %v, want ProducerErrors of %v", err, boom)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	send(t, p, "t", "v")
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	var kinds []string
	for _, e := range c.Events() {
		kinds = append(kinds, e.String())
	}
	want := []string{"begin x", "send x t err=boom", "abort x", "begin x", "send x t", "commit x"}
	if !slices.Equal(kinds, want) {
		t.Errorf("events:\n got %q\nwant %q", kinds, want)
	}
}
