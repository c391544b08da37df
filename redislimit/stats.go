package redislimit

// This file holds a GCRA's counters: what Stats and CallStats report,
// the classification of failed calls by kind, and the histogram of the
// time calls take, counted with atomics on the call path.

import (
	"context"
	"errors"
	"io"
	"math/bits"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// LatencyBuckets is the number of bounded buckets of CallStats.Latency. Their
// upper bounds are LatencyBase doubled at each bucket: 25µs, 50µs, 100µs
// and so on up to 409.6ms; one more bucket counts the calls that took
// longer.
const LatencyBuckets = 15

// LatencyBase is the upper bound of the first bucket of
// CallStats.Latency.
const LatencyBase = 25 * time.Microsecond

// Stats is a snapshot of a GCRA's counters. Counters only grow, from 0
// when the GCRA was made. CallStats tells more about the calls to Redis.
type Stats struct {
	// Answered counts the decisions Redis made.
	Answered uint64
	// Errors counts the decisions Redis did not make: unreachable, too
	// slow for the deadline, or answering with an error. The failure
	// policy made each of them. In lease mode (WithLeases) a decision
	// counts here whether its own call failed or it waited for a lease
	// another request asked for and shared its failure; a lease taken
	// ahead that fails decides nothing and counts in
	// LeaseStats.AheadErrors instead.
	Errors uint64
	// Fallbacks counts the decisions made by the fallback GCRA; it is 0
	// unless the policy is WithFallback's, and then equals Errors.
	Fallbacks uint64
	// Refunds counts the refunds Redis applied, whether or not the key
	// still owed anything.
	Refunds uint64
	// RefundErrors counts the refunds Redis did not apply, for the reasons
	// of Errors: each left its charge in place.
	RefundErrors uint64
}

// CallStats is a snapshot of how a GCRA's calls to Redis went: why the
// decisions and refunds Redis did not make failed, and how long the calls
// took. Its counters only grow, from 0 when the GCRA was made.
type CallStats struct {
	// Failures counts the decisions of Stats.Errors and the refunds of
	// Stats.RefundErrors together, one each, by the kind of the failure
	// that left it undone: its fields add up to Errors + RefundErrors.
	// Without leases each is one failed call. In lease mode several
	// decisions may share one failed call, the lease they all waited for,
	// and each counts under that call's kind; a decision whose caller's
	// context ended while it waited counts as its context's end (Timeout
	// or Canceled). A lease taken ahead that fails counts in
	// LeaseStats.AheadErrors, not here.
	Failures Failures
	// Latency is the distribution of the time the calls took, decisions
	// and refunds, answered or not, from the call's start to its reply or
	// its deadline.
	Latency Latency
}

// Failures counts the decisions and refunds Redis did not make by what
// went wrong, as far as the error tells (see CallStats.Failures). When the
// time ran out while the client was failing to connect, the failure counts
// as Connection, not Timeout.
type Failures struct {
	// Timeout counts the failures whose deadline (WithTimeout's, or the
	// caller's context's) passed before Redis answered: Redis or the
	// network was too slow, or the client waited too long for a
	// connection from its pool. A refund that reached Redis after its
	// deadline, and gave nothing back, counts here too.
	Timeout uint64
	// Connection counts the failures to reach Redis: a connection
	// refused, reset or closed, an address that does not resolve, a
	// client already closed.
	Connection uint64
	// Canceled counts the failures whose caller's context was canceled
	// before Redis answered: a client gone, not a fault of Redis.
	Canceled uint64
	// Server counts the failures Redis answered with an error (a key
	// holding something other than a TAT, out of memory, a read-only
	// replica, a cluster down) or with a reply the GCRA could not use.
	Server uint64
	// Other counts the failures of no kind above.
	Other uint64
}

// Latency is a histogram of the time calls to Redis took, in fixed
// buckets whose upper bounds double from LatencyBase: Counts[i], for i <
// LatencyBuckets, counts the calls that took more than Bound(i-1) and at
// most Bound(i) (for i = 0, at most Bound(0)), and Counts[LatencyBuckets]
// those that took longer than Bound(LatencyBuckets-1). The buckets do not
// accumulate: a call is counted in one of them.
type Latency struct {
	// Counts holds the number of calls in each bucket.
	Counts [LatencyBuckets + 1]uint64
	// Count is the number of calls, the sum of Counts.
	Count uint64
	// Sum is the time all the calls took together.
	Sum time.Duration
}

// Bound returns the upper bound of bucket i of a Latency, LatencyBase <<
// i, for 0 <= i < LatencyBuckets. It panics for other i.
func (Latency) Bound(i int) time.Duration {
	if i < 0 || i >= LatencyBuckets {
		panic("redislimit: latency bucket out of range")
	}
	return LatencyBase << i
}

// counters are a GCRA's counters.
type counters struct {
	answered   atomic.Uint64
	errs       atomic.Uint64
	fallbacks  atomic.Uint64
	refunds    atomic.Uint64
	refundErrs atomic.Uint64
	failures   [nKinds]atomic.Uint64
	latency    [LatencyBuckets + 1]atomic.Uint64
	latencySum atomic.Int64 // nanoseconds
}

// kind is a kind of failure, an index into counters.failures.
type kind uint8

const (
	kindTimeout kind = iota
	kindConnection
	kindCanceled
	kindServer
	kindOther
	nKinds
)

// observe counts a call that took d. It costs two atomic additions and
// allocates nothing.
func (c *counters) observe(d time.Duration) {
	c.latency[bucket(d)].Add(1)
	c.latencySum.Add(int64(d))
}

// bucket returns the index of the Latency bucket a call of d falls in.
func bucket(d time.Duration) int {
	if d <= LatencyBase {
		return 0
	}
	// The least i with LatencyBase<<i >= d: the bit length of
	// ceil(d/LatencyBase) - 1.
	n := uint64((d + LatencyBase - 1) / LatencyBase)
	return min(bits.Len64(n-1), LatencyBuckets)
}

// failure counts a decision or a refund Redis did not make by the kind of
// err, the failure that left it undecided.
func (c *counters) failure(err error) {
	c.failures[classify(err)].Add(1)
}

// connectFailed is the error of a call whose time ran out while the client
// was failing to connect: it says why connecting failed, and its kind is
// Connection.
type connectFailed struct{ err error }

func (e *connectFailed) Error() string { return e.err.Error() }
func (e *connectFailed) Unwrap() error { return e.err }

// classify returns the kind of a failed call's error.
func classify(err error) kind {
	var redisErr redis.Error
	var netErr net.Error
	var errno syscall.Errno
	var connect *connectFailed
	switch {
	case errors.As(err, &connect):
		return kindConnection
	case errors.As(err, &redisErr), errors.Is(err, errReply):
		return kindServer
	case errors.Is(err, context.Canceled):
		return kindCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, errLate),
		errors.As(err, &netErr) && netErr.Timeout():
		return kindTimeout
	case errors.As(err, &netErr), errors.As(err, &errno), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolExhausted):
		return kindConnection
	}
	return kindOther
}

