package pace

import (
	"errors"
	"net/http"
	"strconv"
	"time"
)

// MaxPause bounds every pause and quota window a server's answer can set:
// a longer one, in whatever form, even a number too large for an int64,
// is taken as MaxPause.
const MaxPause = 24 * time.Hour

// Outcome is what an answer counts as, for the retry budget and for
// adaptive throttling.
type Outcome uint8

const (
	// OutcomeNone counts nothing: the call ended on the caller's side
	// (its context), or its outcome is reported later.
	OutcomeNone Outcome = iota
	// OutcomeAccepted is an answer the server served.
	OutcomeAccepted
	// OutcomeRefused is a refusal: 429 or 503, ResourceExhausted or
	// Unavailable.
	OutcomeRefused
	// OutcomeFailed is a call that got no answer (a transport error).
	OutcomeFailed
)

// Answer is what a server's answer says about its limit, with durations
// counted from when the answer was received.
type Answer struct {
	// Outcome is what the answer counts as: accepted, refused, failed, or
	// nothing.
	Outcome Outcome
	// Pause, if positive, is how long the server asked the key to send
	// nothing (Retry-After, RetryInfo, pushback).
	Pause time.Duration
	// Backoff reports a refusal that said nothing of when to come back:
	// the key pauses for a backoff of its own.
	Backoff bool
	// NoRetry reports that the server said retrying cannot help.
	NoRetry bool
	// Quota and Window, if Quota > 0, are the server's policy: Quota
	// requests per Window, which becomes the key's pace.
	Quota  int64
	Window time.Duration
	// HasLeft reports that the answer said how many requests the key has
	// Left until Reset.
	HasLeft bool
	Left    int64
	Reset   time.Duration
}

