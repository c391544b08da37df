// Package bench compares the counters and limiters of package limits with
// plain Go maps and with other Go rate-limiting libraries, on the same keys
// in the same run, and the middleware of package httplimit with
// go-chi/httprate's on the same handler.
//
// It is a module of its own, so that the libraries it compares never enter
// the go.mod of package limits. Its benchmarks are in bench_test.go
// (BenchmarkKeys1M) and http_test.go (BenchmarkHTTP); the memory program
// is cmd/memory; cmd/report runs them and writes BENCHMARKS.md and the
// charts:
//
//	cd bench && go run ./cmd/report
package bench
