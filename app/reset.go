package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
)

// ErrGroupActive means reset was refused because instances are running.
var ErrGroupActive = errors.New("application instances are running")

// Reset is `keepstate reset`: it wipes the store's state so that the next
// start rebuilds it from the changelog. With reprocess it also deletes the
// internal topics and the group's committed offsets, so the next start
// recomputes everything from the earliest input. It refuses while any
// instance of the application is a member of the consumer group.
func Reset(ctx context.Context, c Config, reprocess bool, log *slog.Logger) error {
	if err := c.Validate(); err != nil {
		return err
	}
	log = discardLogger(log)
	sc := engine.NewSaramaConfig(c.ApplicationID + "-reset")
	admin, err := sarama.NewClusterAdmin(c.Brokers, sc)
	if err != nil {
		return fmt.Errorf("%w: kafka %v: %w; start Kafka or set --brokers", ErrUnavailable, c.Brokers, err)
	}
	defer admin.Close()
	groups, err := admin.DescribeConsumerGroups([]string{c.ApplicationID})
	if err != nil {
		return fmt.Errorf("describe group %s: %w", c.ApplicationID, err)
	}
	for _, g := range groups {
		if len(g.Members) > 0 {
			return fmt.Errorf("%w: consumer group %q has %d member(s) (state %s); stop every instance first (a killed instance leaves after its session timeout)",
				ErrGroupActive, c.ApplicationID, len(g.Members), g.State)
		}
	}
	store, err := OpenStore(ctx, c, log)
	if err != nil {
		return err
	}
	defer store.Close()
	r, ok := store.(engine.Resetter)
	if !ok {
		return fmt.Errorf("store %s cannot be reset", c.Store)
	}
	if err := r.Reset(ctx); err != nil {
		return fmt.Errorf("reset store: %w", err)
	}
	log.Info("store reset; the next start restores from the changelog", "store", c.Store)
	if !reprocess {
		return nil
	}
	t := c.EngineConfig(log).Topics()
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
	if err := admin.DeleteConsumerGroup(c.ApplicationID); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
		return fmt.Errorf("delete consumer group %s: %w", c.ApplicationID, err)
	}
	log.Info("group offsets deleted; the next start reprocesses the input from the beginning", "group", c.ApplicationID)
	return nil
}
