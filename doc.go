// Package limits provides rate limiting and capacity control for Go services:
// limiters cheap enough to call on every request, in fixed or bounded memory.
//
// A service needs answers to three different questions, and one type does
// not answer them all:
//
//   - How fast may this caller go? That is fairness between callers. Rate
//     estimates each key's events per window in fixed memory, however many
//     keys there are, with counts that can be too high but never too low.
//     GCRA limits each key exactly, with a bounded table of keys.
//   - How much may this account use per day? That is a quota, and it must be
//     exact: a GCRA with a long period. ParseLimit reads limits such as
//     "5000/day" from configuration.
//   - Can this process take one more request now? That is survival, and no
//     per-caller count answers it: a hundred well-behaved callers can each
//     pass their own limit and together sink the machine. Gate caps the
//     requests in flight in the whole process; Inflight counts them per key.
//
// Estimator is the count-min sketch under Rate and Inflight, for counting
// anything else per key in fixed memory. Its error depends on the number of
// distinct keys it counts, not on the rate: Sizing picks a sketch's size
// from the keys expected and the over-count tolerated. For counts that only
// grow, ConservativeEstimator and NewConservativeRate count with conservative
// update, which over-counts less in the same memory: about half as much in a
// crowded sketch, far less in a roomy one.
//
// Rate, Inflight and Estimator are a port of Cloudflare's pingora-limits
// with its known faults fixed: Rate never panics, whatever the interval,
// never moves its windows back, does not let a caller that read the clock
// late clear a completed window, and keeps its windows on a fixed grid; an
// Inflight Guard gives back exactly what it took.
package limits
