package testkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisInstall says how to get the redis-server binary.
const RedisInstall = "apt-get install redis-server"

// ErrRedisMissing is returned by LaunchRedis when no redis-server binary is
// on the PATH.
var ErrRedisMissing = errors.New("redis-server binary not found on PATH")

// RedisPersistence selects how a test redis-server keeps its data in its
// directory across Stop and Start.
type RedisPersistence int

const (
	// RedisNoPersistence (the default) keeps data in memory only.
	RedisNoPersistence RedisPersistence = iota
	// RedisAOF fsyncs every write to an append-only file: data survives
	// Stop and even Kill.
	RedisAOF
	// RedisRDB writes a dump.rdb snapshot on Stop (SIGTERM); data written
	// since the last snapshot is lost on Kill.
	RedisRDB
)

// persistenceArgs are the redis-server arguments of each RedisPersistence.
var persistenceArgs = [...][]string{
	RedisNoPersistence: {"--appendonly", "no", "--save", ""},
	RedisAOF:           {"--appendonly", "yes", "--appendfsync", "always", "--save", ""},
	RedisRDB:           {"--appendonly", "no", "--save", "3600 1"}, // and at shutdown
}

// RedisOption configures StartRedis and LaunchRedis.
type RedisOption func(*redisConfig)

// redisConfig is what the options set; conf is a config file given before
// the arguments (a Sentinel's).
type redisConfig struct {
	persistence         RedisPersistence
	password, dir, conf string
	args                []string
}

// WithRedisPersistence sets how the server keeps its data across restarts.
func WithRedisPersistence(p RedisPersistence) RedisOption {
	return func(c *redisConfig) { c.persistence = p }
}

// WithRedisPassword starts the server with --requirepass pw (which URL
// then carries).
func WithRedisPassword(pw string) RedisOption {
	return func(c *redisConfig) { c.password = pw }
}

// WithRedisDir makes StartRedis (not LaunchRedis) keep the server's data
// and logs in dir, a SmallVolume say, instead of a fresh temporary one.
func WithRedisDir(dir string) RedisOption {
	return func(c *redisConfig) { c.dir = dir }
}

// WithRedisArgs appends raw redis-server arguments ("--maxmemory", "10mb").
func WithRedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
}

// Redis is a real redis-server process listening on a loopback port with
// its own data directory. Its methods are safe for concurrent use and
// return errors instead of failing a test, so any goroutine may call them.
type Redis struct {
	bin, dir string
	port     int
	cfg      redisConfig
	ownDir   bool // Close removes dir (LaunchRedis)

	mu   sync.Mutex
	proc *child
}

// StartRedis starts a redis-server for the test on a free loopback port in a
// temporary directory, waits until it answers PING, and stops it when the
// test ends. Without the binary the test is skipped (see Missing).
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	bin := LookPath(t, "redis-server", RedisInstall)
	cfg := redisOptions(opts)
	dir := cfg.dir
	if dir == "" {
		dir = t.TempDir()
	}
	r, err := newRedis(bin, dir, false, cfg)
	return closeAtEnd(t, "redis-server", r, err)
}

// LaunchRedis is StartRedis for callers without a testing.TB (TestMain, or
// benchmarks sharing a server), who must Close it; without the binary it
// returns ErrRedisMissing.
func LaunchRedis(opts ...RedisOption) (*Redis, error) {
	g, err := newRedisGroup("keepstate-redis-")
	if err != nil {
		return nil, err
	}
	r, err := newRedis(g.bin, g.dir, true, redisOptions(opts))
	if err != nil {
		_ = os.RemoveAll(g.dir)
	}
	return r, err
}

func redisOptions(opts []RedisOption) (cfg redisConfig) {
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

func newRedis(bin, dir string, ownDir bool, cfg redisConfig) (*Redis, error) {
	var err error
	// A free port can be taken by another process between probing and the
	// server's bind; try a few ports before giving up.
	for range 3 {
		port, perr := freePort()
		if perr != nil {
			return nil, perr
		}
		r := &Redis{bin: bin, dir: dir, port: port, cfg: cfg, ownDir: ownDir}
		if err = r.Start(); err == nil {
			return r, nil
		}
	}
	return nil, err
}

// Addr returns host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Port returns the server's TCP port (the same across restarts).
func (r *Redis) Port() int { return r.port }

// Password returns the password given with WithRedisPassword, or "".
func (r *Redis) Password() string { return r.cfg.password }

// URL returns redis://[:password@]127.0.0.1:port/0.
func (r *Redis) URL() string {
	if r.cfg.password != "" {
		return "redis://:" + r.cfg.password + "@" + r.Addr() + "/0"
	}
	return "redis://" + r.Addr() + "/0"
}

// Running reports whether the server process is alive.
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runningLocked()
}

func (r *Redis) runningLocked() bool { return r.proc != nil && !r.proc.Exited() }

func (r *Redis) serverArgs() []string {
	var args []string
	if r.cfg.conf != "" {
		args = append(args, r.cfg.conf)
	}
	args = append(args, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir, "--daemonize", "no",
		"--logfile", filepath.Join(r.dir, "redis.log"), "--dbfilename", "dump.rdb")
	args = append(args, persistenceArgs[r.cfg.persistence]...)
	if r.cfg.password != "" {
		args = append(args, "--requirepass", r.cfg.password)
	}
	return append(args, r.cfg.args...)
}

