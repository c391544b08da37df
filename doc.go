// Package limits provides rate limiting and capacity control for Go
// services: limiters cheap enough to call on every request, in fixed or
// bounded memory.
//
// A service needs answers to three different questions, and one type does
// not answer them all:
//
//   - How fast may this caller go? That is fairness between callers. GCRA
//     limits each key exactly, with a bounded table of keys and an exact
//     RetryAfter; Rate estimates each key's events per window in fixed
//     memory, however many keys there are, with counts that can be too high
//     but never too low.
//   - How much may this account use per day? That is a quota, and it must be
//     exact: a GCRA with a long period (and, across a fleet, the Redis GCRA
//     of package redislimit). ParseLimit reads limits such as "5000/day"
//     from configuration, and NewGCRAFor builds a GCRA from one with an
//     error rather than a panic.
//   - Can this process take one more request now? That is survival, and no
//     per-caller count answers it: a hundred well-behaved callers can each
//     pass their own limit and together sink the machine. Gate caps the
//     requests in flight in the whole process, with places kept for the
//     critical ones (WithReserve, Priority); Inflight estimates them per
//     key.
//
// Limiter is the contract between the limiters (GCRA in this process,
// redislimit's across a fleet) and the front ends that apply them to
// requests (packages httplimit and grpclimit): Take decides and charges,
// Refund gives a charge back, so that a request refused by a later layer
// costs nothing.
//
// Estimator is the count-min sketch under Rate and Inflight, for counting
// anything else per key in fixed memory. Its error depends on the number of
// distinct keys it counts, not on the rate: a Sizing, passed as an option,
// sizes a sketch from the keys expected and the over-count tolerated, and
// selects conservative update, which over-counts less for counts that only
// grow.
//
// Rate, Inflight and Estimator are a port of Cloudflare's pingora-limits
// with its known faults fixed: Rate never panics, whatever the interval,
// never moves its windows back, does not let a caller that read the clock
// late clear a completed window, and keeps its windows on a fixed grid; an
// Inflight Guard gives back exactly what it took.
//
// Every type is safe for concurrent use, and none starts a goroutine.
package limits
