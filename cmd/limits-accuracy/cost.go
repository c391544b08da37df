package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/limitsgo/limits"
)

// Keys over which Observe is timed: as many as in BenchmarkKeys1M of
// package limits, so that a call finds its counters in cache only as far
// as the sketch fits there, and as few as in BenchmarkHot1024.
const (
	costKeys = 1_000_000
	hotKeys  = 1024
)

// costCalls is how many calls to Observe a timing makes.
const costCalls = 1 << 19

// timeObserve returns, for each candidate, the time Observe takes on a
// Rate whose windows are of its size and mode, one goroutine calling with
// costKeys keys in turn, then with hotKeys keys: for each, the least of
// three timings of costCalls calls. It runs after the measurements, alone,
// so that nothing else of this command competes with it.
func timeObserve(cands []candidate) map[candidate][2]float64 {
	keys := observeKeys()
	costs := make(map[candidate][2]float64, len(cands))
	for _, c := range cands {
		r := limits.NewRate(time.Hour, limits.Sizing{Hashes: c.size.hashes, Slots: c.size.slots, Conservative: c.conservative})
		var ns [2]float64
		for i, ks := range [2][]string{keys, keys[:hotKeys]} {
			ns[i] = math.Inf(1)
			for range 3 {
				ns[i] = min(ns[i], timeCalls(r, ks))
			}
		}
		costs[c] = ns
	}
	return costs
}

// timeCalls returns the time per call of costCalls calls of Observe on r,
// over keys in turn.
func timeCalls(r *limits.Rate, keys []string) float64 {
	start := time.Now()
	i := 0
	for range costCalls {
		r.Observe(keys[i], 1)
		if i++; i == len(keys) {
			i = 0
		}
	}
	return float64(time.Since(start).Nanoseconds()) / costCalls
}

// observeKeys returns costKeys distinct keys like "client-000123" in a
// fixed random order, their bytes in one block in the order they are
// used, so that reading them costs little next to Observe.
func observeKeys() []string {
	order := rand.New(rand.NewPCG(42, 42)).Perm(costKeys)
	buf := make([]byte, 0, 13*costKeys)
	for _, i := range order {
		buf = fmt.Appendf(buf, "client-%06d", i)
	}
	all := string(buf)
	keys := make([]string, costKeys)
	for i := range keys {
		keys[i], all = all[:13], all[13:]
	}
	return keys
}
