package httplimit

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

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

// rateItem is one policy's entry in the rate limit header fields: its
// quoted name, its Decision, and whether to report the key's state (r and
// t) and with which t.
type rateItem struct {
	name  string
	d     limits.Decision
	state bool
	t     time.Duration
}

// setRateHeaders sets the rate limit headers of the selected mode for an
// allowed request, with the decisions of every policy that charged it: t
// is the time until each bucket is full again.
func (c *core) setRateHeaders(h http.Header, charges []front.Charge, fields []string) {
	if len(charges) == 0 || c.headers == HeadersNone {
		return
	}
	var buf [4]rateItem
	items := buf[:0]
	for _, c := range charges {
		if !c.Dec.Allowed {
			continue // its limiter failed and FailOpen served the request: no state to report
		}
		items = append(items, rateItem{name: c.Rate.Item, d: c.Dec, state: true, t: c.Dec.ResetAfter})
	}
	if len(items) == 0 {
		return
	}
	c.writeRateHeaders(h, items, fields)
}

// rateHeaders are the header fields setRateHeaders may set.
var rateHeaders = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// setRefusalHeaders sets the rate limit headers for a request refused by
// the policy quoted as item, with Decision d, for the given reason: the
// refusing policy only, in place of any an earlier layer set, with t the
// wait Retry-After gives for rate_limited, the time until the bucket is
// full again for refusals waiting cannot cure, and no state for a refusal
// that knows none (a full table, an unavailable limiter).
func (c *core) setRefusalHeaders(h http.Header, item string, d limits.Decision, reason string) {
	for _, k := range rateHeaders {
		delete(h, k)
	}
	if c.headers == HeadersNone || reason == ReasonLimiterError {
		return
	}
	it := rateItem{name: item, d: d, state: reason != ReasonTableFull, t: d.ResetAfter}
	if reason == ReasonRateLimited {
		it.t = d.RetryAfter
	}
	c.writeRateHeaders(h, []rateItem{it}, nil)
}

// writeRateHeaders sets the header fields of the selected mode for items.
//
// In the IETF fields, q is the policy's Limit and w its Period in whole
// seconds (rounded up; at least 1), r the requests left and t the item's
// t in whole seconds, rounded up. The legacy headers report the item with
// the fewest requests left. The fields' values are kept in fields'
// backing array if it has room (the request's own memory), so that only
// their text is allocated; fields must not be used for anything else.
func (c *core) writeRateHeaders(h http.Header, items []rateItem, fields []string) {
	// Every value is built in one buffer and cut from one string.
	var buf [256]byte
	b := buf[:0]
	var ends [5]int
	var keys [5]string
	nv := 0
	if c.headers != HeadersLegacy {
		b = appendItems(b, items, false)
		ends[nv], keys[nv] = len(b), "Ratelimit-Policy"
		nv++
		if items[0].state {
			b = appendItems(b, items, true)
			ends[nv], keys[nv] = len(b), "Ratelimit"
			nv++
		}
	}
	if c.headers == HeadersIETFAndLegacy || c.headers == HeadersLegacy {
		it := items[0]
		for _, e := range items[1:] {
			if e.d.Remaining < it.d.Remaining {
				it = e
			}
		}
		b = strconv.AppendInt(b, int64(it.d.Limit), 10)
		ends[nv], keys[nv] = len(b), "X-Ratelimit-Limit"
		nv++
		if it.state {
			b = strconv.AppendInt(b, int64(it.d.Remaining), 10)
			ends[nv], keys[nv] = len(b), "X-Ratelimit-Remaining"
			b = strconv.AppendInt(b, seconds(it.t), 10)
			ends[nv+1], keys[nv+1] = len(b), "X-Ratelimit-Reset"
			nv += 2
		}
	}
	all := string(b)
	vals := fields[:0:cap(fields)] // the request's memory, if it has some
	if cap(vals) < nv {
		vals = make([]string, nv)
	}
	vals = vals[:nv]
	from := 0
	for i := range nv {
		vals[i] = all[from:ends[i]]
		h[keys[i]] = vals[i : i+1 : i+1]
		from = ends[i]
	}
}

// appendItems appends one Structured Field list item per policy: with the
// policy's q and w parameters, or with state, the current r and t.
func appendItems(b []byte, items []rateItem, state bool) []byte {
	for i, it := range items {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, it.name...)
		if state {
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, int64(it.d.Remaining), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, seconds(it.t), 10)
		} else {
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, int64(it.d.Limit), 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, max(1, seconds(it.d.Period)), 10)
		}
	}
	return b
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
