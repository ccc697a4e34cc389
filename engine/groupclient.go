package engine

import (
	"errors"
	"fmt"
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
// sarama's heartbeat loop retries a failed heartbeat at once on the cached
// coordinator: its Metadata.Retry.Max tries are spent within milliseconds
// and the member rejoins (for the leader, a rebalance of the whole group).
// Like the Java client, this one finds the new coordinator within the
// session timeout, keeping the generation:
//
//   - a failed dial returns only after Metadata.Retry.Backoff (the caller
//     sizes Retry.Max x Backoff to the session timeout) and starts one
//     background RefreshCoordinator;
//   - a read that times out makes its broker fail dials for half the read
//     timeout, with a refresh, as if it were dead (watchedConn);
//   - a coordinator lookup that yields an unconnected broker takes the
//     backoff too (pacedClient).
//
// A broker the watch has fenced is refused at once, without the pause:
// sarama's walks over the brokers still start at a fenced seed, and dials
// to one broker are serialized, so a pause per try would add up.
func newSaramaGroup(brokers []string, group string, cfg *sarama.Config) (*ownedGroup, error) {
	var under dialer = &net.Dialer{Timeout: cfg.Net.DialTimeout, KeepAlive: cfg.Net.KeepAlive, LocalAddr: cfg.Net.LocalAddr}
	if cfg.Net.Proxy.Enable {
		under = cfg.Net.Proxy.Dialer
	}
	d := &groupDialer{dialer: under, backoff: cfg.Metadata.Retry.Backoff, group: group,
		quiet: max(cfg.Metadata.Retry.Backoff, cfg.Net.ReadTimeout/2), silent: map[string]time.Time{}}
	cfg.Net.Proxy.Enable, cfg.Net.Proxy.Dialer = true, d
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, err
	}
	d.setClient(client)
	cg, err := sarama.NewConsumerGroupFromClient(group, &pacedClient{Client: client, backoff: d.backoff})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &ownedGroup{ConsumerGroup: cg, client: client}, nil
}

// dialer dials a broker connection (net.Dialer, brokerWatch).
type dialer interface {
	Dial(network, addr string) (net.Conn, error)
}

// groupDialer dials broker connections for a consumer group's client (see
// newSaramaGroup).
type groupDialer struct {
	dialer  dialer
	backoff time.Duration
	group   string
	quiet   time.Duration // how long a broker whose read timed out is not dialed

	mu         sync.Mutex
	client     sarama.Client
	silent     map[string]time.Time // broker address → not dialed before
	refreshing atomic.Bool
}

func (d *groupDialer) setClient(c sarama.Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.client = c
}

// Dial connects to addr; a failed dial, or one to a broker that went
// silent lately (see watchedConn), starts a coordinator refresh and
// returns an error after the backoff; a dial to a broker the watch has
// fenced fails at once.
func (d *groupDialer) Dial(network, addr string) (net.Conn, error) {
	if f, ok := d.dialer.(fenceKeeper); ok && f.Fenced(addr) {
		d.refresh()
		return nil, fmt.Errorf("broker %s: %w", addr, errBrokerFenced)
	}
	d.mu.Lock()
	until, silent := d.silent[addr]
	d.mu.Unlock()
	if silent && time.Now().Before(until) {
		d.refresh()
		time.Sleep(d.backoff)
		return nil, fmt.Errorf("broker %s stopped answering (a read timed out); not dialing it until %s", addr, until.Format(time.TimeOnly))
	}
	c, err := d.dialer.Dial(network, addr)
	if err == nil {
		return &watchedConn{Conn: c, d: d, addr: addr}, nil
	}
	d.refresh()
	if !errors.Is(err, errBrokerFenced) {
		time.Sleep(d.backoff)
	}
	return nil, err
}

// fenceKeeper is a dialer that knows which brokers the cluster has fenced
// (brokerWatch).
type fenceKeeper interface {
	Fenced(addr string) bool
}

// watchedConn is a connection of the group's client whose read timeouts
// mark its broker silent for a while and refresh the group's coordinator.
// A silent broker (paused, cut off) still accepts connections: without the
// mark, sarama would heartbeat its cached coordinator there again and wait
// out another read timeout, long after Kafka moved the group.
type watchedConn struct {
	net.Conn
	d    *groupDialer
	addr string
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		c.d.mu.Lock()
		c.d.silent[c.addr] = time.Now().Add(c.d.quiet)
		c.d.mu.Unlock()
		c.d.refresh() // in the background: this goroutine reads the answers
	}
	return n, err
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

// pacedClient makes a coordinator lookup that returns a broker it cannot
// connect to take at least the backoff. When the coordinator's connection
// already failed, sarama answers "broker not connected" without dialing,
// so the heartbeat loop's immediate retries would be spent before Kafka
// elects a new coordinator, and the session would end.
type pacedClient struct {
	sarama.Client
	backoff time.Duration
}

// Coordinator returns the group's coordinator, after the backoff when the
// broker is not connected once its dial (which Coordinator starts) ended.
func (c *pacedClient) Coordinator(group string) (*sarama.Broker, error) {
	b, err := c.Client.Coordinator(group)
	if err != nil {
		return nil, err
	}
	if ok, _ := b.Connected(); !ok { // waits for a dial in progress
		time.Sleep(c.backoff)
	}
	return b, nil
}

// ownedGroup is a consumer group that closes its own client.
type ownedGroup struct {
	sarama.ConsumerGroup
	client  sarama.Client
	untrack func() // stops the broker watch's refreshes of client, if set
}

// Close leaves the group and closes the client.
func (g *ownedGroup) Close() error {
	if g.untrack != nil {
		g.untrack()
	}
	err := g.ConsumerGroup.Close()
	if cerr := g.client.Close(); err == nil && cerr != nil && !errors.Is(cerr, sarama.ErrClosedClient) {
		err = cerr
	}
	return err
}
