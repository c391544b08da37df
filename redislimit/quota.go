package redislimit

// This file holds the calendar quota of package quota with its counts in
// Redis: one integer per key and period, which expires when its period
// ends, decided on the Redis server's clock.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/quota"
	"github.com/redis/go-redis/v9"
)

// maxQuotaLimit is the largest limit a Quota takes: counts and limits up
// to 2^53 are exact in the doubles of Lua.
const maxQuotaLimit = 1 << 53

// Quota is the calendar quota of package quota with its counts in Redis,
// so that a fleet of processes shares one quota per key: limit events per
// key per day, week or month in a time zone, resetting when each period
// starts. Its decisions are those a quota.Quota of the same Config would
// make at the Redis server's time, field for field: a request is allowed
// if the key's events this period and its cost are at most the limit; a
// refusal charges nothing and has RetryAfter exact to the start of the
// next period; Period is the length of the period that holds the
// decision (a day of 23 or 25 hours on the days clocks change) and Burst
// the limit. The Decision's At is the server's time.
//
// The time is the Redis server's, read with the TIME command inside the
// scripts, never the client's, so processes whose clocks disagree still
// count in the same periods. Lua cannot tell where a period of a time zone
// starts, so the client computes the period's bounds (quota.Calendar.Bounds)
// from its estimate of the server's clock (its own clock, corrected by the
// server's time in the latest reply) and sends them with the call; the
// script checks that the server's time lies within them. If it does not
// (the call crossed the start of a period, or the clocks disagree by more
// than the estimate knows), the script changes nothing and returns the
// server's time, and the client asks again with the bounds of the period
// that holds it.
//
// The count of key in a period is an integer stored under prefix + key +
// ":" + the period's first day in its time zone, such as
// "limits:key-123:2026-12-07" (for a week, its Monday; for a month, its
// first), set to expire when the period ends (EXPIREAT): no count outlives
// its period. A refusal, a cost of 0 and Peek write nothing. A key that
// holds anything but a count gives an error naming it, and the failure
// policy decides. Quotas of different Configs must not share a prefix.
//
// Refund gives back the cost of an allowed Decision to the count of the
// period that holds its At, while that period lasts and its count exists,
// never below 0: refunds are exact in any order.
//
// When Redis gives no decision (down, unreachable, slow beyond the
// deadline, or answering with an error), the failure policy chosen with
// OnError decides, as for a GCRA (see FailClosed and FailOpen), and the
// failure is counted in Stats and CallStats. A cost above the limit or a
// negative one is refused without a call to Redis, so never fails.
//
// All methods are safe for concurrent use. The zero value is not usable;
// call NewQuota.
type Quota struct {
	client   redis.UniversalClient
	per      quota.Calendar
	loc      *time.Location
	limit    atomic.Int64
	prefix   string
	timeout  time.Duration
	policy   ErrorPolicy
	onError  func(error)
	ctxAware bool       // the client bounds its socket I/O by the context
	dials    *dialWatch // the client's failed dials, or nil
	// skew is the server's clock minus the local clock at the latest
	// reply, in ns: the server's time, when read, behind the truth by at
	// most a round trip; unknown (and taken as 0) if math.MinInt64.
	skew       atomic.Int64
	period     atomic.Pointer[quotaPeriod] // the period latest computed
	statistics counters                    // what Stats and CallStats report

	// clock is the local clock, time.Now. Tests set it, and set fixed to
	// the time the scripts are to take in place of TIME, with scripts
	// that read it from their last two arguments (seconds and
	// microseconds); fixed is nil otherwise.
	clock                func() time.Time
	fixed                func() time.Time
	decideLua, refundLua *redis.Script
}

// quotaPeriod is a period of a Quota and what the scripts take of it.
type quotaPeriod struct {
	start, end       time.Time
	length           time.Duration
	startArg, endArg string // the bounds in seconds since the Unix epoch, in decimal
	suffix           string // ":" and the first day, ending the Redis key's name
}

