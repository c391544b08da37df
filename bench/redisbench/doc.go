// Package redisbench compares the Redis GCRA of package redislimit with
// github.com/go-redis/redis_rate on one local redis-server, started for the
// benchmark on a free loopback port (see package redistest): decisions per
// second from one goroutine and from many, and their latency.
//
//	go test -run '^$' -bench Redis -benchtime 3s ./redisbench
package redisbench
