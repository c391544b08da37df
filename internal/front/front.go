// Package front holds what the front ends of package limits (httplimit
// and grpclimit) share, whatever their protocol: rate policies and the
// bounded calls to their limiters, the all-or-nothing charging of several
// policies, and an exact count of the requests each client has in
// progress.
package front

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
)

// Reasons of refusals, as front ends report them.
const (
	ReasonRateLimited          = "rate_limited"           // a client's bucket is empty
	ReasonServerBusy           = "server_busy"            // the gate is full
	ReasonRequestTimeout       = "request_timeout"        // the request ran past its deadline
	ReasonLimiterError         = "limiter_error"          // a limiter failed, and the policy is to refuse
	ReasonTableFull            = "table_full"             // a limiter tracks as many clients as it may
	ReasonCostAboveBurst       = "cost_above_burst"       // the request costs more than a bucket holds
	ReasonInvalidCost          = "invalid_cost"           // the request's cost is negative
	ReasonConcurrencyLimited   = "concurrency_limited"    // the client has too many requests in progress
	ReasonConcurrencyTableFull = "concurrency_table_full" // too many clients have requests in progress
)

// DefaultLimiterTimeout bounds each call to a limiter that does not decide
// in process, unless configured otherwise.
const DefaultLimiterTimeout = 250 * time.Millisecond

// ErrLimiterTimeout is the error of a limiter call that did not return in
// time.
var ErrLimiterTimeout = errors.New("limiter did not answer in time")

// Rate is one rate policy of a front end: a limiter, the name it is known
// by, how its calls are bounded, and the count of its outcomes.
type Rate struct {
	// Name names the policy in responses and logs; Item is Name as a
	// Structured Field string, as the RateLimit header fields carry it.
	Name, Item string
	// Limiter decides.
	Limiter limits.Limiter
	// Timeout bounds each call to Limiter, unless it decides in process.
	Timeout time.Duration
	// Pre, if set, is a limiter in this process asked before Limiter: a
	// request it refuses is refused without a call to Limiter, and what
	// it charged is given back when Limiter refuses or fails.
	Pre *limits.GCRA
	// Counts counts the policy's outcomes.
	Counts Counts
	// Text keeps what a front end last wrote of the policy's limit, such
	// as its item of the RateLimit-Policy header field.
	Text TextCache

	local *limits.GCRA // Limiter, if it decides in process
}

// TextCache keeps the text a front end made of a policy's limit, so that
// a policy whose limit does not change (that of a local limiter) is
// formatted once rather than for every request. It is safe for
// concurrent use; the zero TextCache holds nothing.
type TextCache struct{ p atomic.Pointer[limitText] }

type limitText struct {
	limit  int
	period time.Duration
	text   string
}

// Get returns the text kept for a limit of limit events per period, if
// the last text kept is that limit's.
func (c *TextCache) Get(limit int, period time.Duration) (string, bool) {
	if t := c.p.Load(); t != nil && t.limit == limit && t.period == period {
		return t.text, true
	}
	return "", false
}

// PutFirst keeps text as the text of a limit of limit events per period,
// if c keeps no text yet: a policy whose limit varies (by key, say) keeps
// the first, rather than make every request pay for a new one.
func (c *TextCache) PutFirst(limit int, period time.Duration, text string) {
	c.p.CompareAndSwap(nil, &limitText{limit, period, text})
}

// Counts counts the outcomes of a policy, or of a whole front end, by
// reason.
type Counts struct {
	Allowed, RateLimited, TableFull, CostAboveBurst, InvalidCost, LimiterError atomic.Uint64
}

// Add counts one outcome: "" for an allowed request, otherwise its reason.
func (c *Counts) Add(reason string) {
	switch reason {
	case "":
		c.Allowed.Add(1)
	case ReasonRateLimited:
		c.RateLimited.Add(1)
	case ReasonTableFull:
		c.TableFull.Add(1)
	case ReasonCostAboveBurst:
		c.CostAboveBurst.Add(1)
	case ReasonInvalidCost:
		c.InvalidCost.Add(1)
	case ReasonLimiterError:
		c.LimiterError.Add(1)
	}
}

// NewRate returns the policy name applying l, whose calls are bounded by
// timeout (DefaultLimiterTimeout if 0), or an error if name cannot be sent
// in a header field.
func NewRate(name string, l limits.Limiter, timeout time.Duration) (*Rate, error) {
	item, ok := SFString(name)
	if !ok {
		return nil, fmt.Errorf("policy name %q must be printable ASCII", name)
	}
	if timeout == 0 {
		timeout = DefaultLimiterTimeout
	}
	r := &Rate{Name: name, Item: item, Limiter: l, Timeout: timeout}
	r.local, _ = l.(*limits.GCRA)
	return r, nil
}

// Named returns a policy that applies r's limiters (and shares their
// buckets) under another name, with counts of its own. name must be
// printable ASCII.
func (r *Rate) Named(name string) *Rate {
	item, _ := SFString(name)
	return &Rate{Name: name, Item: item, Limiter: r.Limiter, Timeout: r.Timeout, Pre: r.Pre, local: r.local}
}

// SFString returns s as a Structured Field string (RFC 9651): quoted, with
// backslash escapes for quotes and backslashes. It reports false if s holds
// a character such a string cannot: anything but printable ASCII.
func SFString(s string) (string, bool) {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"')), true
}

