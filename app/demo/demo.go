// Package demo is `keepstate demo`: app.Run with an in-process Kafka broker
// (kfake), Schema Registry (srfake, persisted by Registry) and ratings
// generator, in one process, keeping these fakes out of package app.
package demo

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/keepstate/keepstate/app"
)

// Config configures `keepstate demo`: the service plus an in-process
// Kafka broker and Schema Registry and a ratings generator, in one process.
type Config struct {
	app.Config
	KafkaAddr    string    // where the in-process broker listens
	RegistryAddr string    // where the in-process Schema Registry listens
	Rate         float64   // generated ratings per second (0: no generator)
	Movies       int64     // distinct generated movies
	Out          io.Writer // receives the human-readable banner with the addresses
}

// Default returns the demo defaults: broker 127.0.0.1:9092, registry
// 127.0.0.1:8081, API :7001, 50 ratings/s over 1000 movies, store ./data.
func Default() Config {
	return Config{Config: app.Default(), KafkaAddr: "127.0.0.1:9092", RegistryAddr: "127.0.0.1:8081",
		Rate: 50, Movies: 1000, Out: io.Discard}
}

// Validate checks the demo settings.
func (d Config) Validate() error {
	var errs []error
	if d.Store != app.StoreClover {
		// redis works too, but then Redis must run; say so if it does not.
		if err := d.Config.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for flag, a := range map[string]string{"kafka-addr": d.KafkaAddr, "registry-addr": d.RegistryAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %q is not host:port", flag, a))
		}
	}
	if d.Rate < 0 || d.Movies <= 0 {
		errs = append(errs, errors.New("--rate must be >= 0 and --movies > 0"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", app.ErrConfig, errors.Join(errs...))
	}
	return nil
}

// Run runs the demo until ctx ends. Under --data-dir the broker keeps
// kafka/, the registry registry.jsonl and clover store/, so a restarted
// demo keeps all three. A nil log discards.
func Run(ctx context.Context, d Config, log *slog.Logger) error {
	if err := d.Validate(); err != nil {
		return err
	}
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	if err := os.MkdirAll(d.DataDir, 0o755); err != nil {
		return fmt.Errorf("demo: create --data-dir: %w", err)
	}
	// Take the data dir before anything writes into it: a second demo on
	// the same --data-dir must fail here, not after its broker has written
	// into the live broker's log directory.
	unlock, err := lockDataDir(d.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	kafkaLn, err := net.Listen("tcp", d.KafkaAddr)
	if err != nil {
		return fmt.Errorf("demo: in-process Kafka cannot listen on --kafka-addr %s (%w); is another broker or demo running? choose another address", d.KafkaAddr, err)
	}
	defer kafkaLn.Close() // the cluster closes it too; a second Close does nothing
	regLn, err := net.Listen("tcp", d.RegistryAddr)
	if err != nil {
		return fmt.Errorf("demo: in-process Schema Registry cannot listen on --registry-addr %s (%w); choose another address", d.RegistryAddr, err)
	}
	defer regLn.Close()
	listen := func(string, string) (net.Listener, error) { return kafkaLn, nil }
	cluster, err := kfake.NewCluster(kfake.ListenFn(listen), kfake.NumBrokers(1),
		kfake.DataDir(filepath.Join(d.DataDir, "kafka")), kfake.DefaultNumPartitions(3))
	if err != nil {
		return fmt.Errorf("demo: start in-process Kafka: %w", err)
	}
	defer cluster.Close()
	reg, err := NewRegistry(filepath.Join(d.DataDir, "registry.jsonl"), log)
	if err != nil {
		return err
	}
	regSrv := &http.Server{Handler: reg, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = regSrv.Serve(regLn) }()
	defer regSrv.Close()

	c := d.Config
	c.DataDir = filepath.Join(d.DataDir, "store")
	if c.PeerSecret == "" && c.PeerSecretFile == "" {
		// One instance: nothing to route to, and no reason to warn.
		c.PeerSecret = rand.Text()
	}
	c.Brokers = []string{kafkaLn.Addr().String()}
	c.SchemaRegistry = "http://" + regLn.Addr().String()
	c.Partitions = cmp.Or(c.Partitions, 3)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	genDone := make(chan struct{})
	close(genDone)
	ready := func(api string) {
		fmt.Fprintf(d.Out, "keepstate demo is running\n  API:             http://%s  (try /movies/1 and /movies?minAvg=8)\n  Kafka broker:    %s\n  Schema Registry: %s\n  Store:           %s (%s)\n  Generator:       %g ratings/s over %d movies\nPress Ctrl-C to stop.\n",
			app.DisplayAddr(api), c.Brokers[0], c.SchemaRegistry, c.Store, c.DataDir, d.Rate, d.Movies)
		if d.Rate > 0 {
			genDone = make(chan struct{})
			go func() {
				defer close(genDone)
				p := app.ProduceConfig{Brokers: c.Brokers, SchemaRegistry: c.SchemaRegistry, Topic: c.InputTopic,
					Movies: d.Movies, Rate: d.Rate, Seed: uint64(time.Now().UnixNano()), Partitions: c.Partitions}
				if _, err := app.Produce(ctx, p, log); err != nil && ctx.Err() == nil {
					log.Error("demo generator stopped", "err", err)
				}
			}()
		}
	}
	err = app.Run(ctx, c, log, ready)
	cancel()
	<-genDone
	return err
}

// demoLockTimeout is how long a demo waits for another to release its
// --data-dir.
const demoLockTimeout = time.Second

// lockDataDir takes an exclusive lock on dir (the file demo.lock, locked
// with bbolt's portable file lock) and returns its release; it fails with
// app.ErrConfig when another process holds it.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, "demo.lock")
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: demoLockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: --data-dir %s is in use by another keepstate demo (lock %s held); stop it or choose another --data-dir", app.ErrConfig, dir, path)
	}
	if err != nil {
		return nil, fmt.Errorf("demo: lock --data-dir %s: %w", dir, err)
	}
	return func() { _ = db.Close() }, nil
}
