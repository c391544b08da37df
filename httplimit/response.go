package httplimit

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/front"
)

// problem is an RFC 9457 problem details object, with the reason code as an
// extension member.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Reason   string   `json:"reason"`
	Violated []string `json:"violated-policies,omitempty"`
}

// quotaExceeded is the problem type the IETF rate limit draft registers for
// 429 responses of a quota policy.
const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

var details = map[string]string{
	ReasonRateLimited:          "Too many requests from this client; retry after the time given.",
	ReasonServerBusy:           "The server is at capacity; retry after the time given.",
	ReasonRequestTimeout:       "The request took longer than the server allows.",
	ReasonLimiterError:         "The rate limiter could not decide; retry after the time given.",
	ReasonTableFull:            "The server is tracking as many clients as it can; retry after the time given.",
	ReasonCostAboveBurst:       "The request costs more than this client may ever spend at once; retrying will not help.",
	ReasonInvalidCost:          "The server gave the request an invalid cost.",
	ReasonConcurrencyLimited:   "Too many requests from this client in progress at once.",
	ReasonConcurrencyTableFull: "Too many clients have requests in progress; retry after the time given.",
}

// refuse counts nothing: it sets Retry-After (unless d has none), logs the
// refusal and writes the response, with Config.Deny if set.
func (c *core) refuse(w http.ResponseWriter, r *http.Request, key string, d Denial) {
	if d.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(seconds(d.RetryAfter), 10))
	}
	c.log(r, "httplimit: request refused", d.Reason, key, d.Err)
	if c.deny != nil {
		c.deny(w, r, d)
		return
	}
	p := problem{
		Type:   "about:blank",
		Title:  http.StatusText(d.Status),
		Status: d.Status,
		Detail: details[d.Reason],
		Reason: d.Reason,
	}
	if (d.Reason == ReasonRateLimited || d.Reason == ReasonCostAboveBurst) && d.Status == http.StatusTooManyRequests {
		p.Type = quotaExceeded
		p.Title = "Quota Exceeded"
		p.Violated = []string{d.Policy}
	}
	body, _ := json.Marshal(p) // cannot fail: strings and ints
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(d.Status)
	w.Write(body)
}

// rateItem is one policy's entry in the rate limit header fields: the
// policy, the limit and the requests left its Decision reports, and
// whether to report the key's state (r and t) and with which t.
type rateItem struct {
	rate      *front.Rate
	limit     int
	period    time.Duration
	remaining int
	state     bool
	t         time.Duration
}

// itemOf returns the item of a Decision d of the policy rate.
func itemOf(rate *front.Rate, d *limits.Decision, state bool, t time.Duration) rateItem {
	return rateItem{rate: rate, limit: d.Limit, period: d.Period, remaining: d.Remaining, state: state, t: t}
}

// setRateHeaders sets the rate limit headers of the selected mode for an
// allowed request, with the decisions of every policy that charged it: t
// is the time until each bucket is full again. vals and text are memory
// for the values, as writeRateHeaders takes them.
func (c *core) setRateHeaders(h http.Header, charges []front.Charge, vals []string, text []byte) {
	if len(charges) == 0 || c.headers == HeadersNone {
		return
	}
	var buf [4]rateItem
	items := buf[:0]
	for i := range charges {
		ch := &charges[i]
		if !ch.Dec.Allowed {
			continue // its limiter failed and FailOpen served the request: no state to report
		}
		items = append(items, itemOf(ch.Rate, &ch.Dec, true, ch.Dec.ResetAfter))
	}
	if len(items) == 0 {
		return
	}
	c.writeRateHeaders(h, items, vals, text)
}

// rateHeaders are the header fields setRateHeaders may set.
var rateHeaders = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// setRefusalHeaders sets the rate limit headers for a request refused by
// the policy rate, with Decision d, for the given reason: the
// refusing policy only, in place of any an earlier layer set, with t the
// wait Retry-After gives for rate_limited, the time until the bucket is
// full again for refusals waiting cannot cure, and no state for a refusal
// that knows none (a full table, an unavailable limiter).
func (c *core) setRefusalHeaders(h http.Header, rate *front.Rate, d limits.Decision, reason string) {
	for _, k := range rateHeaders {
		delete(h, k)
	}
	if c.headers == HeadersNone || reason == ReasonLimiterError {
		return
	}
	it := itemOf(rate, &d, reason != ReasonTableFull, d.ResetAfter)
	if reason == ReasonRateLimited {
		it.t = d.RetryAfter
	}
	c.writeRateHeaders(h, []rateItem{it}, nil, nil)
}