// NewQuota returns a calendar quota configured by cfg, as quota.New does,
// with its counts in Redis through client: a *redis.Client, a Sentinel
// failover client or a *redis.ClusterClient, as redis.NewUniversalClient
// returns. Like New, it does not contact Redis, and calls are bounded by
// the caller's context and the timeout in the same way.
//
// The Options that apply are WithPrefix, WithHashTag, WithTimeout, OnError
// and WithErrorHandler, as for a GCRA. NewQuota returns an error for
// WithBurst (a quota's burst is its limit), WithLeases and WithFallback
// (whose GCRA counts no calendar periods), and for cfg.MaxKeys other than
// 0: Redis holds the counts, in the memory it is given. It also returns
// an error for a Config quota.New refuses (a limit below 1, an unknown
// period), a limit above 2^53, and the option values New refuses. It
// panics if client is nil, a programming error.
func NewQuota(client redis.UniversalClient, cfg quota.Config, opts ...Option) (*Quota, error) {
	const unset = math.MinInt
	o := options{burst: unset, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if client == nil {
		panic("redislimit: nil client")
	}
	if _, err := quota.New(cfg); err != nil {
		return nil, fmt.Errorf("redislimit: %w", err)
	}
	switch {
	case cfg.Limit > maxQuotaLimit:
		return nil, fmt.Errorf("redislimit: a quota's Limit must be at most 2^53, got %d", cfg.Limit)
	case cfg.MaxKeys != 0:
		return nil, fmt.Errorf("redislimit: a quota in Redis has no MaxKeys, got %d: Redis holds the counts", cfg.MaxKeys)
	case o.burst != unset:
		return nil, errors.New("redislimit: WithBurst does not apply to a quota: its burst is its limit")
	case o.leases:
		return nil, errors.New("redislimit: WithLeases does not apply to a quota")
	case o.policy == fallback:
		return nil, errors.New("redislimit: WithFallback does not apply to a quota, whose fallback would need calendar periods: use OnError(FailClosed) or OnError(FailOpen)")
	case o.policy > fallback:
		return nil, fmt.Errorf("redislimit: unknown failure policy %d", o.policy)
	case o.timeout <= 0:
		return nil, fmt.Errorf("redislimit: timeout must be > 0, got %v", o.timeout)
	case o.hashTag && (o.prefix == "" || strings.ContainsAny(o.prefix, "{}")):
		return nil, fmt.Errorf("redislimit: a hash tag needs a non-empty prefix without braces, got %q", o.prefix)
	}
	if o.hashTag {
		o.prefix = "{" + o.prefix + "}"
	}
	q := &Quota{
		client:    client,
		per:       cfg.Per,
		loc:       cfg.Location,
		prefix:    o.prefix,
		timeout:   o.timeout,
		policy:    o.policy,
		onError:   o.onError,
		dials:     watchDials(client),
		clock:     time.Now,
		decideLua: quotaDecideScript,
		refundLua: quotaRefundScript,
	}
	if q.per == 0 {
		q.per = quota.Day
	}
	if q.loc == nil {
		q.loc = time.UTC
	}
	q.ctxAware = honorsContext(client) || q.dials.diverts()
	q.skew.Store(math.MinInt64)
	q.limit.Store(int64(cfg.Limit))
	return q, nil
}

// SetLimit changes the events a key may have per period, at once, for the
// decisions q makes after it: the counts of this period are kept, so a
// key that has used more than a lower limit is refused until the next
// period, and under a higher one it gains only the room the new limit
// adds. The limit is each process's: each process of a fleet calls
// SetLimit itself. It returns an error, and changes nothing, for a limit
// NewQuota would refuse.
func (q *Quota) SetLimit(limit int) error {
	if limit < 1 || limit > maxQuotaLimit {
		return fmt.Errorf("redislimit: a quota's Limit must be >= 1 and at most 2^53, got %d", limit)
	}
	q.limit.Store(int64(limit))
	return nil
}

// Limit returns the events a key may have per period.
func (q *Quota) Limit() int { return int(q.limit.Load()) }

// Per returns the period q counts over: quota.Day, quota.Week or
// quota.Month.
func (q *Quota) Per() quota.Calendar { return q.per }

// Location returns the time zone q's periods start in.
func (q *Quota) Location() *time.Location { return q.loc }

// Key returns the name of the Redis key that holds key's count for the
// period that holds t.
func (q *Quota) Key(key string, t time.Time) string { return q.prefix + key + q.periodAt(t).suffix }

// Allow decides a request of cost 1 for key. It is AllowN(ctx, key, 1).
func (q *Quota) Allow(ctx context.Context, key string) (limits.Decision, error) {
	return q.AllowN(ctx, key, 1)
}

// AllowN decides a request of cost n for key now, on the Redis server's
// clock, and counts it if allowed, in one round trip: allowed if the key's
// events this period and n are at most the limit. A refused request, with
// reason limits.ReasonRateLimited, may be made again RetryAfter later,
// when the next period starts. A cost above the limit is refused with
// limits.ReasonCostAboveBurst, a negative one with
// limits.ReasonInvalidCost, both without a call to Redis, with At the
// client's estimate of the server's time; a cost of 0 is allowed and
// counts nothing. Remaining is what the key has left this period, and
// ResetAfter the time until the period ends, while the key has events
// counted.
//
// When Redis answers, the error is nil. When it does not, the failure
// policy decides: FailClosed returns an error wrapping ErrUnavailable and
// the cause, with a Decision refused with limits.ReasonUnavailable that
// has the limit, the period, the cost and every other field 0, At
// included; FailOpen allows such a Decision, with a nil error.
func (q *Quota) AllowN(ctx context.Context, key string, n int) (limits.Decision, error) {
	return q.decide(ctx, key, n, true)
}

// Take is AllowN, for the limits.Limiter interface.
func (q *Quota) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	return q.decide(ctx, key, n, true)
}

