package admit

// This file calls a policy's limiters: a GCRA in this process directly,
// any other on a goroutine of its own bounded in time, with a local GCRA
// asked first where one is configured in front of it.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/quota"
)

// errLimiterTimeout is the error of a limiter call that did not return
// in time.
var errLimiterTimeout = errors.New("limiter did not answer in time")

// errLimiterFailed is the error of a limiter that refused with
// limits.ReasonUnavailable and returned no error of its own.
var errLimiterFailed = errors.New("limiter could not decide (reason limiter_error)")

// maxGrace bounds the time a limiter's context ends before the bound on
// its call (see take).
const maxGrace = 10 * time.Millisecond

// limiter is one limit of a policy: a tier's, an override's, or the
// policy's own. It decides with remote, if set, asking local first; or
// with local alone.
type limiter struct {
	name, item string // as the rate limit fields name it; item is name as a Structured Field string
	local      *limits.GCRA
	remote     limits.Limiter
	timeout    time.Duration // bound on each call to remote
	// keys says the limiter reports its local GCRA's keys in Stats: the
	// first limiter of a policy to use a GCRA does, so that a sum counts
	// each table once.
	keys bool
	// tier names the tier the limiter applies to, if any.
	tier string
	// counter, if set, is a limiter of this process other than a GCRA (a
	// quota) that decides in place of local, alone or in front of remote.
	counter counter
	*kept
}

// counter is a limiter that decides in process, as a GCRA does.
type counter interface {
	limits.Limiter
	AllowN(key string, n int) limits.Decision
}

// peeker is a limiter that tells in process what it would decide.
type peeker interface {
	PeekN(key string, n int) limits.Decision
}

// peek returns what lim would decide for key at cost n, charging nothing,
// if it decides in process: the first refusal of its limiters of this
// process, or the last one's decision; false if a limiter out of process
// would have a say.
func (lim *limiter) peek(key string, n int) (limits.Decision, bool) {
	var ps [2]peeker
	k := 0
	switch {
	case lim.counter != nil:
		p, ok := lim.counter.(peeker)
		if !ok {
			return limits.Decision{}, false
		}
		ps[k], k = p, k+1
	case lim.local != nil:
		ps[k], k = lim.local, k+1
	}
	if lim.remote != nil {
		p, ok := lim.remote.(peeker)
		if !ok {
			return limits.Decision{}, false
		}
		ps[k], k = p, k+1
	}
	var d limits.Decision
	for _, p := range ps[:k] {
		if d = p.PeekN(key, n); !d.Allowed {
			break
		}
	}
	return d, k > 0
}

// kept is what a limiter keeps across updates of an engine's
// configuration: its local GCRA, with its keys' state, its counts and the
// text of its limit. A limiter, read by requests in flight, never changes;
// an update makes new ones that share what they keep.
type kept struct {
	gcra *limits.GCRA // the local GCRA, if any
	// quota is the local quota, if any, of period per in the time zone
	// loc.
	quota *quota.Quota
	per   quota.Calendar
	loc   string
	n     counts // the outcomes of the requests the limiter decided
	text  atomic.Pointer[limitText]
}

// counts counts outcomes by reason: those of requests, and those a layer
// in shadow mode would have had.
type counts struct {
	n      [numReasons]atomic.Uint64
	shadow [numReasons]atomic.Uint64
}

// limitText is the text a front end last made of a limiter's limit, such
// as its item of the RateLimit-Policy field: the limit of a local GCRA
// rarely changes, so it is formatted once.
type limitText struct {
	limit  int
	period time.Duration
	burst  int
	text   string
}

// outOfProcess reports whether lim asks a limiter out of process.
func (lim *limiter) outOfProcess() bool {
	if lim.remote == nil {
		return false
	}
	_, ok := lim.remote.(counter)
	return !ok
}

