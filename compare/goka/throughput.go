package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net/http"
	_ "net/http/pprof" // GET /debug/pprof on --http-addr, for profiles of the throughput child
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// binaryCountSum is countSum as 16 bytes: count (int64) and sum (float64),
// big-endian, like the Kafka Streams reference app's serde.
type binaryCountSum struct{}

// Encode implements goka.Codec.
func (binaryCountSum) Encode(v any) ([]byte, error) {
	cs, ok := v.(countSum)
	if !ok {
		return nil, fmt.Errorf("countsum codec: unexpected %T", v)
	}
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(cs.Count))
	return binary.BigEndian.AppendUint64(b, math.Float64bits(cs.Sum)), nil
}

// Decode implements goka.Codec.
func (binaryCountSum) Decode(b []byte) (any, error) {
	if len(b) != 16 {
		return nil, fmt.Errorf("countsum codec: %d bytes, want 16", len(b))
	}
	return countSum{Count: int64(binary.BigEndian.Uint64(b)), Sum: math.Float64frombits(binary.BigEndian.Uint64(b[8:]))}, nil
}

// javaDouble is a float64 as Java's DoubleSerializer writes it.
type javaDouble struct{}

// Encode implements goka.Codec.
func (javaDouble) Encode(v any) ([]byte, error) {
	f, ok := v.(float64)
	if !ok {
		return nil, fmt.Errorf("double codec: unexpected %T", v)
	}
	return binary.BigEndian.AppendUint64(nil, math.Float64bits(f)), nil
}

// Decode implements goka.Codec.
func (javaDouble) Decode(b []byte) (any, error) {
	if len(b) != 8 {
		return nil, fmt.Errorf("double codec: %d bytes, want 8", len(b))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// decodeRating reads a Confluent-framed Avro Rating {movie_id long,
// rating double}: magic 0, 4-byte schema id, zig-zag varint, little-endian
// double.
func decodeRating(b []byte) (int64, float64, error) {
	if len(b) < 6 || b[0] != 0 {
		return 0, 0, errors.New("not Confluent-framed")
	}
	u, n := binary.Uvarint(b[5:])
	if n <= 0 || len(b) != 5+n+8 {
		return 0, 0, errors.New("not an Avro Rating")
	}
	id := int64(u>>1) ^ -int64(u&1)
	return id, math.Float64frombits(binary.LittleEndian.Uint64(b[5+n:])), nil
}

// gokaThroughput is the `goka-throughput` subcommand: the keepstate job in
// goka, for the throughput comparison (compare/throughput). It reads
// Confluent-framed Avro ratings from --input, re-keys them by movie id
// through the group's loop topic (goka's repartition), keeps count and sum
// per movie in the group table (LevelDB on disk), and emits the average
// (8-byte movie id key, Java double value) to --output. A record that does
// not decode is logged and skipped. --http-addr serves /debug/pprof. The
// output topic must exist (goka creates its loop and table topics, not
// output streams; the runner creates it).
func gokaThroughput(args []string) error {
	fs := flag.NewFlagSet("goka-throughput", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka bootstrap servers, comma separated")
	group := fs.String("group", "goka-tp", "goka group (consumer group; table and loop topic prefix)")
	input := fs.String("input", "ratings", "input topic of Avro ratings")
	output := fs.String("output", "", "output topic of averages (default <group>-averages)")
	dir := fs.String("storage", "", "directory of the LevelDB storage")
	addr := fs.String("http-addr", "", "listen address of /debug/pprof (empty: none)")
	session := fs.Duration("session-timeout", 10*time.Second, "consumer group session timeout")
	instanceID := fs.String("instance-id", "", "sarama static membership id (empty: dynamic membership)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *dir == "" {
		return errors.New("goka-throughput: --brokers and --storage are required")
	}
	if *output == "" {
		*output = *group + "-averages"
	}
	cfg := goka.DefaultConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Consumer.Group.Session.Timeout = *session
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.InstanceId = *instanceID
	goka.ReplaceGlobalConfig(cfg)
	logger := log.New(os.Stderr, "goka ", log.LstdFlags|log.Lmicroseconds)

	g := goka.DefineGroup(goka.Group(*group),
		goka.Input(goka.Stream(*input), new(codec.Bytes), func(ctx goka.Context, msg any) {
			id, r, err := decodeRating(msg.([]byte))
			if err != nil {
				logger.Printf("skipping record %s/%d@%d: %v", ctx.Topic(), ctx.Partition(), ctx.Offset(), err)
				return
			}
			ctx.Loopback(string(binary.BigEndian.AppendUint64(nil, uint64(id))), r)
		}),
		goka.Loop(javaDouble{}, func(ctx goka.Context, msg any) {
			var cs countSum
			if v := ctx.Value(); v != nil {
				cs = v.(countSum)
			}
			cs.Count++
			cs.Sum += msg.(float64)
			ctx.SetValue(cs)
			ctx.Emit(goka.Stream(*output), ctx.Key(), cs.Sum/float64(cs.Count))
		}),
		goka.Output(goka.Stream(*output), javaDouble{}),
		goka.Persist(binaryCountSum{}),
	)
	proc, err := goka.NewProcessor(strings.Split(*brokers, ","), g,
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(gokaTopicManagerConfig())),
		goka.WithStorageBuilder(storage.DefaultBuilder(filepath.Join(*dir, "processor"))),
		goka.WithLogger(logger),
	)
	if err != nil {
		return fmt.Errorf("goka-throughput: processor: %w", err)
	}
	if *addr != "" {
		srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 5 * time.Second} // DefaultServeMux: pprof
		go func() { logger.Printf("pprof listener: %v", srv.ListenAndServe()) }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := proc.Run(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("goka-throughput: %w", err)
	}
	return nil
}
