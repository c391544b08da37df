// Package bench compares the counters and limiters of package limits with
// plain Go maps and with other Go rate-limiting libraries, on the same keys
// in the same run, and the middleware of package httplimit with
// go-chi/httprate's on the same handler.
//
// It is a module of its own, so that the libraries it compares never enter
// the go.mod of package limits. What it measures, over 1,000,000 keys:
//
//   - BenchmarkKeys1M: the time and allocations of one call to each
//     structure (Structures), filled with every key first, from one
//     goroutine and from 8;
//   - BenchmarkChurn1M: the same for the limiters configured so that each
//     key's state expires a millisecond after each request
//     (Structure.Churn), against the mutex map, which keeps its entries;
//   - BenchmarkLatency1M: the distribution of the time of single calls,
//     from one goroutine, for the mutex map, the GCRA and every peer, with
//     live keys and with churning ones: its median, 99th and 99.9th
//     percentiles and its maximum, as the metrics p50-ns, p99-ns, p99.9-ns
//     and max-ns, clock reads included;
//   - cmd/memory: the heap each structure holds for the keys.
//
// BenchmarkHTTP (http_test.go) measures the middlewares (Middlewares) on
// 1,024 client addresses. cmd/report runs them all and writes
// BENCHMARKS.md and the charts:
//
//	cd bench && go run ./cmd/report
package bench
