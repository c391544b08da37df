package httplimit

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
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

// answers holds, for each reason, the status of its refusals (0: the
// Middleware's InFlightStatus) and the detail of their problem body.
var answers = map[limits.Reason]struct {
	status int
	detail string
}{
	limits.ReasonRateLimited:    {http.StatusTooManyRequests, "Too many requests from this client; retry after the time given."},
	admit.ServerBusy:            {http.StatusServiceUnavailable, "The server is at capacity; retry after the time given."},
	admit.RequestTimeout:        {http.StatusServiceUnavailable, "The request took longer than the server allows."},
	admit.LimiterError:          {http.StatusServiceUnavailable, "The rate limiter could not decide; retry after the time given."},
	limits.ReasonTableFull:      {http.StatusServiceUnavailable, "The server is tracking as many clients as it can; retry after the time given."},
	limits.ReasonCostAboveBurst: {http.StatusTooManyRequests, "The request costs more than this client may ever spend at once; retrying will not help."},
	limits.ReasonInvalidCost:    {http.StatusInternalServerError, "The server gave the request an invalid cost."},
	admit.ConcurrencyLimited:    {0, "Too many requests from this client in progress at once."},
	admit.ConcurrencyTableFull:  {http.StatusServiceUnavailable, "Too many clients have requests in progress; retry after the time given."},
}

// refuse answers a refused request: its status, Retry-After (whole
// seconds, rounded up, and at least one for rate_limited), the refusing
// policy's rate limit fields, and a problem body, or Config.Deny's
// response.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, ref *admit.Refusal) {
	a := answers[ref.Reason]
	status := a.status
	if status == 0 {
		status = m.status
	}
	h := w.Header()
	if retry := ref.RetryAfter; retry > 0 || ref.Reason == limits.ReasonRateLimited {
		if ref.Reason == limits.ReasonRateLimited {
			retry = max(retry, time.Second)
		}
		h.Set("Retry-After", strconv.FormatInt(seconds(retry), 10))
	}
	ref.Fields(nil, func(name, v string) { h.Set(name, v) })
	if m.deny != nil {
		m.deny(w, r, status, ref)
		return
	}
	p := problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: a.detail,
		Reason: ref.Reason.String(),
	}
	if (ref.Reason == limits.ReasonRateLimited || ref.Reason == limits.ReasonCostAboveBurst) && status == http.StatusTooManyRequests {
		p.Type = quotaExceeded
		p.Title = "Quota Exceeded"
		p.Violated = []string{ref.Policy}
	}
	body, _ := json.Marshal(p) // cannot fail: strings and ints
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

// seconds returns d in whole seconds, rounded up but within the last
// second of a Duration's range, as the rate limit fields count them: the
// Retry-After of a refusal agrees with its RateLimit field's t.
func seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 && s < math.MaxInt64/int64(time.Second) {
		s++
	}
	return s
}