// Take asks the policy about a request of cost n for key: Pre first, if
// set, then the limiter. It returns what was charged, with the deciding
// Decision in Dec, or the limiter's error, in which case the limiter
// charged nothing but Pre's charge stays in the Charge: a failure policy
// speaks for the failing limiter only, so the caller keeps it (the request
// is served as if the limiter had allowed it) or gives it back with Refund.
func (r *Rate) Take(ctx context.Context, key string, n int) (Charge, error) {
	if r.local == nil {
		// A limiter out of process may keep the key (a table of leases,
		// a map): it gets a copy of its own, not one that shares the
		// memory of the request's state (see httplimit), which it would
		// otherwise keep alive with the whole request.
		key = strings.Clone(key)
	}
	c := Charge{Rate: r, Key: key}
	if r.Pre != nil {
		c.pre = r.Pre.AllowN(key, n)
		if !c.pre.Allowed {
			c.Dec = c.pre
			return c, nil
		}
	}
	var err error
	c.Dec, err = r.take(ctx, key, n)
	if r.Pre != nil && err == nil && !c.Dec.Allowed {
		r.Pre.Refund(ctx, key, c.pre)
		c.pre = limits.Decision{}
	}
	return c, err
}

// maxGrace bounds the time a limiter's context ends before the bound on
// its call (see take).
const maxGrace = 10 * time.Millisecond

// take asks the policy's limiter about a request of cost n for key. A
// limiter that decides in process is called directly. Any other is called
// on its own goroutine under ctx and the policy's timeout, and abandoned
// when that ends, so that one that never answers cannot hold a request:
// the call then fails with an error wrapping ErrLimiterTimeout and the
// context's error, and should the limiter allow the request after all, its
// charge is given back. The limiter's context ends a little before that
// bound (a tenth of the time left, at most maxGrace), so that a limiter
// that gives up at its deadline is heard: its error, with its cause (a
// refused connection, say), is the call's, rather than the bound's.
func (r *Rate) take(ctx context.Context, key string, n int) (limits.Decision, error) {
	if r.local != nil {
		return r.local.AllowN(key, n), nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	lctx, lcancel := ctx, context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		if grace := min(time.Until(d)/10, maxGrace); grace > 0 {
			lctx, lcancel = context.WithDeadline(ctx, d.Add(-grace))
		}
	}
	type result struct {
		d   limits.Decision
		err error
	}
	// done is unbuffered: an answer is either taken by the caller or, once
	// the caller has given up, refunded; never left behind.
	done := make(chan result)
	abandoned := make(chan struct{})
	go func() {
		defer cancel()
		defer lcancel()
		d, err := r.Limiter.Take(lctx, key, n)
		select {
		case done <- result{d, err}:
		case <-abandoned:
			if err == nil && d.Allowed {
				r.refundLate(key, d)
			}
		}
	}()
	select {
	case res := <-done:
		return res.d, res.err
	case <-ctx.Done():
		close(abandoned)
		// The answer may have come at the same time: prefer it.
		select {
		case res := <-done:
			return res.d, res.err
		default:
		}
		return limits.Decision{}, fmt.Errorf("%w: %w", ErrLimiterTimeout, ctx.Err())
	}
}

// refundLate gives back a charge that came after its caller gave up.
func (r *Rate) refundLate(key string, d limits.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	r.Limiter.Refund(ctx, key, d)
}

// Refund gives back what c charged, within the policy's timeout. An error
// means the limiter's charge stays.
func (c Charge) Refund(ctx context.Context) error {
	if c.Rate.Pre != nil {
		c.Rate.Pre.Refund(ctx, c.Key, c.pre)
	}
	if !c.Dec.Allowed {
		return nil // the limiter failed: Pre's charge was all there was
	}
	if c.Rate.local != nil {
		return c.Rate.local.Refund(ctx, c.Key, c.Dec)
	}
	ctx, cancel := context.WithTimeout(ctx, c.Rate.Timeout)
	defer cancel()
	return c.Rate.Limiter.Refund(ctx, c.Key, c.Dec)
}

// Charge is what one policy charged one request, or, refused, the
// Decision that refused it. A request served although the policy's
// limiter failed (FailOpen) keeps a Charge of Pre's charge alone, with a
// zero Dec.
type Charge struct {
	Rate *Rate
	Key  string
	Dec  limits.Decision
	pre  limits.Decision // Pre's charge
}

// Refusal says which layer refused a request, and why.
type Refusal struct {
	// Reason is one of the Reason codes.
	Reason string
	// Rate is the policy that refused, for refusals by a rate policy, and
	// Key the key of the bucket it refused.
	Rate *Rate
	Key  string
	// Dec is that policy's Decision, when it decided.
	Dec limits.Decision
	// Err is the limiter's error, for limiter_error.
	Err error
}

// ReasonOf returns the reason code of a refusing Decision.
func ReasonOf(d limits.Decision) string {
	switch d.Reason {
	case limits.ReasonTableFull:
		return ReasonTableFull
	case limits.ReasonCostAboveBurst:
		return ReasonCostAboveBurst
	case limits.ReasonInvalidCost:
		return ReasonInvalidCost
	case limits.ReasonUnavailable:
		return ReasonLimiterError
	}
	return ReasonRateLimited
}
