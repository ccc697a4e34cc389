package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/internal/testkit"
)

// TestE2EDepartedOwnerTransactionFenced: b is killed (kill -9) while
// transactions of its input partitions hold uncommitted offsets: the test
// makes sure of it by opening b's rekey transactional ids itself, as b's
// last act, and adding those partitions' offsets to transactions it never
// ends, with a two-minute transaction timeout. The group's offset fetch
// of such a partition waits until its transaction ends, and the next
// session starts only once every partition's offsets are fetched. The
// group's leader fences the transactions of a departed owner before it
// hands out the plan, so a takes over b's partitions within the session
// timeout plus a few seconds (without the fence: about 10 s on kfake, which
// ends such a transaction early, and two minutes on Apache Kafka); every
// output is exact.
func TestE2EDepartedOwnerTransactionFenced(t *testing.T) {
	g := newFaultGroup(t, 6000, []string{"a", "b"}, nil)
	b := g.live[1]
	ins := inputsOf(t, g.c, "b")
	if len(ins) == 0 {
		t.Fatal("b reads no input partition")
	}
	b.proc.Kill()
	g.remove(b)
	began := time.Now()
	holdOffsets(t, g.c, ins)
	g.balanced("a alone after b's kill", 3*time.Minute)
	took := time.Since(began)
	if limit := faultSession + 4*time.Second; took > limit {
		t.Errorf("a ran every partition %v after b's kill, want at most %v (the session timeout + 4 s): a transaction holding offsets was left to end by itself", took, limit)
	} else {
		t.Logf("a ran every partition %v after b's kill, with offsets of b's input partitions %v held by open transactions", took.Round(time.Millisecond), ins)
	}
	if err := g.send(2000, 2); err != nil {
		t.Fatalf("produce: %v", err)
	}
	g.exact("after b's kill")
}

// txnClient is a Kafka client for raw requests, capped at Kafka 3.7's
// request versions (topics by name).
func txnClient(t *testing.T, c app.Config) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.MaxVersions(kversion.V3_7_0()))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// inputsOf returns the input partitions assigned to the group member with
// instance id instance.
func inputsOf(t *testing.T, c app.Config, instance string) []int32 {
	t.Helper()
	cl := txnClient(t, c)
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{c.ApplicationID}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || len(resp.Groups) != 1 {
		t.Fatalf("describe group %s: %v (%d groups)", c.ApplicationID, err, len(resp.Groups))
	}
	for _, m := range resp.Groups[0].Members {
		if m.InstanceID == nil || *m.InstanceID != instance {
			continue
		}
		var asg kmsg.ConsumerMemberAssignment
		if err := asg.ReadFrom(m.MemberAssignment); err != nil {
			t.Fatalf("assignment of %s: %v", instance, err)
		}
		for _, tp := range asg.Topics {
			if tp.Topic == c.InputTopic {
				return slices.Sorted(slices.Values(tp.Partitions))
			}
		}
	}
	return nil
}

// holdOffsets opens the rekey transactional id of each input partition in
// ps (fencing its owner and aborting its open transaction) and adds an
// offset of the partition to a transaction it never ends.
func holdOffsets(t *testing.T, c app.Config, ps []int32) {
	t.Helper()
	cl := txnClient(t, c)
	ctx := context.Background()
	topics := c.EngineConfig(nil).Topics()
	for _, p := range ps {
		id := topics.RekeyTransactionalID(p)
		init := kmsg.NewPtrInitProducerIDRequest()
		init.TransactionalID = &id
		init.TransactionTimeoutMillis = int32((2 * time.Minute) / time.Millisecond)
		var pid int64
		var epoch int16
		testkit.Eventually(t, 30*time.Second, "producer id of "+id, func() error {
			resp, err := init.RequestWith(ctx, cl)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode) // CONCURRENT_TRANSACTIONS while b's is aborted
				pid, epoch = resp.ProducerID, resp.ProducerEpoch
			}
			return err
		})
		add := kmsg.NewPtrAddOffsetsToTxnRequest()
		add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = id, pid, epoch, c.ApplicationID
		if resp, err := add.RequestWith(ctx, cl); err != nil || resp.ErrorCode != 0 {
			t.Fatalf("add offsets to %s: %v", id, errors.Join(err, kerr.ErrorForCode(resp.ErrorCode)))
		}
		commit := kmsg.NewPtrTxnOffsetCommitRequest()
		commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch, commit.Generation = id, c.ApplicationID, pid, epoch, -1
		tp := kmsg.NewTxnOffsetCommitRequestTopic()
		tp.Topic = c.InputTopic
		part := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		part.Partition, part.Offset = p, 0
		tp.Partitions = append(tp.Partitions, part)
		commit.Topics = append(commit.Topics, tp)
		resp, err := commit.RequestWith(ctx, cl)
		if err == nil && (len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1) {
			err = fmt.Errorf("answer for %d topics", len(resp.Topics))
		}
		if err == nil {
			err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
		}
		if err != nil {
			t.Fatalf("offset of %s/%d in transaction %s: %v", c.InputTopic, p, id, err)
		}
	}
}