// Refused reports whether status is one a Transport counts as a refusal
// and may retry: 429 Too Many Requests or 503 Service Unavailable.
func Refused(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// ParseHTTP returns what the response with status and header h says; now
// returns the local clock, read only for a date when the server sends no
// Date field:
//
//   - Retry-After, on a 429 or 503, in seconds or as an HTTP date; a date
//     is counted from the response's Date field, so that the server's
//     clock being off does not move the pause;
//   - RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-10): the
//     slowest policy's q and w, as the pace;
//   - RateLimit: the item with the fewest requests left, its r and t;
//   - X-RateLimit-Remaining and X-RateLimit-Reset, the reset in seconds
//     from now, or as a Unix time if above 10^8 (about three years).
//
// A reset or a delay beyond MaxPause counts as MaxPause, whatever its
// form: seconds, a Unix time, an HTTP date, or a number too large for an
// int64. A 429 or 503 with neither Retry-After nor a quota spent asks for
// a backoff.
func ParseHTTP(status int, h http.Header, now func() time.Time) Answer {
	a := Answer{Outcome: OutcomeAccepted}
	refused := Refused(status)
	if refused {
		a.Outcome = OutcomeRefused
	}
	var serverNow time.Time // the server's clock, if it sent one
	dateRead := false
	date := func() time.Time {
		if !dateRead {
			dateRead = true
			serverNow = now()
			if d := get(h, "Date"); d != "" {
				if t, err := http.ParseTime(d); err == nil {
					serverNow = t
				}
			}
		}
		return serverNow
	}
	hasRetry := false
	if refused {
		if v := get(h, "Retry-After"); v != "" {
			if s, ok := parseInt(v); ok {
				hasRetry = s >= 0
				a.Pause = seconds(s)
			} else if t, err := http.ParseTime(v); err == nil {
				hasRetry = true
				a.Pause = clamp(t.Sub(date()))
			}
		}
	}
	for _, v := range h["Ratelimit-Policy"] {
		items(v, func(p params) {
			if p.has&(hasQ|hasW) != hasQ|hasW || p.q <= 0 || p.w <= 0 {
				return
			}
			w := seconds(p.w)
			if a.Quota == 0 || slower(p.q, w, a.Quota, a.Window) {
				a.Quota, a.Window = p.q, w
			}
		})
	}
	for _, v := range h["Ratelimit"] {
		items(v, func(p params) {
			if p.has&(hasR|hasT) == hasR|hasT && p.r >= 0 && p.t >= 0 {
				a.left(p.r, seconds(p.t))
			}
		})
	}
	if r, ok := parseInt(get(h, "X-Ratelimit-Remaining")); ok && r >= 0 {
		if s, ok := parseInt(get(h, "X-Ratelimit-Reset")); ok && s >= 0 {
			reset := seconds(s)
			if s > 1e8 {
				reset = until(s, date())
			}
			a.left(r, reset)
		}
	}
	a.Backoff = refused && !hasRetry && !(a.HasLeft && a.Left <= 0 && a.Reset > 0)
	return a
}

// get returns the first value of the field named key, which must be in
// canonical form: h.Get without canonicalizing the key.
func get(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// left records that left requests remain until reset, if that is fewer
// than the answer recorded (or as few, until later).
func (a *Answer) left(left int64, reset time.Duration) {
	if !a.HasLeft || left < a.Left || left == a.Left && reset > a.Reset {
		a.HasLeft, a.Left, a.Reset = true, left, reset
	}
}

// slower reports whether q1 per w1 is slower than q2 per w2.
func slower(q1 int64, w1 time.Duration, q2 int64, w2 time.Duration) bool {
	// w1/q1 > w2/q2; both products fit: q < 2^63, w <= MaxPause < 2^47.
	return float64(w1)*float64(q2) > float64(w2)*float64(q1)
}

// seconds returns s seconds, at most MaxPause.
func seconds(s int64) time.Duration {
	if s <= 0 {
		return 0
	}
	if s >= int64(MaxPause/time.Second) {
		return MaxPause
	}
	return time.Duration(s) * time.Second
}

// until returns the time from now until the Unix time s, within [0,
// MaxPause], whatever s: a time too far to be represented is MaxPause
// away.
func until(s int64, now time.Time) time.Duration {
	if s > now.Unix()+int64(MaxPause/time.Second) {
		return MaxPause
	}
	return clamp(time.Unix(s, 0).Sub(now))
}

// clamp returns d within [0, MaxPause].
func clamp(d time.Duration) time.Duration {
	return min(max(d, 0), MaxPause)
}

// parseInt parses a decimal integer with an optional minus sign and
// surrounding spaces, as header fields give them; one beyond the range of
// an int64 is its nearest end, so that a delay too long to represent
// counts as the longest.
func parseInt(s string) (int64, bool) {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil || errors.Is(err, strconv.ErrRange)
}

// The parameters items reads.
const (
	hasQ = 1 << iota
	hasW
	hasR
	hasT
)

// params are the integer parameters q, w, r and t of one list member of a
// Structured Field (RFC 9651); has says which it carried.
type params struct {
	q, w, r, t int64
	has        uint8
}

// items calls f with the parameters of each member of the Structured Field
// list v, such as `"default";q=100;w=60, "daily";q=1000;w=86400`. It reads
// what it can of a malformed list and never fails: a member's name may be a
// string or a token, parameters other than q, w, r and t and values other
// than integers are skipped.
func items(v string, f func(params)) {
	i := 0
	for i < len(v) {
		i = skipSpace(v, i)
		if i >= len(v) {
			return
		}
		i = skipValue(v, i) // the member's name
		var p params
		for i < len(v) && v[i] == ';' {
			i = skipSpace(v, i+1)
			start := i
			for i < len(v) && v[i] != '=' && v[i] != ';' && v[i] != ',' {
				i++
			}
			key := v[start:i]
			if i < len(v) && v[i] == '=' {
				start = i + 1
				i = skipValue(v, start)
				n, ok := parseInt(v[start:i])
				if ok && len(key) == 1 {
					switch key[0] {
					case 'q':
						p.q, p.has = n, p.has|hasQ
					case 'w':
						p.w, p.has = n, p.has|hasW
					case 'r':
						p.r, p.has = n, p.has|hasR
					case 't':
						p.t, p.has = n, p.has|hasT
					}
				}
			}
		}
		f(p)
		// Skip whatever is left of a malformed member.
		for i < len(v) && v[i] != ',' {
			i = skipValue(v, i+1)
		}
		i++
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// a space or a tab.
func skipSpace(v string, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t') {
		i++
	}
	return i
}

// skipValue returns the index of the first ';' or ',' at or after i that
// is outside a quoted string.
func skipValue(v string, i int) int {
	for i < len(v) && v[i] != ';' && v[i] != ',' {
		if v[i] == '"' {
			for i++; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' {
					i++
				}
			}
		}
		i++
	}
	return min(i, len(v))
}