// charge is what one policy charged one request, or, refused, the
// Decision that refused it. A request served although the policy's
// remote limiter failed keeps a charge of the local limiter's alone, with
// a zero dec.
type charge struct {
	pol *policy
	lim *limiter
	key string
	dec limits.Decision
	pre limits.Decision // the local limiter's charge, when remote decides
	// hidden says the charge is not reported in the fields: its policy
	// only measures, or is the address's, for a request with a caller key.
	hidden bool
}

// take asks lim about a request of cost n for key: local first, if it
// stands in front of remote, then remote. It returns what was charged,
// with the deciding Decision in dec, or remote's error, in which case
// remote charged nothing but local's charge stays in the charge: a failure
// policy speaks for the failing limiter only, so the caller keeps it (the
// request is served as if remote had allowed it) or gives it back.
func (lim *limiter) take(ctx context.Context, key string, n int, deadline time.Time) (charge, error) {
	c := charge{lim: lim, key: key}
	if lim.remote == nil {
		if lim.counter != nil {
			c.dec = lim.counter.AllowN(key, n)
		} else {
			c.dec = lim.local.AllowN(key, n)
		}
		return c, nil
	}
	if g, ok := lim.remote.(counter); ok {
		// A limiter of this process, alone or behind a local one: both
		// decide in process.
		if lim.local != nil || lim.counter != nil {
			c.pre = lim.first(key, n)
			if !c.pre.Allowed {
				c.dec, c.pre = c.pre, limits.Decision{}
				return c, nil
			}
		}
		if c.dec = g.AllowN(key, n); !c.dec.Allowed {
			lim.refundFirst(ctx, key, c.pre)
			c.pre = limits.Decision{}
		}
		return c, nil
	}
	// A limiter out of process may keep the key (a table of leases, a
	// map): it gets a copy of its own, not one that shares the memory of
	// the request's state, which it would otherwise keep alive.
	key = strings.Clone(key)
	c.key = key
	if lim.local != nil || lim.counter != nil {
		c.pre = lim.first(key, n)
		if !c.pre.Allowed {
			c.dec = c.pre
			c.pre = limits.Decision{}
			return c, nil
		}
	}
	var err error
	c.dec, err = lim.call(ctx, key, n, deadline)
	if err == nil && !c.dec.Allowed {
		lim.refundFirst(ctx, key, c.pre)
		c.pre = limits.Decision{}
	}
	return c, err
}

// first asks the limiter of this process in front of remote: the quota,
// or the local GCRA.
func (lim *limiter) first(key string, n int) limits.Decision {
	if lim.counter != nil {
		return lim.counter.AllowN(key, n)
	}
	return lim.local.AllowN(key, n)
}

// refundFirst gives back what first charged, if anything.
func (lim *limiter) refundFirst(ctx context.Context, key string, d limits.Decision) {
	switch {
	case !d.Allowed:
	case lim.counter != nil:
		lim.counter.Refund(ctx, key, d)
	case lim.local != nil:
		lim.local.Refund(ctx, key, d)
	}
}

// call asks remote about a request of cost n for key, on a goroutine of
// its own under ctx, the limiter's timeout and the request's deadline (if
// not zero), and abandons it when that ends, so that a limiter that never
// answers cannot hold a request: the call then fails with an error
// wrapping errLimiterTimeout and the context's error, and should the
// limiter allow the request after all, its charge is given back. The
// limiter's context ends a little before that bound (a tenth of the time
// left, at most maxGrace), so that a limiter that gives up at its
// deadline is heard: its error, with its cause, is the call's.
func (lim *limiter) call(ctx context.Context, key string, n int, deadline time.Time) (limits.Decision, error) {
	bound := time.Now().Add(lim.timeout)
	if !deadline.IsZero() && deadline.Before(bound) {
		bound = deadline
	}
	ctx, cancel := context.WithDeadline(ctx, bound)
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
		d, err := lim.remote.Take(lctx, key, n)
		select {
		case done <- result{d, err}:
		case <-abandoned:
			if err == nil && d.Allowed {
				lim.refundLate(key, d)
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
		return limits.Decision{}, fmt.Errorf("%w: %w", errLimiterTimeout, ctx.Err())
	}
}

// refundLate gives back a charge that came after its caller gave up.
func (lim *limiter) refundLate(key string, d limits.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), lim.timeout)
	defer cancel()
	lim.remote.Refund(ctx, key, d)
}

