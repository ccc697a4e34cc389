package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
)

// system is one stream processor under test, run as a child process.
type system interface {
	// name is the row label.
	name() string
	// setup creates topics, starts the processor, loads it with ratings and
	// waits until the probe key holds count want.
	setup(want int64) error
	// start starts (or restarts) the child process.
	start() (*child, error)
	// current is the child process started last.
	current() *child
	// produceProbe sends one more rating for the probe key.
	produceProbe() error
	// probes are the lookup endpoints of the probe key.
	probes() []probe
	// close stops the child and the clients.
	close()
}

// env is what every system shares.
type env struct {
	addrs          []string
	work           string // scratch directory of this broker's run
	out            io.Writer
	suffix         string // appended to topic and group names (existing brokers)
	self           string // this program's binary (for goka-child)
	ksBin          string // keepstate binary
	registry       string // Schema Registry URL
	session        time.Duration
	partitions     int32
	load           int // ratings produced before the first kill
	keys           int // distinct keys of that load
	readyTimeout   time.Duration
	commitInterval time.Duration
	ksLogLevel     string // keepstate run --log-level
}

// freeAddr returns a free 127.0.0.1 TCP address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// childErr wraps a setup failure with the child's state and the end of
// its log.
func childErr(label string, c *child, logPath string, err error) error {
	state := "still running"
	if c != nil && c.exited() {
		state = "exited: " + c.cmd.ProcessState.String()
	}
	raw, _ := os.ReadFile(logPath)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return fmt.Errorf("%s: first start: %w; child %s; last lines of %s:\n%s", label, err, state, logPath, strings.Join(lines, "\n"))
}

// ---- goka ----

// gokaSystem is a goka processor in a goka-child process.
type gokaSystem struct {
	env        *env
	label      string
	group      string
	input      string
	instanceID string
	dir        string
	addr       string
	cur        *child
	emitter    *goka.Emitter
}

func newGoka(e *env, label, group, instanceID string) (*gokaSystem, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return &gokaSystem{env: e, label: label, group: group, input: group + "-in", instanceID: instanceID,
		dir: filepath.Join(e.work, group), addr: addr}, nil
}

func (g *gokaSystem) name() string { return g.label }

func (g *gokaSystem) current() *child { return g.cur }

func (g *gokaSystem) start() (*child, error) {
	args := []string{"goka-child", "--brokers", strings.Join(g.env.addrs, ","), "--group", g.group,
		"--input", g.input, "--storage", g.dir, "--http-addr", g.addr,
		"--session-timeout", g.env.session.String()}
	if g.instanceID != "" {
		args = append(args, "--instance-id", g.instanceID)
	}
	c, err := startChild(filepath.Join(g.env.work, g.group+".log"), g.env.self, args...)
	g.cur = c
	return c, err
}

func (g *gokaSystem) setup(want int64) error {
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return err
	}
	if err := createTopics(g.env.addrs, g.env.partitions, g.input); err != nil {
		return err
	}
	// The first start of a fresh group is not what is measured; should the
	// child die during it, say so and start it again (twice at most).
	for attempt := 1; ; attempt++ {
		c, err := g.start()
		if err != nil {
			return err
		}
		err = waitOK(c, "http://"+g.addr+"/ready", g.env.readyTimeout)
		if err == nil {
			break
		}
		err = childErr(g.label, c, filepath.Join(g.env.work, g.group+".log"), err)
		if !errors.Is(err, errExited) || attempt == 3 {
			return err
		}
		fmt.Fprintf(g.env.out, "  first start failed, starting again: %v\n", err)
	}
	em, err := goka.NewEmitter(g.env.addrs, goka.Stream(g.input), new(codec.String),
		goka.WithEmitterTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(gokaTopicManagerConfig())))
	if err != nil {
		return fmt.Errorf("%s: emitter: %w", g.label, err)
	}
	g.emitter = em
	rnd := rand.New(rand.NewPCG(1, 2))
	var last *goka.Promise
	for i := 0; i < g.env.load; i++ {
		p, err := em.Emit("m"+strconv.Itoa(1+rnd.IntN(g.env.keys)), strconv.Itoa(rnd.IntN(11)))
		if err != nil {
			return fmt.Errorf("%s: emit: %w", g.label, err)
		}
		last = p
	}
	if last != nil {
		errc := make(chan error, 1)
		last.Then(func(err error) { errc <- err })
		if err := <-errc; err != nil {
			return fmt.Errorf("%s: emit: %w", g.label, err)
		}
	}
	for i := int64(0); i < want; i++ {
		if err := g.produceProbe(); err != nil {
			return err
		}
	}
	if err := waitCount(g.probes()[0].url, want, g.env.readyTimeout); err != nil {
		return childErr(g.label, g.cur, filepath.Join(g.env.work, g.group+".log"), err)
	}
	return nil
}

func (g *gokaSystem) produceProbe() error {
	if err := g.emitter.EmitSync("probe", "7"); err != nil {
		return fmt.Errorf("%s: emit probe: %w", g.label, err)
	}
	return nil
}

func (g *gokaSystem) probes() []probe {
	return []probe{
		{label: "processor.Get", url: "http://" + g.addr + "/proc/probe"},
		{label: "View.Get", url: "http://" + g.addr + "/view/probe"},
	}
}

func (g *gokaSystem) close() {
	g.cur.kill()
	if g.emitter != nil {
		_ = g.emitter.Finish()
	}
}

// ---- keepstate ----

// probeMovie is the movie id whose count the benchmark watches; the load
// generator only uses ids 1..keys.
const probeMovie = 1000001

