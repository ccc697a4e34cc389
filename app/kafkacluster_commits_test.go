//go:build unix

package app_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// commitStall is the longest time one of topics' partitions (3 each)
// committed no transaction within [from, until], measured by the
// timestamps of the partitions' COMMIT markers, which the partition
// leader writes with its own clock when the transaction's records become
// readable under read_committed. Unlike the polling monitor, it does not
// include the monitor's own failover (its requests to a paused leader
// time out before it finds the new one). where names the partition and
// ended is when that stall ended. With within, only the stalls that
// ended by until count (a stage of a fault, whose next stage's stall
// began before until).
func commitStall(ctx context.Context, brokers, topics []string, from, until time.Time, within bool) (stall time.Duration, where string, ended time.Time, err error) {
	for _, topic := range topics {
		for p := int32(0); p < 3; p++ {
			times, err := commitTimes(ctx, brokers, topic, p, from, until)
			if err != nil {
				return 0, "", time.Time{}, err
			}
			if within {
				times = slices.DeleteFunc(times, func(at time.Time) bool { return at.After(until) })
			}
			if g, at := longestCommitGap(times, from, until); g > stall {
				stall, where, ended = g, fmt.Sprintf("%s/%d", topic, p), at
			}
		}
	}
	return stall, where, ended, nil
}

// longestCommitGap returns the longest time between two commits (times,
// in order) that lies within [from, ...]: the first gap counts from from,
// and the gaps end with the first commit after until. It also returns
// when that gap ended.
func longestCommitGap(times []time.Time, from, until time.Time) (time.Duration, time.Time) {
	var worst time.Duration
	var ended time.Time
	prev := from
	for _, at := range times {
		if !at.After(from) {
			continue
		}
		if g := at.Sub(prev); g > worst {
			worst, ended = g, at
		}
		prev = at
		if at.After(until) {
			break
		}
	}
	return worst, ended
}

// commitTimes returns the timestamps of the COMMIT markers of topic/p,
// in offset order, from about 5 s before from until the first one after
// until (the partition is flowing again by until, so one comes).
func commitTimes(ctx context.Context, brokers []string, topic string, p int32, from, until time.Time) ([]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := kgo.NewOffset().AfterMilli(from.Add(-5 * time.Second).UnixMilli())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: start}}))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var times []time.Time
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("commit markers of %s/%d: none after %s: %w", topic, p, until.Format("15:04:05.000"), ctx.Err())
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			// A control record's key is its version and type (int16 each);
			// type 1 is COMMIT.
			if !r.Attrs.IsControl() || len(r.Key) < 4 || binary.BigEndian.Uint16(r.Key[2:4]) != 1 {
				continue
			}
			times = append(times, r.Timestamp)
			if r.Timestamp.After(until) {
				slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
				return times, nil
			}
		}
	}
}
