// Package quota provides calendar quotas: a number of events per key per
// day, week or month in a time zone, resetting at the start of each, as
// billing and API plans count them ("100 calls a day, from midnight in
// Paris"), rather than over a sliding window as a limits.GCRA does.
//
// A Quota is a limits.Limiter, so every front end of package admit takes
// it as a policy's limiter; redislimit has the same quota for a fleet.
// Its decisions follow the GCRA's contract: a refusal charges nothing,
// RetryAfter is exact (the time until the next period starts), refunds
// are exact in any order, and no key's state outlives its period.
package quota

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
)

// Calendar is the period a quota counts over, from its start: a day, a
// week (from Monday) or a month, in a time zone.
type Calendar uint8

// The periods of a quota.
const (
	Day Calendar = iota + 1
	Week
	Month
)

// String returns "day", "week" or "month".
func (c Calendar) String() string {
	switch c {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// Bounds returns the start and the end of the period of c that holds t,
// in loc: midnight to midnight for a day, however long the day (23 or 25
// hours on the days clocks change); Monday to Monday for a week; the
// first of the month to the first of the next. A zero c is taken as Day.
func (c Calendar) Bounds(t time.Time, loc *time.Location) (start, end time.Time) {
	t = t.In(loc)
	y, m, d := t.Date()
	switch c {
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case Month:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// Config configures a Quota.
type Config struct {
	// Limit is how many events a key may have per period; it must be
	// positive.
	Limit int
	// Per is the period: Day, Week or Month; 0 means Day.
	Per Calendar
	// Location is the time zone the periods start in; nil means UTC.
	Location *time.Location
	// MaxKeys caps the keys counted in a period; 0 means 1,048,576. A new
	// key finding the table full of keys counted this period is refused
	// with limits.ReasonTableFull: filling the table never switches the
	// quota off.
	MaxKeys int
}

// Quota limits each key to a number of events per calendar period, exact
// per key. It is safe for concurrent use; make one with New.
type Quota struct {
	limit   atomic.Int64
	per     Calendar
	loc     *time.Location
	maxKeys int64
	seed    maphash.Seed
	keys    atomic.Int64 // keys counted, in shards of this period or the last
	period  atomic.Pointer[period]
	shards  [64]shard
}

// period is one period's bounds, in nanoseconds since the Unix epoch.
type period struct{ start, end int64 }

type shard struct {
	mu    sync.Mutex
	start int64            // the start of the period counted
	n     map[string]int64 // events per key
}

// New returns a Quota configured by cfg, or an error for a limit below 1,
// an unknown period or a negative MaxKeys.
func New(cfg Config) (*Quota, error) {
	switch {
	case cfg.Limit < 1:
		return nil, fmt.Errorf("quota: Limit must be >= 1, got %d", cfg.Limit)
	case cfg.Per > Month:
		return nil, fmt.Errorf("quota: Per must be Day, Week or Month, got %v", cfg.Per)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("quota: MaxKeys must not be negative, got %d", cfg.MaxKeys)
	}
	q := &Quota{per: cfg.Per, loc: cfg.Location, maxKeys: int64(cfg.MaxKeys), seed: maphash.MakeSeed()}
	if q.per == 0 {
		q.per = Day
	}
	if q.loc == nil {
		q.loc = time.UTC
	}
	if q.maxKeys == 0 {
		q.maxKeys = 1 << 20
	}
	q.limit.Store(int64(cfg.Limit))
	return q, nil
}

// SetLimit changes the events a key may have per period, at once: the
// counts of this period are kept, so a key that has used more than a
// lower limit is refused until the next period. It returns an error, and
// changes nothing, for a limit below 1.
func (q *Quota) SetLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("quota: Limit must be >= 1, got %d", limit)
	}
	q.limit.Store(int64(limit))
	return nil
}

// Limit returns the events a key may have per period.
func (q *Quota) Limit() int { return int(q.limit.Load()) }

// MaxKeys returns the most keys q counts in a period.
func (q *Quota) MaxKeys() int { return int(q.maxKeys) }

// current returns the period that holds now, in nanoseconds since the
// Unix epoch.
func (q *Quota) current(now time.Time) *period {
	ns := now.UnixNano()
	if p := q.period.Load(); p != nil && p.start <= ns && ns < p.end {
		return p
	}
	start, end := q.per.Bounds(now, q.loc)
	p := &period{start.UnixNano(), end.UnixNano()}
	q.period.Store(p)
	return p
}

// AllowN decides an event of cost n for key now, and counts it if
// allowed: allowed if the key's events this period and n are at most the
// limit. A refused request, with reason limits.ReasonRateLimited, may be
// made again RetryAfter later, when the next period starts; a cost above
// the limit is refused with limits.ReasonCostAboveBurst, a negative one
// with limits.ReasonInvalidCost; a cost of 0 is always allowed and counts
// nothing. The Decision's Period is the period's length (a day of 23
// hours included), its Burst the limit, and ResetAfter the time until the
// period ends, while the key has events counted.
func (q *Quota) AllowN(key string, n int) limits.Decision {
	return q.decide(key, n, true)
}

// Allow is AllowN(key, 1).
func (q *Quota) Allow(key string) limits.Decision { return q.AllowN(key, 1) }

// Peek reports what Allow would decide for key now, counting nothing.
func (q *Quota) Peek(key string) limits.Decision { return q.decide(key, 1, false) }

// PeekN is Peek for a request of cost n: what AllowN(key, n) would decide
// now, counting nothing.
func (q *Quota) PeekN(key string, n int) limits.Decision { return q.decide(key, n, false) }

// Take is AllowN(key, n), for the limits.Limiter interface: it never
// returns an error.
func (q *Quota) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	return q.decide(key, n, true), nil
}

func (q *Quota) decide(key string, n int, charge bool) limits.Decision {
	now := time.Now()
	p := q.current(now)
	limit := q.limit.Load()
	d := limits.Decision{
		Limit: int(limit), Burst: int(limit), Period: time.Duration(p.end - p.start), Cost: n, At: now,
	}
	until := time.Duration(p.end - now.UnixNano())
	switch {
	case n < 0:
		d.Reason = limits.ReasonInvalidCost
		return d
	case int64(n) > limit:
		d.Reason = limits.ReasonCostAboveBurst
		return d
	}
	sh := &q.shards[maphash.String(q.seed, key)>>58]
	for attempt := 0; ; attempt++ {
		sh.mu.Lock()
		q.sync(sh, p.start)
		used, ok := sh.n[key]
		switch {
		case n == 0:
			d.Allowed = true
		case used+int64(n) > limit:
			d.Reason, d.RetryAfter = limits.ReasonRateLimited, until
		case !charge:
			d.Allowed = true
		case !ok && q.keys.Add(1) > q.maxKeys:
			q.keys.Add(-1)
			sh.mu.Unlock()
			if attempt == 0 && q.reclaim(p.start) {
				continue // shards of the last period made room
			}
			d.Reason = limits.ReasonTableFull
			return d
		default:
			used += int64(n)
			sh.n[key] = used
			d.Allowed = true
		}
		sh.mu.Unlock()
		d.Remaining = int(max(limit-used, 0))
		if used > 0 {
			d.ResetAfter = until
		}
		return d
	}
}

// sync starts a new count in sh if its count is of an earlier period.
// sh.mu is held.
func (q *Quota) sync(sh *shard, start int64) {
	if sh.start == start && sh.n != nil {
		return
	}
	q.keys.Add(-int64(len(sh.n)))
	sh.n, sh.start = map[string]int64{}, start
}

// reclaim starts a new count in every shard whose count is of an earlier
// period than start, and reports whether one did: a bounded sweep, when a
// new key finds the table full.
func (q *Quota) reclaim(start int64) bool {
	freed := false
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		if sh.start != start && len(sh.n) > 0 {
			q.sync(sh, start)
			freed = true
		}
		sh.mu.Unlock()
	}
	return freed
}

// Refund gives back the charge of d, an allowed Decision AllowN or Take
// returned for key, if its period is still the current one: refunds are
// exact in any order, and a key never owes less than nothing. It does
// nothing for a refused Decision, one of cost 0 or one of a period past,
// and never returns an error.
func (q *Quota) Refund(_ context.Context, key string, d limits.Decision) error {
	if !d.Allowed || d.Cost <= 0 {
		return nil
	}
	p := q.current(time.Now())
	if at := d.At.UnixNano(); at < p.start || at >= p.end {
		return nil // a period past: its count is gone
	}
	sh := &q.shards[maphash.String(q.seed, key)>>58]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q.sync(sh, p.start)
	if used, ok := sh.n[key]; ok {
		sh.n[key] = max(used-int64(d.Cost), 0)
	}
	return nil
}

// Len returns the number of keys counted this period, and perhaps some of
// the last, until their shards are next used.
func (q *Quota) Len() int { return int(q.keys.Load()) }

var _ limits.Limiter = (*Quota)(nil)
