package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// countSum is the goka group-table value: how many ratings a key got and
// their sum. It travels as the text "count sum".
type countSum struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
}

// countSumCodec encodes countSum as "count sum" text.
type countSumCodec struct{}

// Encode implements goka.Codec.
func (countSumCodec) Encode(v any) ([]byte, error) {
	cs, ok := v.(countSum)
	if !ok {
		return nil, fmt.Errorf("countsum codec: unexpected %T", v)
	}
	return []byte(strconv.FormatInt(cs.Count, 10) + " " + strconv.FormatFloat(cs.Sum, 'g', -1, 64)), nil
}

// Decode implements goka.Codec.
func (countSumCodec) Decode(b []byte) (any, error) {
	c, s, ok := strings.Cut(string(b), " ")
	if !ok {
		return nil, fmt.Errorf("countsum codec: malformed %q", b)
	}
	n, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("countsum codec: count: %w", err)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("countsum codec: sum: %w", err)
	}
	return countSum{Count: n, Sum: f}, nil
}

// gokaTopicManagerConfig is goka's topic manager configuration for a
// single-broker cluster (replication 1, as goka's own examples do).
func gokaTopicManagerConfig() *goka.TopicManagerConfig {
	tmc := goka.NewTopicManagerConfig()
	tmc.Table.Replication = 1
	tmc.Stream.Replication = 1
	return tmc
}

// gokaChild is the `goka-child` subcommand: a goka processor (group table
// with count+sum per key, leveldb storage on disk) plus a goka View of the
// same table, and an HTTP server answering
//
//	GET /proc/{key}  processor.Get(key): the processor's own partition state
//	GET /view/{key}  view.Get(key): a View (no group membership) of the table
//	GET /ready       200 once the processor is running (all partitions recovered)
//
// with 200 {"count":n,"sum":s}, 404 when the key is absent, 503 when the
// lookup fails (partition not assigned, not recovered yet).
func gokaChild(args []string) error {
	fs := flag.NewFlagSet("goka-child", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap servers, comma separated")
	group := fs.String("group", "goka-ratings", "goka group (consumer group and table topic prefix)")
	input := fs.String("input", "goka-ratings-in", "input stream topic")
	dir := fs.String("storage", "", "directory of the local leveldb storage")
	addr := fs.String("http-addr", "127.0.0.1:0", "HTTP listen address")
	session := fs.Duration("session-timeout", 10*time.Second, "consumer group session timeout")
	instanceID := fs.String("instance-id", "", "sarama static membership id (empty: goka's default dynamic membership)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *dir == "" {
		return errors.New("goka-child: --brokers and --storage are required")
	}
	bs := strings.Split(*brokers, ",")

	cfg := goka.DefaultConfig()
	cfg.Consumer.Group.Session.Timeout = *session
	// Only the very first start has no committed offsets; reading from the
	// oldest then lets the parent produce its load before the processor
	// has settled. Restarts resume from the committed offsets either way.
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	if *instanceID != "" {
		// Static membership needs JoinGroup v5 (Kafka 2.3); goka's default
		// protocol version is 2.0.
		cfg.Version = sarama.V3_6_0_0
		cfg.Consumer.Group.InstanceId = *instanceID
	}
	goka.ReplaceGlobalConfig(cfg)
	tmc := gokaTopicManagerConfig()
	logger := log.New(os.Stderr, "goka ", log.LstdFlags|log.Lmicroseconds)

	g := goka.DefineGroup(goka.Group(*group),
		goka.Input(goka.Stream(*input), new(codec.String), func(ctx goka.Context, msg any) {
			r, err := strconv.ParseFloat(msg.(string), 64)
			if err != nil {
				ctx.Fail(fmt.Errorf("rating %q: %w", msg, err))
				return
			}
			var cs countSum
			if v := ctx.Value(); v != nil {
				cs = v.(countSum)
			}
			cs.Count++
			cs.Sum += r
			ctx.SetValue(cs)
		}),
		goka.Persist(countSumCodec{}),
	)
	proc, err := goka.NewProcessor(bs, g,
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(tmc)),
		goka.WithStorageBuilder(storage.DefaultBuilder(filepath.Join(*dir, "processor"))),
		goka.WithLogger(logger),
	)
	if err != nil {
		return fmt.Errorf("goka-child: processor: %w", err)
	}
	view, err := goka.NewView(bs, goka.GroupTable(goka.Group(*group)), countSumCodec{},
		goka.WithViewTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(tmc)),
		goka.WithViewStorageBuilder(storage.DefaultBuilder(filepath.Join(*dir, "view"))),
		goka.WithViewLogger(logger),
	)
	if err != nil {
		return fmt.Errorf("goka-child: view: %w", err)
	}

	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, v any, err error) {
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case v == nil:
			http.Error(w, "not found", http.StatusNotFound)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	mux.HandleFunc("GET /proc/{key}", func(w http.ResponseWriter, r *http.Request) {
		// goka v1.1.17's Processor.Get dereferences the partition's storage
		// before it is opened: in the first milliseconds after an
		// assignment it panics. Count that as "not answering yet".
		defer func() {
			if p := recover(); p != nil {
				logger.Printf("processor.Get panicked: %v", p)
				http.Error(w, fmt.Sprintf("processor.Get panicked: %v", p), http.StatusServiceUnavailable)
			}
		}()
		v, err := proc.Get(r.PathValue("key"))
		answer(w, v, err)
	})
	mux.HandleFunc("GET /view/{key}", func(w http.ResponseWriter, r *http.Request) {
		v, err := view.Get(r.PathValue("key"))
		answer(w, v, err)
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !proc.Recovered() {
			http.Error(w, "processor not running", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ready":true}` + "\n"))
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 3)
	run := func(name string, f func() error) {
		err := f()
		if err == nil {
			err = errors.New("stopped")
		}
		errc <- fmt.Errorf("%s: %w", name, err)
	}
	go run("processor", func() error { return proc.Run(ctx) })
	go run("view", func() error { return view.Run(ctx) })
	go run("http", srv.ListenAndServe)
	var runErr error
	select {
	case runErr = <-errc:
	case <-ctx.Done():
	}
	signaled := ctx.Err() != nil
	stop()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	if !signaled {
		return fmt.Errorf("goka-child: %w", runErr)
	}
	return nil
}