// Start starts a stopped server again on the same port and directory (with
// persistence, reloading its data) and waits until it answers PING.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runningLocked() {
		return errors.New("redis-server is already running")
	}
	cmd := exec.Command(r.bin, r.serverArgs()...)
	cmd.Dir, cmd.SysProcAttr = r.dir, procAttr()
	// Errors in the arguments are printed before the log file is opened.
	out, err := os.OpenFile(filepath.Join(r.dir, "redis.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("create redis output file: %w", err)
	}
	defer out.Close() // the child keeps its own descriptor
	cmd.Stdout, cmd.Stderr = out, out
	if r.proc, err = startChild(cmd); err != nil {
		return fmt.Errorf("start %s: %w", r.bin, err)
	}
	if err := r.waitReady(); err != nil {
		r.proc.Kill()
		return fmt.Errorf("redis-server on %s not ready: %w; log: %s", r.Addr(), err, r.logTail())
	}
	return nil
}

func (r *Redis) waitReady() error {
	const within = 15 * time.Second
	deadline := time.Now().Add(within)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 160*time.Millisecond) {
		if r.proc.Exited() {
			return errors.New("process exited")
		}
		err := r.ping()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %w", within, err)
		}
		time.Sleep(wait)
	}
}

// ping sends (AUTH and) PING with the plain RESP protocol and expects PONG.
func (r *Redis) ping() error {
	var cmds [][]string
	if r.cfg.password != "" {
		cmds = append(cmds, []string{"AUTH", r.cfg.password})
	}
	replies, err := RedisDo(r.Addr(), time.Second, append(cmds, []string{"PING"})...)
	if err != nil {
		return err
	}
	if got := replies[len(replies)-1]; got != "PONG" {
		return fmt.Errorf("PING answered %q", got)
	}
	return nil
}

// Stop stops the server with SIGTERM (a clean shutdown: an RDB server saves
// its snapshot) and waits for it to exit, killing it after 10 s.
func (r *Redis) Stop() error { return r.stop(syscall.SIGTERM) }

// Kill stops the server with SIGKILL (a crash: only what the AOF holds is
// kept) and waits for it to exit.
func (r *Redis) Kill() error { return r.stop(syscall.SIGKILL) }

func (r *Redis) stop(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.runningLocked() {
		return nil
	}
	if err := r.proc.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal redis-server: %w", err)
	}
	if r.proc.wait(10 * time.Second) {
		return nil
	}
	r.proc.Kill()
	return fmt.Errorf("redis-server did not exit within 10s of %v; killed", sig)
}

// Wipe deletes the stopped server's persisted data (dump.rdb, the AOF) so
// the next Start begins empty.
func (r *Redis) Wipe() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runningLocked() {
		return errors.New("wipe a running redis-server: stop it first")
	}
	for _, name := range []string{"dump.rdb", "appendonlydir", "appendonly.aof"} {
		if err := os.RemoveAll(filepath.Join(r.dir, name)); err != nil {
			return fmt.Errorf("wipe redis data: %w", err)
		}
	}
	return nil
}

// RestartEmpty stops the server, wipes its data and starts it again on the
// same port, empty, like after a lost volume.
func (r *Redis) RestartEmpty() error {
	if err := r.Stop(); err != nil {
		return err
	}
	if err := r.Wipe(); err != nil {
		return err
	}
	return r.Start()
}

// Close stops the server and removes a LaunchRedis server's directory.
func (r *Redis) Close() error {
	err := r.Stop()
	if r.ownDir {
		err = cmp.Or(err, os.RemoveAll(r.dir))
	}
	return err
}

// logTail returns the end of the server's output and log file.
func (r *Redis) logTail() string {
	var parts []string
	for _, name := range []string{"redis.out", "redis.log"} {
		if b, err := os.ReadFile(filepath.Join(r.dir, name)); err == nil && len(b) > 0 {
			parts = append(parts, name+": "+strings.TrimSpace(string(b[max(0, len(b)-2000):])))
		}
	}
	if len(parts) == 0 {
		return "(no output)"
	}
	return strings.Join(parts, "\n")
}

// RedisDo sends commands to the Redis server at addr over one pipelined
// connection, bypassing the code under test, and returns one reply per
// command: strings and integers as text, a nil bulk as "(nil)", an error
// reply as the error; arrays are not supported.
func RedisDo(addr string, timeout time.Duration, cmds ...[]string) ([]string, error) {
	// One RESP2 connection without CLIENT SETINFO: AUTH and SELECT hold
	// for the next commands.
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, PoolSize: 1, MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pipe := c.Pipeline()
	for _, cmd := range cmds {
		args := make([]any, len(cmd))
		for i, a := range cmd {
			args[i] = a
		}
		pipe.Do(ctx, args...)
	}
	res, _ := pipe.Exec(ctx)
	replies := make([]string, 0, len(cmds))
	for _, r := range res {
		v, err := r.(*redis.Cmd).Result()
		switch {
		case errors.Is(err, redis.Nil):
			v = "(nil)"
		case err != nil:
			return replies, err
		}
		switch v.(type) {
		case string, int64:
			replies = append(replies, fmt.Sprint(v))
		default:
			return replies, fmt.Errorf("unsupported redis reply %T", v)
		}
	}
	return replies, nil
}
