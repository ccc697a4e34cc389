package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keepstate/keepstate/internal/testkit"
)

// TestCommittedReaderForgetsAbortsBetweenFetches replays, with sarama's
// scripted broker, a state a real broker reaches only by timing: between two
// fetches of a restore, log compaction (delete.retention.ms elapsed) removed
// an aborted transaction's data and its ABORT marker. The partition's next
// owner writes with the same transactional id, so the same producer id (with
// a bumped epoch). The reader must neither deliver the aborted record (it
// never sees its marker) nor skip the next owner's committed ones (an earlier
// reader kept the producer "aborted" for good and lost every later record
// of the partition: found by the chaos test on Apache Kafka). Apache Kafka
// cannot be made to clean at that instant, hence the script.
func TestCommittedReaderForgetsAbortsBetweenFetches(t *testing.T) {
	const (
		topic = "changelog"
		pid   = 42
	)
	mb := sarama.NewMockBroker(t, 1)
	defer mb.Close()

	// Fetch 1, from 0: a committed transaction (0, marker 1) and the first
	// batch of an aborted one (2), listed as aborted from offset 2.
	first := &sarama.FetchResponse{Version: fetchVersion}
	first.AddRecordBatch(topic, 0, sarama.StringEncoder("a"), sarama.StringEncoder("1"), 0, pid, true)
	first.AddControlRecord(topic, 0, 1, pid, sarama.ControlRecordCommit)
	first.AddRecordBatch(topic, 0, sarama.StringEncoder("a"), sarama.StringEncoder("zombie"), 2, pid, true)
	b := first.GetBlock(topic, 0)
	b.AbortedTransactions = []*sarama.AbortedTransaction{{ProducerID: pid, FirstOffset: 2}}
	b.HighWaterMarkOffset, b.LastStableOffset = 6, 6

	// Fetch 2, from 3: the ABORT marker (3) is gone; the next owner's
	// committed transaction (4, marker 5) follows, under the same producer id.
	second := &sarama.FetchResponse{Version: fetchVersion}
	second.AddRecordBatch(topic, 0, sarama.StringEncoder("a"), sarama.StringEncoder("2"), 4, pid, true)
	second.AddControlRecord(topic, 0, 5, pid, sarama.ControlRecordCommit)
	b = second.GetBlock(topic, 0)
	b.HighWaterMarkOffset, b.LastStableOffset = 6, 6
	for _, rs := range b.RecordsSet {
		rs.RecordBatch.ProducerEpoch = 1 // the next owner's producer initialisation bumped it
	}

	client := scriptedClient(t, mb, topic, sarama.NewMockSequence(first, second))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	r := committedReader{client: client, topic: topic, p: 0}
	err := r.read(ctx, 0, 6, func(rec CommittedRecord) error {
		got = append(got, string(rec.Key)+"="+string(rec.Value))
		return nil
	})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if want := []string{"a=1", "a=2"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v (the aborted record skipped, the next owner's kept)", got, want)
	}
}

// TestCommittedReaderStepsOverEmptiedBatches replays what a restore met on
// Apache Kafka: the read of a cleaned segment returned only a batch whose
// records compaction had removed (Kafka keeps a producer's last batch
// header). sarama drops such batches from the response; the reader must
// still move past them rather than fetch the same offset until it gives up.
func TestCommittedReaderStepsOverEmptiedBatches(t *testing.T) {
	const (
		topic = "changelog"
		pid   = 7
	)
	mb := sarama.NewMockBroker(t, 1)
	defer mb.Close()

	// Offsets 0..2: one batch, all three records removed by compaction.
	resp := &sarama.FetchResponse{Version: fetchVersion}
	resp.AddRecordBatch(topic, 0, sarama.StringEncoder("a"), sarama.StringEncoder("1"), 0, pid, true)
	b := resp.GetBlock(topic, 0)
	rb := b.RecordsSet[0].RecordBatch
	rb.Records, rb.LastOffsetDelta = nil, 2
	b.HighWaterMarkOffset, b.LastStableOffset = 3, 3

	client := scriptedClient(t, mb, topic, sarama.NewMockWrapper(resp))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got int
	r := committedReader{client: client, topic: topic, p: 0}
	if err := r.read(ctx, 0, 3, func(CommittedRecord) error { got++; return nil }); err != nil {
		t.Fatalf("read: %v (want it to step past the emptied batch)", err)
	}
	if got != 0 {
		t.Errorf("delivered %d records, want 0", got)
	}
	if n := len(mb.History()); n > 3 {
		t.Errorf("%d requests, want at most 3 (metadata, one fetch)", n)
	}
}

// scriptedClient points mb at topic/0 (mb leads it) with fetch answering
// fetches, and returns a client of mb, closed when the test ends.
func scriptedClient(t *testing.T, mb *sarama.MockBroker, topic string, fetch sarama.MockResponse) sarama.Client {
	t.Helper()
	mb.SetHandlerByMap(map[string]sarama.MockResponse{
		"MetadataRequest": sarama.NewMockMetadataResponse(t).
			SetBroker(mb.Addr(), mb.BrokerID()).
			SetLeader(topic, 0, mb.BrokerID()),
		"FetchRequest": fetch,
	})
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	sc.ApiVersionsRequest = false // the scripted broker does not negotiate
	client, err := sarama.NewClient([]string{mb.Addr()}, sc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// TestListOffsetWaitsForLeader: a request for a partition's offsets that
// finds no leader (an election after a broker's loss) is retried until one
// answers, so a restore or a standby waits through a leader failover
// instead of failing (which restarted the whole group session).
func TestListOffsetWaitsForLeader(t *testing.T) {
	k := testkit.StartKfake(t, testkit.WithTopics(1, "t"))
	var refused atomic.Int32
	k.Cluster().ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		if refused.Load() >= 3 {
			return nil, nil, false
		}
		refused.Add(1)
		r := req.(*kmsg.ListOffsetsRequest)
		resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	client, err := sarama.NewClient(k.Brokers(), NewSaramaConfig("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := listOffset(ctx, client, "t", 0, sarama.OffsetNewest, sarama.ReadCommitted, "last stable offset")
	if err != nil || got != 0 {
		t.Fatalf("listOffset while the leader is away: got %d, %v; want 0, nil", got, err)
	}
	if n := refused.Load(); n != 3 {
		t.Errorf("requests refused: got %d, want 3", n)
	}
}
