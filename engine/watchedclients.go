package engine

import (
	"errors"
	"maps"
	"slices"

	"github.com/IBM/sarama"
)

// A client looks its partition leaders and coordinators up again only
// after a request to one failed: once Kafka has fenced a broker, an idle
// client's first request still goes to it and waits out a retry backoff.
// So the watch keeps the engine's clients and, when it fences a broker,
// has each look its leaders and coordinators up again at once.

// watchedClient is a client the watch refreshes on a fence; group, when
// set, is the consumer group whose coordinator it looks up again too (the
// group's own client, and the transactional producers, which commit
// offsets to it).
type watchedClient struct {
	c     sarama.Client
	group string
}

// track adds c to the clients a fence refreshes (see refreshClients) and
// returns the function that removes it. Safe for concurrent use.
func (w *brokerWatch) track(c sarama.Client, group string) (untrack func()) {
	wc := &watchedClient{c: c, group: group}
	w.mu.Lock()
	if w.clients == nil {
		w.clients = map[*watchedClient]struct{}{}
	}
	w.clients[wc] = struct{}{}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.clients, wc)
		w.mu.Unlock()
	}
}

// refreshClients has every tracked client refresh its metadata, its
// transaction coordinator and its group's coordinator, each client in a
// goroutine of its own (a refresh takes one request to a live broker).
func (w *brokerWatch) refreshClients() {
	w.mu.Lock()
	cs := slices.Collect(maps.Keys(w.clients))
	w.mu.Unlock()
	for _, wc := range cs {
		go func() {
			_ = wc.c.RefreshMetadata()
			if id := wc.c.Config().Producer.Transaction.ID; id != "" {
				_ = wc.c.RefreshTransactionCoordinator(id)
			}
			if wc.group != "" {
				_ = wc.c.RefreshCoordinator(wc.group)
			}
		}()
	}
}

// trackedClient is a client the watch refreshes until it is closed.
type trackedClient struct {
	sarama.Client
	untrack func()
}

// Close stops the refreshes and closes the client.
func (c *trackedClient) Close() error {
	c.untrack()
	return c.Client.Close()
}

// trackedProducer is a producer over a client of its own, which the watch
// refreshes until the producer is closed.
type trackedProducer struct {
	sarama.SyncProducer
	client  sarama.Client
	untrack func()
}

// Close closes the producer, then its client.
func (p *trackedProducer) Close() error {
	p.untrack()
	err := p.SyncProducer.Close()
	if cerr := p.client.Close(); err == nil && cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) {
		err = cerr
	}
	return err
}
