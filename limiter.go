package limits

import (
	"context"
	"fmt"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
)

// Limiter decides whether a request of some cost for a key may proceed, and
// can give back what it charged. It is the contract between the limiters
// (GCRA in this process, the Redis GCRA of package redislimit across a
// fleet) and the front ends that apply them to requests (packages
// httplimit and grpclimit); a front end takes any Limiter.
//
// A front end that charges several limiters for one request (a client
// address, then an API key) takes the request only if all allow it: when
// a later one refuses, it gives back what the earlier ones charged, so that
// a refused request costs nothing.
//
// Implementations must be safe for concurrent use. *GCRA implements it in
// process; package redislimit's GCRA across a fleet.
type Limiter interface {
	// Take decides a request of cost n for key now, and charges it if
	// allowed. An error means that no decision could be made (a store
	// unreachable, a deadline passed); a Decision returned with a nil
	// error is final, refusals included. Take must return by the time
	// ctx ends.
	Take(ctx context.Context, key string, n int) (Decision, error)
	// Refund gives back the charge of d, an allowed Decision that Take
	// returned for key: the part of it the key still owes, so that the
	// key is left owing no less than if the request had never been made,
	// whatever other requests did meanwhile. It does nothing for a refused
	// Decision or one of cost 0. An error means that nothing was given
	// back.
	Refund(ctx context.Context, key string, d Decision) error
}

// Decision is the answer of a limiter to one request, returned by value. Its
// durations are in nanoseconds, as time.Duration is; its zero value is the
// answer to nothing (Allowed false, the zero Reason) and is never
// returned by a limiter.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Reason says why the request was refused; it is the zero Reason,
	// "allowed", for an allowed request.
	Reason Reason
	// Limit is the policy's number of events per Period.
	Limit int
	// Period is the policy's period.
	Period time.Duration
	// Burst is the most unit requests a key may make at once.
	Burst int
	// Cost is the cost of the request decided, as asked.
	Cost int
	// Remaining is how many requests of cost 1 the key could make at At,
	// after this decision.
	Remaining int
	// RetryAfter, for a request refused with ReasonRateLimited, is exactly
	// how long after At the same request would be allowed: at At +
	// RetryAfter it is, and a nanosecond earlier it is not. It is 0 for
	// allowed requests and for refusals that waiting cannot cure or whose
	// end cannot be known (the other reasons).
	RetryAfter time.Duration
	// ResetAfter is how long after At the key is back to its full burst,
	// if it makes no more requests.
	ResetAfter time.Duration
	// At is when the decision was made, on the limiter's clock (for the
	// Redis limiter, the Redis server's): RetryAfter and ResetAfter count
	// from it. It is never earlier than the key's latest change.
	At time.Time

	// src is the GCRA that made the decision, if a GCRA did, and mark the
	// key's exact TAT after it, for Refund.
	src  *GCRA
	mark gcra.Time
}

// Reason says how a request went: allowed, or why it was refused. The
// limiters return the reasons below; package admit, which runs the layers
// of admission control (a gate, rate policies, per-client concurrency),
// defines the reasons of its other layers, so that one type names every
// outcome of every layer. Its zero value, whose code is "allowed", is
// the reason of an allowed request (admit.Allowed names it). A Reason
// indexes an array of its values: package admit counts outcomes so.
type Reason uint8

const (
	// reasonAllowed is the Reason of an allowed request: the zero Reason.
	reasonAllowed Reason = iota
	// ReasonRateLimited: the key has used its burst; see RetryAfter.
	ReasonRateLimited
	// ReasonTableFull: the key is new and the table is full of keys whose
	// state is in use.
	ReasonTableFull
	// ReasonCostAboveBurst: the request costs more than the burst, so it
	// can never be allowed.
	ReasonCostAboveBurst
	// ReasonInvalidCost: the request's cost is negative.
	ReasonInvalidCost
	// ReasonUnavailable: a limiter whose state lives elsewhere (such as the
	// Redis GCRA of package redislimit) could not reach it and refuses
	// rather than let the request through unmetered. It always comes with
	// an error; a GCRA never returns it. Its code is "limiter_error".
	ReasonUnavailable
)

// reasonNames are the codes of every Reason, those of package admit
// included, in the order of their values.
var reasonNames = [...]string{"allowed", "rate_limited", "table_full", "cost_above_burst", "invalid_cost", "limiter_error",
	"exempt", "server_busy", "request_timeout", "concurrency_limited", "concurrency_table_full"}

// MarshalText returns the reason's code, as String does.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText sets r to the reason whose code is text, such as
// "rate_limited", or returns an error if no reason has that code.
func (r *Reason) UnmarshalText(text []byte) error {
	for i, name := range reasonNames {
		if string(text) == name {
			*r = Reason(i)
			return nil
		}
	}
	return fmt.Errorf("limits: no reason has the code %q", text)
}

// String returns the reason as a code for logs, responses and metric
// labels, such as "rate_limited".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}