// keepstateSystem is `keepstate run` with the clover store.
type keepstateSystem struct {
	env        *env
	label      string
	appID      string
	instanceID string
	dir        string
	addr       string
	cur        *child
	prod       sarama.SyncProducer
	schemaID   uint32
}

func newKeepstate(e *env, label, appID, instanceID string) (*keepstateSystem, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return &keepstateSystem{env: e, label: label, appID: appID, instanceID: instanceID,
		dir: filepath.Join(e.work, appID), addr: addr}, nil
}

func (k *keepstateSystem) name() string { return k.label }

func (k *keepstateSystem) current() *child { return k.cur }

func (k *keepstateSystem) input() string { return k.appID + "-ratings" }

// runArgs is the `keepstate run` command line.
func (k *keepstateSystem) runArgs() []string {
	args := []string{"run", "--brokers", strings.Join(k.env.addrs, ","), "--schema-registry", k.env.registry,
		"--store", "clover", "--data-dir", k.dir, "--http-addr", k.addr, "--advertise-addr", k.addr,
		"--application-id", k.appID, "--input-topic", k.input(), "--output-topic", k.appID + "-averages",
		"--commit-interval", k.env.commitInterval.String(), "--session-timeout", k.env.session.String(),
		"--log-level", k.env.ksLogLevel}
	if k.instanceID != "" {
		args = append(args, "--instance-id", k.instanceID)
	}
	return args
}

func (k *keepstateSystem) start() (*child, error) {
	c, err := startChild(filepath.Join(k.env.work, k.appID+".log"), k.env.ksBin, k.runArgs()...)
	k.cur = c
	return c, err
}

func (k *keepstateSystem) setup(want int64) error {
	if err := createTopics(k.env.addrs, k.env.partitions, k.input()); err != nil {
		return err
	}
	common := []string{"--brokers", strings.Join(k.env.addrs, ","), "--schema-registry", k.env.registry,
		"--topic", k.input(), "--log-level", "warn"}
	gen := exec.Command(k.env.ksBin, append([]string{"produce", "--count", strconv.Itoa(k.env.load),
		"--movies", strconv.Itoa(k.env.keys)}, common...)...)
	if out, err := gen.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: keepstate produce: %v: %s", k.label, err, out)
	}
	lines := strings.Repeat(fmt.Sprintf("{\"movie_id\":%d,\"rating\":7}\n", probeMovie), int(want))
	stdin := exec.Command(k.env.ksBin, append([]string{"produce", "--stdin"}, common...)...)
	stdin.Stdin = strings.NewReader(lines)
	if out, err := stdin.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: keepstate produce --stdin: %v: %s", k.label, err, out)
	}
	id, err := latestSchemaID(k.env.registry, k.input()+"-value")
	if err != nil {
		return fmt.Errorf("%s: %w", k.label, err)
	}
	k.schemaID = id
	prod, err := sarama.NewSyncProducer(k.env.addrs, adminConfig())
	if err != nil {
		return fmt.Errorf("%s: producer: %w", k.label, err)
	}
	k.prod = prod
	if _, err := k.start(); err != nil {
		return err
	}
	if err := waitCount(k.probes()[0].url, want, k.env.readyTimeout); err != nil {
		return childErr(k.label, k.cur, filepath.Join(k.env.work, k.appID+".log"), err)
	}
	return nil
}

// latestSchemaID asks the registry for the id of subject's latest schema
// (registered by `keepstate produce`).
func latestSchemaID(registry, subject string) (uint32, error) {
	resp, err := http.Get(registry + "/subjects/" + subject + "/versions/latest")
	if err != nil {
		return 0, fmt.Errorf("schema registry: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		ID uint32 `json:"id"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("schema registry: %s: status %d", subject, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("schema registry: %s: %w", subject, err)
	}
	return v.ID, nil
}

// encodeRating frames an Avro Rating {movie_id long, rating double} the
// Confluent way: magic 0, 4-byte big-endian schema id, Avro binary (a
// zig-zag varint long, then a little-endian double).
func encodeRating(schemaID uint32, movieID int64, rating float64) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], schemaID)
	b = binary.AppendUvarint(b, uint64((movieID<<1)^(movieID>>63)))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(rating))
}

func (k *keepstateSystem) produceProbe() error {
	_, _, err := k.prod.SendMessage(&sarama.ProducerMessage{Topic: k.input(),
		Value: sarama.ByteEncoder(encodeRating(k.schemaID, probeMovie, 7))})
	if err != nil {
		return fmt.Errorf("%s: produce probe: %w", k.label, err)
	}
	return nil
}

func (k *keepstateSystem) probes() []probe {
	return []probe{{label: "GET /movies/{id}", url: fmt.Sprintf("http://%s/movies/%d", k.addr, probeMovie)}}
}

func (k *keepstateSystem) close() {
	k.cur.kill()
	if k.prod != nil {
		_ = k.prod.Close()
	}
}

// buildKeepstate builds cmd/keepstate of the main repo into dir. Unless
// worktree is set it builds the committed HEAD (exported with git archive),
// so that uncommitted work of others in the tree does not leak into the
// numbers; it returns the binary and what was built.
func buildKeepstate(ctx context.Context, repo, dir string, worktree bool) (string, string, error) {
	bin := filepath.Join(dir, "keepstate")
	src, what := repo, "working tree of "+repo
	if !worktree {
		src = filepath.Join(dir, "keepstate-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return "", "", err
		}
		export := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "sh", repo, src)
		if out, err := export.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("export HEAD of %s: %v: %s", repo, err, out)
		}
		what = "committed HEAD of " + repo + " (git archive)"
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/keepstate")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("build keepstate: %v: %s", err, out)
	}
	return bin, what, nil
}
