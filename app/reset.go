package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/docstore"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/movies"
)

// ErrGroupActive means reset was refused because instances are running.
var ErrGroupActive = errors.New("application instances are running")

// Reset is `keepstate reset`: ResetJobs for the movie job.
func Reset(ctx context.Context, c Config, reprocess bool, log *slog.Logger) error {
	return ResetJobs(ctx, c, reprocess, log, Movies())
}

// ResetJobs wipes the tables of jobs (and no other) in the store, so that
// their next start (RunJobs with the same c) rebuilds them from their
// changelogs. With reprocess it also deletes each job's internal topics and
// its group's committed offsets, so the next start recomputes everything
// from the earliest input. It refuses with ErrGroupActive, before changing
// anything, while any job's group has a member (an instance still running,
// or a static member within its session timeout).
func ResetJobs(ctx context.Context, c Config, reprocess bool, log *slog.Logger, jobs ...Job) error {
	if err := cmp.Or(c.Validate(), checkJobs(jobs)); err != nil {
		return err
	}
	log = discardLogger(log)
	configs := make([]engine.Config, len(jobs))
	groups := make([]string, len(jobs))
	for i, j := range jobs {
		configs[i] = j.engineConfig(c, log)
		groups[i] = configs[i].ApplicationID
	}
	sc := engine.NewSaramaConfig(c.ApplicationID + "-reset")
	admin, err := sarama.NewClusterAdmin(c.Brokers, sc)
	if err != nil {
		return fmt.Errorf("%w: kafka %v: %w; start Kafka or set --brokers", ErrUnavailable, c.Brokers, err)
	}
	defer admin.Close()
	described, err := admin.DescribeConsumerGroups(groups)
	if err != nil {
		return fmt.Errorf("describe groups %v: %w", groups, err)
	}
	for _, g := range described {
		if len(g.Members) > 0 {
			return fmt.Errorf("%w: consumer group %q has %d member(s) (state %s); stop every instance first (a killed instance leaves after its session timeout)",
				ErrGroupActive, g.GroupId, len(g.Members), g.State)
		}
	}
	if c.Store == StoreClover {
		// A store of the old bbolt format is not read any more: reset
		// deletes it, and the next start restores from the changelog.
		if removed, err := docstore.RemoveOldStore(c.DataDir); err != nil {
			return err
		} else if removed {
			log.Info("removed the store of the old bbolt format", "dir", c.DataDir)
		}
	}
	store, err := OpenStore(ctx, c, log)
	if err != nil {
		return err
	}
	defer store.Close()
	for i, j := range jobs {
		if err := j.resetState(ctx, c, store, admin, configs[i].Topics().Repartition); err != nil {
			return err
		}
		log.Info("state reset; the next start restores it from the changelog", "job", j.name(), "store", c.Store)
	}
	if !reprocess {
		return nil
	}
	for i, j := range jobs {
		if err := deleteInternal(ctx, admin, configs[i].Topics(), groups[i], log); err != nil {
			return fmt.Errorf("job %s: %w", j.name(), err)
		}
	}
	return nil
}

// resetState wipes j's table (engine.TableResetter), keeping its spec and
// epochs, and what an older key layout left of it. A partitionedStore opens
// it with the partition count of its repartition topic, or 1 when the
// topic is gone: a reset does not depend on it.
func (j Job) resetState(ctx context.Context, c Config, store Store, admin sarama.ClusterAdmin, repartition string) error {
	spec := movies.Spec
	if !j.movies {
		spec = j.runner.Spec()
	}
	if r, ok := store.(oldLayoutRemover); ok {
		if _, err := r.RemoveOldLayout(ctx, spec.Name); err != nil {
			return fmt.Errorf("job %s: %w", j.name(), err)
		}
	}
	if ps, ok := store.(partitionedStore); ok && ps.NeedsPartitions() {
		spec.Partitions = 1
		md, err := admin.DescribeTopics([]string{repartition})
		if err != nil {
			return fmt.Errorf("%w: describe topic %s: %w", ErrUnavailable, repartition, err)
		}
		if len(md) == 1 && md[0].Err == sarama.ErrNoError && len(md[0].Partitions) > 0 {
			spec.Partitions = int32(len(md[0].Partitions))
		}
	}
	// The job's indexes changed: a reset keeps the table's spec, so the
	// table has to go (its rows and spec) instead.
	t, err := j.openTable(ctx, store, spec, "a reset keeps the table's indexes: delete the table instead")
	if err != nil {
		return err
	}
	r, ok := t.(engine.TableResetter)
	if !ok {
		return fmt.Errorf("%w: the tables of store %s cannot be reset", ErrConfig, c.Store)
	}
	if err := r.Reset(ctx); err != nil {
		return fmt.Errorf("job %s: reset table: %w", j.name(), err)
	}
	return nil
}

// deleteInternal deletes the repartition and changelog topics of t and
// waits until they are gone, then deletes group (its committed offsets).
func deleteInternal(ctx context.Context, admin sarama.ClusterAdmin, t engine.Topics, group string, log *slog.Logger) error {
	for _, topic := range []string{t.Repartition, t.Changelog} {
		err := admin.DeleteTopic(topic)
		if err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return fmt.Errorf("delete topic %s: %w", topic, err)
		}
		log.Info("deleted internal topic", "topic", topic)
	}
	// Topic deletion is asynchronous: wait until the topics are gone, so
	// that the next start creates them afresh instead of finding them
	// half-deleted.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		topics, err := admin.ListTopics()
		if err != nil {
			return fmt.Errorf("list topics: %w", err)
		}
		_, rp := topics[t.Repartition]
		_, cl := topics[t.Changelog]
		if !rp && !cl {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("internal topics %s and %s still exist 2 minutes after their deletion", t.Repartition, t.Changelog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := admin.DeleteConsumerGroup(group); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
		return fmt.Errorf("delete consumer group %s: %w", group, err)
	}
	log.Info("group offsets deleted; the next start reprocesses the input from the beginning", "group", group)
	return nil
}
