// Package storebench measures the two engine.Store implementations (the
// Clover store in docstore and the Redis store in redisstore) side by side
// in one process, against the same documents and the same workloads, so
// their ratios come from one machine state. It holds no production code:
// everything is in its test files, and only
//
//	go test -run '^$' -bench BenchmarkStores ./internal/storebench
//
// builds the large stores (KEEPSTATE_BENCH_DOCS sets their size, default
// 1,000,000). A plain go test only runs a small check that the benchmark
// workloads follow the engine.Store contract. The numbers and their reading
// are in docs/benchmarks.md ("Clover vs Redis, side by side").
package storebench
