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
//     exact: a calendar quota of package quota, reset at midnight in a
//     time zone, or a GCRA with a long period (and, across a fleet, the
//     Redis GCRA of package redislimit). A Limit reads limits such as
//     "5000/day" from configuration (UnmarshalText).
//   - Can this process take one more request now? That is survival, and no
//     per-caller count answers it: a hundred well-behaved callers can each
//     pass their own limit and together sink the machine. Gate caps the
//     requests in flight in the whole process, with places kept for the
//     critical ones (WithReserve, Priority); Inflight estimates them per
//     key.
//
// Limiter is the contract between the limiters (GCRA in this process,
// redislimit's across a fleet, a quota.Quota) and the admission engine that
// applies them to requests: Take decides and charges, Refund gives a
// charge back, so that a request refused by a later layer costs nothing.
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
//
// The packages around this one:
//
//   - admit: the admission engine, every layer in one order (exemptions,
//     the gate, rates per client and per key, route policies, tiers,
//     quotas, per-client concurrency), for any protocol, configured as
//     data and changed while serving.
//   - httplimit and grpclimit: the engine's adapters, net/http middleware
//     and gRPC interceptors, with their client sides (httplimit.Transport,
//     grpclimit.ClientInterceptor).
//   - quota: calendar quotas, per day, week or month in a time zone.
//   - pace: the engine of the client side, which keeps calls under the
//     limits the servers announce.
//   - adaptive: a controller that finds a Gate's limit from latency.
//   - metrics: one description of every component's metrics, which the
//     Prometheus and OpenTelemetry exporters (modules limitsprom and
//     limitsotel) export.
//   - heavy: the keys with the largest counts, next to a sketch.
package limits
