package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/keepstate/keepstate/app/bench"
	"github.com/keepstate/keepstate/engine"
)

// peerSecret authenticates keepstate's instances to each other.
const peerSecret = "groupchange-peer-secret-0123456789"

// instance is one process of a system, with its state directory.
type instance struct {
	name   string
	dir    string // state: keepstate's data dir, Kafka Streams' state dir
	addr   string // keepstate's API
	status string // Kafka Streams' status file
	log    string
	child  *bench.Child
}

// start starts in as a member of the scenario's group.
func (sc *scenario) start(in *instance) error {
	if err := os.MkdirAll(in.dir, 0o755); err != nil {
		return err
	}
	var bin string
	var args []string
	switch sc.system {
	case "keepstate":
		bin = sc.o.ksBin
		args = []string{"run", "--brokers", strings.Join(sc.o.brokers, ","), "--schema-registry", sc.registry,
			"--store", "clover", "--data-dir", in.dir, "--http-addr", in.addr, "--advertise-addr", in.addr,
			"--application-id", sc.appID, "--input-topic", sc.input, "--output-topic", sc.output,
			"--instance-id", in.name, "--commit-interval", sc.o.commitInterval.String(),
			"--session-timeout", sc.o.session.String(), "--partitions", strconv.Itoa(sc.o.partitions),
			"--standby-replicas", "1", "--peer-secret", peerSecret, "--log-level", "info"}
	case "kstreams":
		bin = sc.o.java
		_ = os.Remove(in.status)
		args = append(strings.Fields(sc.o.javaOpts), "-jar", sc.o.jar, "--bootstrap-servers", strings.Join(sc.o.brokers, ","),
			"--application-id", sc.appID, "--input-topic", sc.input, "--output-topic", sc.output,
			"--processing-guarantee", "exactly_once_v2", "--state-dir", in.dir, "--status-file", in.status,
			"--commit-interval-ms", fmt.Sprint(sc.o.commitInterval.Milliseconds()),
			"--session-timeout-ms", fmt.Sprint(sc.o.session.Milliseconds()),
			"--standby-replicas", "1", "--probing-rebalance-interval-ms", "60000")
	}
	c, err := bench.StartChild(in.log, bin, args...)
	if err != nil {
		return err
	}
	in.child = c
	return nil
}

// state is what an instance says of itself: whether it is ready (keepstate:
// /readyz; Kafka Streams: RUNNING) and the partitions it runs as active.
type state struct {
	ready   bool
	actives []int32
}

// stateOf asks in for its state; an instance that does not answer is not
// ready and runs nothing.
func (sc *scenario) stateOf(in *instance) state {
	if in.child == nil || in.child.Exited() {
		return state{}
	}
	switch sc.system {
	case "keepstate":
		var st struct {
			Partitions map[string][]engine.PartitionRole `json:"partitions"`
		}
		var s state
		if resp, err := sc.http.Get("http://" + in.addr + "/readyz"); err == nil {
			s.ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
		resp, err := sc.http.Get("http://" + in.addr + "/api/stats")
		if err != nil {
			return s
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
			return s
		}
		for _, r := range st.Partitions["movies"] {
			if r.Role == engine.RoleActive && r.State == "RUNNING" {
				s.actives = append(s.actives, r.Partition)
			}
		}
		return s
	default:
		raw, err := os.ReadFile(in.status)
		if err != nil {
			return state{}
		}
		var st struct {
			State  string   `json:"state"`
			Active []string `json:"active"`
		}
		if json.Unmarshal(raw, &st) != nil {
			return state{}
		}
		s := state{ready: st.State == "RUNNING"}
		// Subtopology 1 reads the repartition topic and holds the store.
		for _, t := range st.Active {
			if p, ok := strings.CutPrefix(t, "1_"); ok {
				if n, err := strconv.ParseInt(p, 10, 32); err == nil {
					s.actives = append(s.actives, int32(n))
				}
			}
		}
		if !s.ready {
			s.actives = nil // tasks are not processed while it rebalances or restores
		}
		return s
	}
}

// waitFor polls cond every 100 ms until it holds, and returns how long
// that took, or an error after timeout.
func waitFor(timeout time.Duration, what string, cond func() error) (time.Duration, error) {
	began := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(began), nil
		}
		if time.Since(began) > timeout {
			return 0, fmt.Errorf("%s: not within %v: %w", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReady waits until in is ready.
func (sc *scenario) waitReady(in *instance, timeout time.Duration) error {
	_, err := waitFor(timeout, in.name+" ready", func() error {
		if in.child.Exited() {
			return errors.New("exited")
		}
		if !sc.stateOf(in).ready {
			return errors.New("not ready")
		}
		return nil
	})
	if err != nil {
		return in.child.Failed(err)
	}
	return nil
}

// covered reports whether the live instances run every partition.
func (sc *scenario) covered() error {
	seen := map[int32]bool{}
	for _, in := range sc.live {
		for _, p := range sc.stateOf(in).actives {
			seen[p] = true
		}
	}
	if len(seen) != sc.o.partitions {
		return fmt.Errorf("%d of %d partitions running", len(seen), sc.o.partitions)
	}
	return nil
}

// balanced reports whether the live instances run every partition once,
// their numbers of actives at most one apart.
func (sc *scenario) balanced() error {
	seen := map[int32]int{}
	lo, hi := 1<<30, 0
	var counts []int
	for _, in := range sc.live {
		a := sc.stateOf(in).actives
		for _, p := range a {
			seen[p]++
		}
		lo, hi = min(lo, len(a)), max(hi, len(a))
		counts = append(counts, len(a))
	}
	if len(seen) != sc.o.partitions || hi-lo > 1 {
		return fmt.Errorf("actives per instance %v, %d of %d partitions running", counts, len(seen), sc.o.partitions)
	}
	for p, n := range seen {
		if n > 1 {
			return fmt.Errorf("partition %d active on %d instances", p, n)
		}
	}
	return nil
}

// newInstance returns instance name of the scenario (not started).
func (sc *scenario) newInstance(name string) (*instance, error) {
	addr, err := bench.FreeTCPAddr()
	if err != nil {
		return nil, err
	}
	d := filepath.Join(sc.dir, name)
	return &instance{name: name, dir: filepath.Join(d, "state"), addr: addr,
		status: filepath.Join(d, "status.json"), log: d + ".log"}, nil
}