// Peek reports what Allow would decide for key now, counting nothing. The
// failure policies apply as for AllowN.
func (q *Quota) Peek(ctx context.Context, key string) (limits.Decision, error) {
	return q.decide(ctx, key, 1, false)
}

// now returns q's estimate of the server's clock.
func (q *Quota) now() time.Time {
	t := q.clock()
	if s := q.skew.Load(); s != math.MinInt64 {
		t = t.Add(time.Duration(s))
	}
	return t.Round(0)
}

// periodAt returns the period that holds t.
func (q *Quota) periodAt(t time.Time) *quotaPeriod {
	if p := q.period.Load(); p != nil && !t.Before(p.start) && t.Before(p.end) {
		return p
	}
	start, end := q.per.Bounds(t, q.loc)
	p := &quotaPeriod{
		start:    start,
		end:      end,
		length:   end.Sub(start),
		startArg: strconv.FormatInt(start.Unix(), 10),
		endArg:   strconv.FormatInt(end.Unix(), 10),
		suffix:   ":" + start.Format(time.DateOnly),
	}
	q.period.Store(p)
	return p
}

// decide makes the decision for a request of cost n, counted if charge
// is true.
func (q *Quota) decide(ctx context.Context, key string, n int, charge bool) (limits.Decision, error) {
	limit := q.limit.Load()
	now := q.now()
	p := q.periodAt(now)
	d := limits.Decision{Limit: int(limit), Burst: int(limit), Period: p.length, Cost: n}
	switch {
	case n < 0:
		d.Reason, d.At = limits.ReasonInvalidCost, now
		return d, nil
	case int64(n) > limit:
		d.Reason, d.At = limits.ReasonCostAboveBurst, now
		return d, nil
	}
	flag := "0"
	if charge && n > 0 {
		flag = "1"
	}
	cost, lim := strconv.Itoa(n), strconv.FormatInt(limit, 10)
	ctx, cancel := q.bound(ctx)
	defer cancel()
	for tries := 1; ; tries++ {
		r, err := q.call(ctx, q.decideLua, q.prefix+key+p.suffix, []any{p.startArg, p.endArg, cost, lim, flag})
		if err == nil && r.flag == quotaElsewhen {
			if tries < 3 {
				p = q.periodAt(r.now) // the server's period: ask again
				continue
			}
			err = fmt.Errorf("%w: the server's time %v is outside the period from %v", errReply, r.now, p.start)
		}
		if err != nil {
			return q.failed(d, err)
		}
		q.statistics.answered.Add(1)
		d.Period, d.At = p.length, r.now
		d.Remaining = int(max(limit-r.used, 0))
		until := p.end.Sub(r.now)
		if r.used > 0 {
			d.ResetAfter = until
		}
		if r.flag == 1 {
			d.Allowed = true
		} else {
			d.Reason, d.RetryAfter = limits.ReasonRateLimited, until
		}
		return d, nil
	}
}

// failed applies the failure policy to a request Redis did not decide,
// whose Decision d has its limit, period and cost.
func (q *Quota) failed(d limits.Decision, err error) (limits.Decision, error) {
	q.statistics.errs.Add(1)
	q.statistics.failure(err)
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if q.onError != nil {
		q.onError(err)
	}
	if q.policy == FailOpen {
		d.Allowed = true
		return d, nil
	}
	d.Reason = limits.ReasonUnavailable
	return d, err
}

