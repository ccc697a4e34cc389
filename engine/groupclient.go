package engine

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// newSaramaGroup joins consumer group group with sarama on a client of its
// own, dialed so that the loss of the group coordinator does not end the
// session.
//
// sarama's heartbeat loop (consumer_group_session.go, heartbeatLoop)
// answers a heartbeat that failed on the connection (the coordinator's
// broker died: connection reset, then refused) by trying again at once, on
// the client's cached coordinator, without refreshing it and without a
// pause: its Metadata.Retry.Max tries are spent within milliseconds, the
// session ends, and the member joins again with the new coordinator, which
// for the group leader means a rebalance of the whole group (a new
// generation). The Java client instead marks the coordinator unknown, finds
// the new one and heartbeats on within the session timeout, keeping the
// generation.
//
// Two changes to the client give sarama's loop that behaviour: every
// failed dial returns only after Metadata.Retry.Backoff, so the loop's
// tries last Metadata.Retry.Max x Backoff (the caller sizes that to the
// session timeout); and every failed dial starts one background
// RefreshCoordinator, which asks the other brokers until Kafka has elected
// the new coordinator and then points the client (and so the next
// heartbeat) at it. The dial pause also spaces out the reconnects of
// fetches to a dead partition leader, which is harmless.
func newSaramaGroup(brokers []string, group string, cfg *sarama.Config) (sarama.ConsumerGroup, error) {
	d := &groupDialer{
		dialer:  net.Dialer{Timeout: cfg.Net.DialTimeout, KeepAlive: cfg.Net.KeepAlive, LocalAddr: cfg.Net.LocalAddr},
		backoff: cfg.Metadata.Retry.Backoff,
		group:   group,
	}
	if !cfg.Net.Proxy.Enable {
		cfg.Net.Proxy.Enable, cfg.Net.Proxy.Dialer = true, d
	}
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, err
	}
	d.setClient(client)
	cg, err := sarama.NewConsumerGroupFromClient(group, client)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &ownedGroup{ConsumerGroup: cg, client: client}, nil
}

// groupDialer dials broker connections for a consumer group's client (see
// newSaramaGroup).
type groupDialer struct {
	dialer  net.Dialer
	backoff time.Duration
	group   string

	mu         sync.Mutex
	client     sarama.Client
	refreshing atomic.Bool
}

func (d *groupDialer) setClient(c sarama.Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.client = c
}

// Dial connects to addr; a failed dial starts a coordinator refresh and
// returns after the backoff.
func (d *groupDialer) Dial(network, addr string) (net.Conn, error) {
	c, err := d.dialer.Dial(network, addr)
	if err == nil {
		return c, nil
	}
	d.refresh()
	time.Sleep(d.backoff)
	return nil, err
}

// refresh asks the brokers for the group's coordinator in the background,
// one refresh at a time.
func (d *groupDialer) refresh() {
	d.mu.Lock()
	client := d.client
	d.mu.Unlock()
	if client == nil || !d.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer d.refreshing.Store(false)
		_ = client.RefreshCoordinator(d.group)
	}()
}

// ownedGroup is a consumer group that closes its own client.
type ownedGroup struct {
	sarama.ConsumerGroup
	client sarama.Client
}

// Close leaves the group and closes the client.
func (g *ownedGroup) Close() error {
	err := g.ConsumerGroup.Close()
	if cerr := g.client.Close(); err == nil && cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) {
		err = cerr
	}
	return err
}
