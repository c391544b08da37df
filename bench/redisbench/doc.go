// Package redisbench compares the Redis GCRA of package redislimit with
// github.com/go-redis/redis_rate on one local redis-server, started for the
// benchmark on a free loopback port (see package redistest): decisions per
// second from one goroutine and from many, and their latency.
//
//	go test -run '^$' -bench Redis -benchtime 3s ./redisbench
//
// BenchmarkRedisPaired alternates redislimit and redis_rate in blocks on
// one client and reports the ratio of their times, which holds on a
// machine whose load changes faster than the benchmarks run.
package redisbench