// Refund gives back the cost of d, an allowed Decision that AllowN, Take
// or Allow returned for key, to the count of the period that holds d.At,
// in one call of a script that reads and writes the count atomically: the
// count goes down by d.Cost, never below 0, and is deleted at 0. Refunds
// are exact in any order. Once d's period has ended, on the server's
// clock, or its count is gone, nothing is given back.
//
// Refund does nothing and returns nil for a refused Decision, one of cost
// 0, one that counted nothing (the FailOpen answer, whose At is zero), or
// one no Quota made (whose At carries a monotonic clock reading, as times
// from time.Now do, while the server's times carry none).
//
// When Redis does not answer in time, or answers with an error, Refund
// returns an error wrapping ErrUnavailable and the cause, calls the
// WithErrorHandler function and counts the failure in Stats, whatever the
// failure policy, and the count stays as it was. A refund that reached
// Redis after its caller's deadline, on the server's clock as q estimates
// it, erring early, gives nothing back, as a GCRA's does.
func (q *Quota) Refund(ctx context.Context, key string, d limits.Decision) error {
	if !d.Allowed || d.Cost <= 0 || d.Cost > d.Limit || d.At.IsZero() || d.At != d.At.Round(0) {
		return nil
	}
	p := q.periodAt(d.At)
	ctx, cancel := q.bound(ctx)
	defer cancel()
	deadline, off := "", ""
	if end, ok := ctx.Deadline(); ok && q.skew.Load() != math.MinInt64 {
		at := q.now().Add(time.Until(end))
		deadline, off = strconv.FormatInt(at.Unix(), 10), strconv.Itoa(at.Nanosecond()/1e3)
	}
	r, err := q.call(ctx, q.refundLua, q.prefix+key+p.suffix, []any{p.endArg, strconv.Itoa(d.Cost), deadline, off})
	if err == nil && r.flag == quotaLate {
		err = errLate
	}
	if err != nil {
		q.statistics.refundErrs.Add(1)
		q.statistics.failure(err)
		err = fmt.Errorf("%w: refund not applied: %w", ErrUnavailable, err)
		if q.onError != nil {
			q.onError(err)
		}
		return err
	}
	q.statistics.refunds.Add(1)
	return nil
}

// bound returns ctx, ending no later than the timeout from now.
func (q *Quota) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > q.timeout {
		return context.WithTimeout(ctx, q.timeout)
	}
	return ctx, func() {}
}

// quotaReply is what a quota script returned.
type quotaReply struct {
	flag int64     // quotaRefused, quotaAllowed, quotaElsewhen, or for a refund quotaLate
	used int64     // the key's count after the script
	now  time.Time // the server's clock, TIME
}

// The flags of a quota script's reply.
const (
	quotaRefused  = 0 // refused; for a refund, nothing given back
	quotaAllowed  = 1 // allowed; for a refund, given back
	quotaElsewhen = 2 // the server's time lies outside the period sent
	quotaLate     = 3 // a refund that ran after its deadline, and gave nothing back
)

// call runs script s for the Redis key rkey, within ctx, which bound has
// bounded, as GCRA calls its scripts, and reads its reply.
func (q *Quota) call(ctx context.Context, s *redis.Script, rkey string, args []any) (quotaReply, error) {
	if q.fixed != nil {
		t := q.fixed()
		args = append(args, strconv.FormatInt(t.Unix(), 10), strconv.Itoa(t.Nanosecond()/1e3))
	}
	start := time.Now()
	var vals []any
	var err error
	if q.ctxAware {
		vals, err = s.Run(q.dials.boundContext(ctx), q.client, []string{rkey}, args...).Slice()
	} else {
		vals, err = q.runAsync(ctx, s, rkey, args)
	}
	q.statistics.observe(time.Since(start))
	var r quotaReply
	if err == nil {
		if r, err = quotaReplyOf(vals); err == nil {
			// The server read its clock before the reply came: this skew
			// puts its clock behind the truth by at most a round trip.
			q.skew.Store(int64(r.now.Sub(q.clock())))
			return r, nil
		}
		return r, err
	}
	if cause := ended(ctx, err); cause != nil {
		if !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		if dial := q.dials.since(start); dial != nil {
			return r, &connectFailed{fmt.Errorf("%w, connecting failed: %w", err, dial)}
		}
	}
	return r, err
}