// writeRateHeaders sets the header fields of the selected mode for items.
//
// In the IETF fields, q is the policy's Limit and w its Period in whole
// seconds (rounded up; at least 1), r the requests left and t the item's
// t in whole seconds, rounded up. The legacy headers report the item with
// the fewest requests left. The values are kept in vals' backing array
// if it has room, and their text in text if it has room (the request's
// own memory), so that they cost no allocation; text is written once and
// must not be written again.
func (c *core) writeRateHeaders(h http.Header, items []rateItem, vals []string, text []byte) {
	// Every value is built in one buffer and cut from one string, but for
	// the RateLimit-Policy field of one policy, which is the policy's
	// text kept (policyItem).
	var buf [256]byte
	b := buf[:0]
	var ends [5]int
	var keys [5]string
	policy := "" // the RateLimit-Policy field, if it is one policy's kept text
	nv := 0
	if c.headers != HeadersLegacy {
		if len(items) == 1 {
			policy = policyItem(&items[0])
		} else {
			for i := range items {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = append(b, policyItem(&items[i])...)
			}
		}
		ends[nv], keys[nv] = len(b), "Ratelimit-Policy"
		nv++
		if items[0].state {
			for i := range items {
				it := &items[i]
				if i > 0 {
					b = append(b, ", "...)
				}
				b = append(b, it.rate.Item...)
				b = append(b, ";r="...)
				b = strconv.AppendInt(b, int64(it.remaining), 10)
				b = append(b, ";t="...)
				b = strconv.AppendInt(b, seconds(it.t), 10)
			}
			ends[nv], keys[nv] = len(b), "Ratelimit"
			nv++
		}
	}
	if c.headers == HeadersIETFAndLegacy || c.headers == HeadersLegacy {
		it := items[0]
		for _, e := range items[1:] {
			if e.remaining < it.remaining {
				it = e
			}
		}
		b = strconv.AppendInt(b, int64(it.limit), 10)
		ends[nv], keys[nv] = len(b), "X-Ratelimit-Limit"
		nv++
		if it.state {
			b = strconv.AppendInt(b, int64(it.remaining), 10)
			ends[nv], keys[nv] = len(b), "X-Ratelimit-Remaining"
			b = strconv.AppendInt(b, seconds(it.t), 10)
			ends[nv+1], keys[nv+1] = len(b), "X-Ratelimit-Reset"
			nv += 2
		}
	}
	var all string
	if len(b) <= len(text) && len(b) > 0 {
		copy(text, b)
		all = unsafe.String(&text[0], len(b))
	} else {
		all = string(b)
	}
	if cap(vals) < nv {
		vals = make([]string, nv)
	}
	vals = vals[:nv]
	from := 0
	for i := range nv {
		vals[i] = all[from:ends[i]]
		if i == 0 && policy != "" {
			vals[i] = policy
		}
		h[keys[i]] = vals[i : i+1 : i+1]
		from = ends[i]
	}
}

// policyItem returns the Structured Field list item of it's policy in
// the RateLimit-Policy field: its name with the q and w parameters of its
// Decision's limit. The first limit a policy reports is formatted once
// and kept, since a policy's limit rarely changes; any other is
// formatted anew each time.
func policyItem(it *rateItem) string {
	r := it.rate
	if s, ok := r.Text.Get(it.limit, it.period); ok {
		return s
	}
	var buf [64]byte
	b := append(buf[:0], r.Item...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(it.limit), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, max(1, seconds(it.period)), 10)
	s := string(b)
	r.Text.PutFirst(it.limit, it.period, s)
	return s
}

// seconds returns d in whole seconds, rounded up.
// A negative d is 0, and the result never overflows a Duration when
// multiplied back.
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

// log records a refusal or a limiter error, if a Logger is set. The key is
// logged only as a short hash, enough to tell clients apart in the logs
// without revealing session tokens or API keys.
func (c *core) log(r *http.Request, msg, reason, key string, err error) {
	if c.logger == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("reason", reason),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
	}
	if key != "" {
		attrs = append(attrs, slog.String("key_hash", front.KeyHash(key)))
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	c.logger.LogAttrs(r.Context(), level, msg, attrs...)
}
