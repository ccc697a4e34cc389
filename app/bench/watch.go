package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
)

// benchClient connects the benchmark's own Kafka client and a consumer on
// it: committed reads only, so that a transactional system's aborted
// records and commit markers are never taken for data.
func benchClient(brokers []string) (sarama.Client, sarama.Consumer, error) {
	sc := engine.NewSaramaConfig("keepstate-bench")
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Return.Errors = true
	sc.Consumer.Fetch.Default = 4 << 20
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: kafka %v: %w", app.ErrUnavailable, brokers, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, consumer, nil
}

// tailIdle is how long committedEnd waits for more records at a
// partition's tail before it takes the last one seen as the last committed
// record (the offsets after it being transaction markers or aborted
// records, which a read_committed consumer never returns).
const tailIdle = 300 * time.Millisecond

// committedEnd returns a partition's low watermark and the offset right
// after its last committed data record: what a consumer group that has
// processed everything commits, whether or not commit markers follow. It
// reads the partition's tail with read_committed, from a few records
// before the high watermark and further back while it finds none.
func committedEnd(ctx context.Context, client sarama.Client, consumer sarama.Consumer, topic string, p int32) (low, end int64, err error) {
	if low, err = client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
		return 0, 0, fmt.Errorf("low watermark of %s/%d: %w", topic, p, err)
	}
	hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
	if err != nil {
		return 0, 0, fmt.Errorf("high watermark of %s/%d: %w", topic, p, err)
	}
	for back := int64(16); ; back *= 16 {
		start := max(low, hwm-back)
		if start >= hwm {
			return low, low, nil
		}
		pc, err := consumer.ConsumePartition(topic, p, start)
		if err != nil {
			return 0, 0, fmt.Errorf("read the tail of %s/%d: %w", topic, p, err)
		}
		last := int64(-1)
		idle := time.NewTimer(5 * time.Second) // the first fetch may take a while
	read:
		for {
			select {
			case m := <-pc.Messages():
				last = m.Offset
				if last >= hwm-1 {
					break read
				}
				idle.Reset(tailIdle)
			case <-idle.C:
				break read
			case <-ctx.Done():
				idle.Stop()
				pc.Close()
				return 0, 0, ctx.Err()
			}
		}
		idle.Stop()
		pc.Close()
		if last >= 0 {
			return low, last + 1, nil
		}
		if start == low {
			// No committed record at all in the partition, or all of them
			// deleted: nothing to wait for beyond low.
			return low, low, nil
		}
	}
}

// DrainWatch waits until a consumer group has committed, on every
// partition of a set of topics, the end of its committed records (see
// committedEnd). A stage's topics are final (and their ends taken) only
// once every earlier stage is drained, as a repartition topic is.
type DrainWatch struct {
	Brokers []string
	Group   string
	// Stages are the topics in processing order, e.g. {{"ratings"},
	// {"app-ratings-by-movie-repartition"}}. The first stage must exist and
	// be complete when Wait starts.
	Stages [][]string
}

// DrainResult is what DrainWatch.Wait measured.
type DrainResult struct {
	At time.Time // of the first poll that saw every offset committed (polls are drainPoll apart)
}

// drainPoll is the pause between two reads of the committed offsets.
const drainPoll = 25 * time.Millisecond

type watchPart struct {
	topic    string
	p        int32
	stage    int
	low, end int64
}

// offsets are a group's committed offsets as fetched; nil: none yet.
type offsets = map[string]map[int32]*sarama.OffsetFetchResponseBlock

type watchPoll struct {
	at        time.Time
	committed offsets
}

// Wait polls until the group is drained or ctx ends. Once every stage's
// ends are read, it returns the first poll in its history that had every
// offset committed, so the time spent reading ends is not counted.
func (w DrainWatch) Wait(ctx context.Context) (DrainResult, error) {
	client, consumer, err := benchClient(w.Brokers)
	if err != nil {
		return DrainResult{}, err
	}
	defer client.Close()
	defer consumer.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return DrainResult{}, err
	}

	var parts []watchPart // of the stages whose ends are known
	known := 0            // stages whose ends are known
	var history []watchPoll
	satisfied := func(c offsets, stage int) bool {
		for _, wp := range parts {
			if stage >= 0 && wp.stage != stage {
				continue
			}
			if b, ok := c[wp.topic][wp.p]; !ok || b.Offset < 0 {
				if wp.end > wp.low {
					return false // nothing committed: fine only for an empty partition
				}
			} else if b.Offset < wp.end {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		at := time.Now()
		resp, err := admin.ListConsumerGroupOffsets(w.Group, nil)
		if err == nil && resp.Err != sarama.ErrNoError {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) && !errors.Is(err, sarama.ErrOffsetsLoadInProgress) {
			return DrainResult{}, fmt.Errorf("committed offsets of group %s: %w", w.Group, err)
		}
		var c offsets
		if err == nil {
			c = resp.Blocks
		}
		history = append(history, watchPoll{at: at, committed: c})
		// Take the ends of the next stage once every earlier one is drained.
		for known < len(w.Stages) && (known == 0 || satisfied(c, known-1)) {
			ps, err := w.stageEnds(ctx, client, consumer, known)
			if err != nil {
				return DrainResult{}, err
			}
			if ps == nil {
				break // a topic of the stage does not exist yet
			}
			parts = append(parts, ps...)
			known++
		}
		if known == len(w.Stages) {
			for _, h := range history {
				if satisfied(h.committed, -1) {
					return DrainResult{At: h.at}, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return DrainResult{}, fmt.Errorf("waiting for group %s to commit every offset: %w", w.Group, ctx.Err())
		case <-tick.C:
		}
	}
}

// stageEnds reads the ends of every partition of stage i, in parallel; it
// returns nil when one of its topics does not exist yet.
func (w DrainWatch) stageEnds(ctx context.Context, client sarama.Client, consumer sarama.Consumer, i int) ([]watchPart, error) {
	if err := client.RefreshMetadata(w.Stages[i]...); err != nil {
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) && i > 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("metadata of %v: %w", w.Stages[i], err)
	}
	var out []watchPart
	for _, topic := range w.Stages[i] {
		ps, err := client.Partitions(topic)
		if err != nil || len(ps) == 0 {
			if i > 0 {
				return nil, nil
			}
			return nil, fmt.Errorf("partitions of %s: %v", topic, err)
		}
		for _, p := range ps {
			out = append(out, watchPart{topic: topic, p: p, stage: i})
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(out))
	for j := range out {
		wg.Go(func() {
			out[j].low, out[j].end, errs[j] = committedEnd(ctx, client, consumer, out[j].topic, out[j].p)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