// runAsync runs a script on a goroutine of its own and waits for it no
// longer than ctx allows, for clients that do not bound their socket I/O
// by the context, as GCRA.callAsync does.
func (q *Quota) runAsync(ctx context.Context, s *redis.Script, rkey string, args []any) ([]any, error) {
	type result struct {
		vals []any
		err  error
	}
	done := make(chan result, 1)
	go func() {
		vals, err := s.Run(ctx, q.client, []string{rkey}, args...).Slice()
		done <- result{vals, err}
	}()
	select {
	case res := <-done:
		return res.vals, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// quotaReplyOf reads the four integers a quota script returns.
func quotaReplyOf(vals []any) (quotaReply, error) {
	n, err := naturals(vals)
	if err != nil {
		return quotaReply{}, err
	}
	if n[0] > quotaLate || n[3] >= 1e6 {
		return quotaReply{}, fmt.Errorf("%w: %v", errReply, vals)
	}
	return quotaReply{flag: n[0], used: n[1], now: time.Unix(n[2], n[3]*1e3)}, nil
}

// Stats returns a snapshot of q's counters, as GCRA.Stats does; Fallbacks
// is always 0. Each counter is read atomically, but not all at the same
// instant.
func (q *Quota) Stats() Stats { return q.statistics.stats() }

// CallStats returns a snapshot of how q's calls to Redis went, as
// GCRA.CallStats does.
func (q *Quota) CallStats() CallStats { return q.statistics.callStats() }

var _ limits.Limiter = (*Quota)(nil)

// quotaClock reads the server's time into now_s and now_us, the first
// line of each quota script. Tests put another line in its place.
const quotaClock = `local clock = redis.call('TIME')
`

// quotaDecideLua decides a request for the count KEYS[1] of a key in one
// period, on the clock of the Redis server that holds it.
//
// Arguments: ARGV[1] and ARGV[2] are the period's start and end in whole
// seconds since the Unix epoch; ARGV[3] the cost n, 0 to the limit;
// ARGV[4] the limit; ARGV[5] "1" to count an allowed request, "0" to look
// only.
//
// If the server's time lies outside the period, it changes nothing and
// returns flag 2, for the client to ask again with the server's period.
// Otherwise the request is allowed if n is 0 or the count and n are at
// most the limit; an allowed request counted adds n to the count (INCRBY) and sets
// the key to expire at the period's end (EXPIREAT). Counts and limits are
// at most 2^53, exact in doubles.
//
// It returns four integers: the flag (1 allowed, 0 refused, 2 outside the
// period), the count after, and the server's time in seconds and
// microseconds.
const quotaDecideLua = `
local now_s, now_us = tonumber(clock[1]), tonumber(clock[2])
if now_s < tonumber(ARGV[1]) or now_s >= tonumber(ARGV[2]) then return {2, 0, now_s, now_us} end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a count: ' .. tostring(v.err))
end
local used = 0
if v then
  if not string.find(v, '^%d+$') then
    return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a count')
  end
  used = tonumber(v)
end
local n = tonumber(ARGV[3])
if n > 0 and n > tonumber(ARGV[4]) - used then return {0, used, now_s, now_us} end
if ARGV[5] == '1' then
  used = redis.call('INCRBY', KEYS[1], n)
  redis.call('EXPIREAT', KEYS[1], ARGV[2])
end
return {1, used, now_s, now_us}
`

// quotaRefundLua gives back a cost to the count KEYS[1] of a key in one
// period.
//
// Arguments: ARGV[1] is the period's end in whole seconds since the Unix
// epoch; ARGV[2] the cost; ARGV[3] and ARGV[4] the latest time, on the
// server's clock, in seconds and microseconds, at which the caller still
// waits for the reply, or "" and "" if it is not known.
//
// A script run after that deadline, or once the period has ended, or for
// a count that does not exist, changes nothing. Otherwise the count goes
// down by the cost, and the key is deleted if that leaves 0 or less; its
// expiry stays.
//
// It returns four integers: the flag (1 given back, 0 not, 3 too late),
// the count after, and the server's time in seconds and microseconds.
const quotaRefundLua = `
local now_s, now_us = tonumber(clock[1]), tonumber(clock[2])
if ARGV[3] ~= '' then
  local ds, dus = tonumber(ARGV[3]), tonumber(ARGV[4])
  if now_s > ds or (now_s == ds and now_us > dus) then return {3, 0, now_s, now_us} end
end
if now_s >= tonumber(ARGV[1]) then return {0, 0, now_s, now_us} end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a count: ' .. tostring(v.err))
end
if not v then return {0, 0, now_s, now_us} end
if not string.find(v, '^%d+$') then
  return redis.error_reply('redislimit: key ' .. KEYS[1] .. ' does not hold a count')
end
local left = tonumber(v) - tonumber(ARGV[2])
if left > 0 then
  redis.call('DECRBY', KEYS[1], ARGV[2])
  return {1, left, now_s, now_us}
end
redis.call('DEL', KEYS[1])
return {1, 0, now_s, now_us}
`

// The quota's scripts, with their SHA-1.
var (
	quotaDecideScript = redis.NewScript(quotaClock + quotaDecideLua)
	quotaRefundScript = redis.NewScript(quotaClock + quotaRefundLua)
)
