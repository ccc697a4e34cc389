package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/keepstate/keepstate/engine"
)

// Record is one record SendRecords sends: its key (nil for none) and value.
type Record struct {
	Key, Value []byte
}

// Sender configures SendRecords.
type Sender struct {
	Brokers    []string
	Topic      string
	Partitions int32        // of the topic when SendRecords creates it
	Rate       float64      // records per second at most; 0: as fast as the broker takes them
	ClientID   string       // names the producer in the brokers' logs
	Log        *slog.Logger // receives a summary; nil discards it
}

// SendRecords sends the records next returns to s.Topic (creating it when
// missing) until next reports no more (ok false) or fails, or ctx ends,
// with an idempotent producer, acks=all and Java's default partitioner. It
// returns how many records the broker acknowledged, and next's error or
// the first send error.
func SendRecords(ctx context.Context, s Sender, next func() (Record, bool, error)) (int64, error) {
	log := discardLogger(s.Log)
	sc := engine.NewSaramaConfig(s.ClientID)
	sc.Producer.Return.Successes = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Idempotent = true
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Partitioner = engine.NewJavaPartitioner
	if err := EnsureTopic(s.Brokers, sc, s.Topic, s.Partitions); err != nil {
		return 0, err
	}
	prod, err := sarama.NewAsyncProducer(s.Brokers, sc)
	if err != nil {
		return 0, fmt.Errorf("%w: kafka %v: %w; start Kafka or set --brokers (try `keepstate demo`)", ErrUnavailable, s.Brokers, err)
	}
	var sent, acked int64
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case _, ok := <-prod.Successes():
				if !ok {
					return
				}
				acked++
			case perr, ok := <-prod.Errors():
				if !ok {
					return
				}
				if firstErr == nil {
					firstErr = perr.Err
				}
			}
		}
	}()
	start := time.Now()
	var readErr error
	for ctx.Err() == nil {
		r, ok, err := next()
		if readErr = err; err != nil || !ok {
			break
		}
		m := &sarama.ProducerMessage{Topic: s.Topic, Value: sarama.ByteEncoder(r.Value)}
		if r.Key != nil {
			m.Key = sarama.ByteEncoder(r.Key)
		}
		select {
		case prod.Input() <- m:
			sent++
		case <-ctx.Done():
		}
		if s.Rate > 0 {
			due := start.Add(time.Duration(float64(sent) / s.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
		}
	}
	prod.AsyncClose()
	<-done
	log.Info("produced records", "topic", s.Topic, "sent", sent, "acknowledged", acked, "took", time.Since(start))
	switch {
	case readErr != nil:
		return acked, readErr
	case firstErr != nil:
		return acked, fmt.Errorf("produce to %s: %w", s.Topic, firstErr)
	}
	return acked, nil
}