// refund gives back what c charged, within the limiter's timeout. An error
// means the remote limiter's charge stays.
func (c *charge) refund(ctx context.Context) error {
	lim := c.lim
	if lim.remote == nil {
		if lim.counter != nil {
			return lim.counter.Refund(ctx, c.key, c.dec)
		}
		return lim.local.Refund(ctx, c.key, c.dec)
	}
	lim.refundFirst(ctx, c.key, c.pre)
	if !c.dec.Allowed {
		return nil // the remote limiter failed: the local charge was all there was
	}
	ctx, cancel := context.WithTimeout(ctx, lim.timeout)
	defer cancel()
	return lim.remote.Refund(ctx, c.key, c.dec)
}

// policyItem returns the Structured Field list item of the limiter in the
// RateLimit-Policy field for a limit of limit events per period in bursts
// of burst: its name with the q and w parameters (see window). The first
// limit a limiter reports is kept, since a limiter's limit rarely changes;
// any other is formatted anew.
func (lim *limiter) policyItem(limit int, period time.Duration, burst int) string {
	if t := lim.text.Load(); t != nil && t.limit == limit && t.period == period && t.burst == burst {
		return t.text
	}
	q, w := window(limit, period, burst)
	var buf [64]byte
	b := append(buf[:0], lim.item...)
	b = append(b, ";q="...)
	b = appendInt(b, q)
	b = append(b, ";w="...)
	b = appendInt(b, w)
	s := string(b)
	lim.text.CompareAndSwap(nil, &limitText{limit, period, burst, s})
	return s
}

// window returns the quota q and the window w, in whole seconds, that the
// rate limit fields announce for a limit of limit events per period in
// bursts of burst (limit if burst <= 0): w is the time a key takes to get
// its whole burst back, burst*period/limit, rounded up to a second (at
// least 1), and q the events the rate allows in w, rounded down. So q/w is
// never above the rate, and a key's requests left never above q: 100 per
// minute is q=100;w=60, 1 a second in bursts of 5 is q=5;w=5, and 10 per
// 100ms is q=100;w=1.
func window(limit int, period time.Duration, burst int) (q, w int64) {
	if limit <= 0 || period <= 0 {
		return int64(max(limit, 0)), 1
	}
	if burst <= 0 {
		burst = limit
	}
	if burst == limit && period%time.Second == 0 {
		return int64(limit), int64(period / time.Second)
	}
	sec := big.NewInt(int64(time.Second))
	l, p := big.NewInt(int64(limit)), big.NewInt(int64(period))
	// w = ceil(burst*period / (limit*1s)).
	num := new(big.Int).Mul(big.NewInt(int64(burst)), p)
	den := new(big.Int).Mul(l, sec)
	wb, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Sign() > 0 {
		wb.Add(wb, big.NewInt(1))
	}
	if !wb.IsInt64() {
		return int64(burst), math.MaxInt64 / int64(time.Second)
	}
	w = max(wb.Int64(), 1)
	// q = floor(w*1s*limit / period).
	qb := new(big.Int).Mul(big.NewInt(w), sec)
	qb.Mul(qb, l).Quo(qb, p)
	if !qb.IsInt64() {
		return math.MaxInt64, w
	}
	return qb.Int64(), w
}

// sfString returns s as a Structured Field string (RFC 9651): quoted, with
// backslash escapes for quotes and backslashes. It reports false if s holds
// a character such a string cannot: anything but printable ASCII.
func sfString(s string) (string, bool) {
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
