//lint:file-ignore ST1005 errors begin with the name of the Config field they are about, as it is spelled.

package admit

// This file formats the rate limit fields of a response: the
// RateLimit-Policy and RateLimit fields of draft-ietf-httpapi-
// ratelimit-headers-10, and the legacy X-RateLimit-* fields, from the
// Decisions of the policies that charged or refused a request.

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/limitsgo/limits"
)

// headerMode is which rate limit fields a response carries.
type headerMode uint8

const (
	headersIETF headerMode = iota
	headersIETFAndLegacy
	headersLegacy
	headersNone
)

// headerModes are Config.Headers' values, indexed by mode.
var headerModes = [...]string{"ietf", "ietf_legacy", "legacy", "none"}

// parseHeaders returns the mode Config.Headers names.
func parseHeaders(s string) (headerMode, error) {
	if s == "" {
		return headersIETF, nil
	}
	for i, m := range headerModes {
		if s == m {
			return headerMode(i), nil
		}
	}
	return 0, fmt.Errorf("Headers must be ietf, ietf_legacy, legacy or none, got %q", s)
}

// item is one policy's entry in the rate limit fields: its limiter, the
// limit and the requests left its Decision reports, and whether to report
// the key's state (r and t) and with which t.
type item struct {
	lim       *limiter
	limit     int
	period    time.Duration
	burst     int
	remaining int
	t         time.Duration
	state     bool
}

// fields are the rate limit fields of a response: those of an admitted
// request (every policy that charged it, but those in shadow mode and the
// address's for a request with a caller key), or of a refused one (the
// refusing policy's).
type fields struct {
	items [2]item
	more  []item // past the first two
	n     int
	mode  headerMode
}

// add adds it.
func (f *fields) add(it item) {
	if f.n < len(f.items) {
		f.items[f.n] = it
	} else {
		f.more = append(f.more, it)
	}
	f.n++
}

// at returns the i-th item.
func (f *fields) at(i int) *item {
	if i < len(f.items) {
		return &f.items[i]
	}
	return &f.more[i-len(f.items)]
}

// set sets the fields of an admitted request from what it was charged, t
// being the time until each bucket is full again.
func (f *fields) set(charges []charge, mode headerMode) {
	f.mode = mode
	for i := range charges {
		ch := &charges[i]
		if !ch.dec.Allowed || ch.hidden {
			continue // a limiter failed and the request was served anyway: no state to report
		}
		d := &ch.dec
		f.add(item{lim: ch.lim, limit: d.Limit, period: d.Period, burst: d.Burst, remaining: d.Remaining, t: d.ResetAfter, state: true})
	}
}

// refused sets the fields of a request refused by lim with Decision d for
// reason: t is the wait RetryAfter gives for rate_limited, and the time
// until the bucket is full again for refusals waiting cannot cure; a
// refusal that knows no state (a full table) reports the policy alone,
// and a failed limiter nothing.
func (f *fields) refused(lim *limiter, reason limits.Reason, d limits.Decision, mode headerMode) {
	f.mode = mode
	if reason == LimiterError {
		return
	}
	it := item{lim: lim, limit: d.Limit, period: d.Period, burst: d.Burst, remaining: d.Remaining, t: d.ResetAfter, state: reason != limits.ReasonTableFull}
	if reason == limits.ReasonRateLimited {
		it.t = d.RetryAfter
	}
	f.add(it)
}

// Header fields' names, as net/http keeps them.
const (
	fieldPolicy    = "Ratelimit-Policy"
	fieldRateLimit = "Ratelimit"
	fieldLimit     = "X-Ratelimit-Limit"
	fieldRemaining = "X-Ratelimit-Remaining"
	fieldReset     = "X-Ratelimit-Reset"
)

// Fields calls set with the name and value of each rate limit field the
// response carries, in the mode Config.Headers selects, names in the
// canonical form of net/http ("Ratelimit-Policy", "Ratelimit",
// "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"):
// for an admitted request, those of every policy that charged it but
// policies in shadow mode; for a refused one, the refusing policy's. In
// the IETF fields, q and w are the policy's quota and window (q events
// in w whole seconds: the time a key takes to get its burst back, and
// what the rate allows in it; see window), r the requests left and t the time in
// whole seconds, rounded up, until the bucket is full again or, refused
// as rate_limited, until the request may be retried. The legacy fields
// report the policy with the fewest requests left.
//
// The values are made in mem if it has room (the values' bytes: a front
// end's memory for the request, which must not be written again while
// they are used), and allocated otherwise.
func (f *fields) Fields(mem []byte, set func(name, value string)) {
	if f.n == 0 || f.mode == headersNone {
		return
	}
	var buf [256]byte
	b := buf[:0]
	var ends [5]int
	var names [5]string
	policy := "" // the RateLimit-Policy field, if it is one policy's kept text
	nv := 0
	if f.mode != headersLegacy {
		if f.n == 1 {
			it := f.at(0)
			policy = it.lim.policyItem(it.limit, it.period, it.burst)
		} else {
			for i := range f.n {
				if i > 0 {
					b = append(b, ", "...)
				}
				it := f.at(i)
				b = append(b, it.lim.policyItem(it.limit, it.period, it.burst)...)
			}
		}
		ends[nv], names[nv] = len(b), fieldPolicy
		nv++
		if f.at(0).state {
			for i := range f.n {
				it := f.at(i)
				if i > 0 {
					b = append(b, ", "...)
				}
				b = append(b, it.lim.item...)
				b = append(b, ";r="...)
				b = strconv.AppendInt(b, int64(it.remaining), 10)
				b = append(b, ";t="...)
				b = strconv.AppendInt(b, seconds(it.t), 10)
			}
			ends[nv], names[nv] = len(b), fieldRateLimit
			nv++
		}
	}
	if f.mode == headersIETFAndLegacy || f.mode == headersLegacy {
		it := f.at(0)
		for i := 1; i < f.n; i++ {
			if e := f.at(i); e.remaining < it.remaining {
				it = e
			}
		}
		q, _ := window(it.limit, it.period, it.burst)
		b = strconv.AppendInt(b, q, 10)
		ends[nv], names[nv] = len(b), fieldLimit
		nv++
		if it.state {
			b = strconv.AppendInt(b, int64(it.remaining), 10)
			ends[nv], names[nv] = len(b), fieldRemaining
			b = strconv.AppendInt(b, seconds(it.t), 10)
			ends[nv+1], names[nv+1] = len(b), fieldReset
			nv += 2
		}
	}
	var all string
	if len(b) <= len(mem) && len(b) > 0 {
		copy(mem, b)
		all = unsafe.String(&mem[0], len(b))
	} else {
		all = string(b)
	}
	from := 0
	for i := range nv {
		v := all[from:ends[i]]
		if i == 0 && policy != "" {
			v = policy
		}
		set(names[i], v)
		from = ends[i]
	}
}

// seconds returns d in whole seconds, rounded up. A negative d is 0, and
// the result never overflows a Duration when multiplied back.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 && s < math.MaxInt64/int64(time.Second) {
		s++
	}
	return s
}

// appendInt appends the decimal form of v.
func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }
