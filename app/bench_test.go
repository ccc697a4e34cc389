package app_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/keepstate/keepstate/app"
	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/internal/testkit"
)

// BenchmarkE2EThroughput measures the whole pipeline on kfake (on Apache
// Kafka with KEEPSTATE_TEST_KAFKA=real) for each store and processing
// guarantee side by side: b.N generated ratings over 10k movies with
// Zipf-skewed popularity are produced and the benchmark ends when every one
// has been applied; it reports ratings/s and the process's CPU per rating.
// Run it with -count to interleave the configurations.
func BenchmarkE2EThroughput(b *testing.B) {
	for _, store := range []string{app.StoreClover, app.StoreRedis} {
		for _, g := range []string{"exactly_once", "at_least_once"} {
			b.Run(store+"/"+g, func(b *testing.B) { benchThroughput(b, store, g) })
		}
	}
}

func benchThroughput(b *testing.B, store, guarantee string) {
	{
		{
			brokers := testkit.Kafka(b)
			reg := testkit.StartRegistry(b)
			c := app.Default()
			c.Brokers, c.SchemaRegistry = brokers, reg.URL()
			c.ApplicationID = testkit.UniqueName(b, "bench")
			// Fresh topics per run: on a shared Apache Kafka broker the
			// default "ratings" still holds earlier runs' records, framed
			// with schema ids of registries that are gone.
			c.InputTopic = testkit.UniqueName(b, "ratings")
			c.OutputTopic = testkit.UniqueName(b, "averages")
			c.DataDir = b.TempDir()
			c.HTTPAddr = "127.0.0.1:0"
			c.Partitions = 3
			c.Fsync = true
			c.Store = store
			c.ProcessingGuarantee = guarantee
			if store == app.StoreRedis {
				c.RedisURL = testkit.StartRedis(b).URL()
			}
			ctx, cancel := context.WithCancel(context.Background())
			addr := make(chan string, 1)
			done := make(chan error, 1)
			go func() { done <- app.Run(ctx, c, nil, func(a string) { addr <- a }) }()
			var api string
			select {
			case a := <-addr:
				api = "http://" + a
			case err := <-done:
				b.Fatalf("instance: %v", err)
			}
			defer func() { cancel(); <-done }()
			testkit.Eventually(b, 30*time.Second, "ready", func() error {
				if code, _ := testkit.GetJSON(api+"/readyz", nil); code != http.StatusOK {
					return fmt.Errorf("readyz %d", code)
				}
				return nil
			})
			p := app.DefaultProduce()
			p.Brokers, p.SchemaRegistry, p.Topic = c.Brokers, c.SchemaRegistry, c.InputTopic
			p.Count, p.Movies, p.Seed = int64(b.N), 10000, 1
			b.ResetTimer()
			cpu0 := cpuTime()
			start := time.Now()
			if _, err := app.Produce(context.Background(), p, nil); err != nil {
				b.Fatalf("produce: %v", err)
			}
			testkit.Eventually(b, 10*time.Minute, "all ratings applied", func() error {
				var st testkit.APIStats[engine.Stats]
				if _, err := testkit.GetJSON(api+"/api/stats", &st); err != nil {
					return err
				}
				if got := st.Stats.RecordsProcessed; got < int64(b.N) {
					return fmt.Errorf("%d of %d applied", got, b.N)
				}
				return nil
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ratings/s")
			// CPU per rating of the whole process (broker, registry,
			// producer and keepstate): steadier than ratings/s on a
			// shared machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/rating")
		}
	}
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