// Stats returns a snapshot of g's counters. Each counter is read
// atomically, but not all at the same instant.
func (g *GCRA) Stats() Stats { return g.statistics.stats() }

// CallStats returns a snapshot of how g's calls to Redis went. Each
// counter is read atomically, but not all at the same instant, nor at the
// instant of Stats; Latency.Count is the sum of the Latency buckets read.
func (g *GCRA) CallStats() CallStats { return g.statistics.callStats() }

// stats returns a snapshot of c as Stats.
func (c *counters) stats() Stats {
	return Stats{
		Answered:     c.answered.Load(),
		Errors:       c.errs.Load(),
		Fallbacks:    c.fallbacks.Load(),
		Refunds:      c.refunds.Load(),
		RefundErrors: c.refundErrs.Load(),
	}
}

// callStats returns a snapshot of c as CallStats.
func (c *counters) callStats() CallStats {
	s := CallStats{Failures: Failures{
		Timeout:    c.failures[kindTimeout].Load(),
		Connection: c.failures[kindConnection].Load(),
		Canceled:   c.failures[kindCanceled].Load(),
		Server:     c.failures[kindServer].Load(),
		Other:      c.failures[kindOther].Load(),
	}}
	for i := range c.latency {
		s.Latency.Counts[i] = c.latency[i].Load()
		s.Latency.Count += s.Latency.Counts[i]
	}
	s.Latency.Sum = time.Duration(c.latencySum.Load())
	return s
}
