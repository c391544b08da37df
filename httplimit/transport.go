package httplimit

import (
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/limitsgo/limits/pace"
)

// Transport is an http.RoundTripper for outbound calls that stays under
// the limits of the servers it calls: it paces requests per key (the
// request's host, by default), learns each server's limit from its
// answers, pauses a key until the time the server gives, and retries
// refusals within a budget (docs/CLIENT.md).
//
//	client := &http.Client{Transport: &httplimit.Transport{Pace: pace.Config{Rate: limits.Limit{Events: 10, Period: time.Second}}}}
//
// A key's requests leave in the order they came, one every Period/Events
// of its pace, never two closer. The pace is Rate until the server
// announces one in RateLimit-Policy (its slowest policy, q per w
// seconds); with neither, requests are not paced.
//
// A key sends nothing until the time its server asked for: in
// Retry-After (seconds, or a date read against the answer's Date field,
// so that the server's clock being off does not matter), in RateLimit
// with r=0 (for t seconds), or once the requests left in RateLimit or
// X-RateLimit-Remaining are spent (until t, or X-RateLimit-Reset, in
// seconds or as a Unix time). The requests queued meanwhile then leave
// one at the pace after the other, not at once. A 429 or 503 saying
// nothing of when pauses its key for a second, doubling in a row up to a
// minute. A pause longer than a day counts as a day.
//
// A request whose turn would come after its context's deadline fails at
// once, unsent, with an error that wraps context.DeadlineExceeded and
// says whether the pause or the pace holds it; so does a waiting request
// when a pause learnt meanwhile pushes its turn past the deadline.
//
// A 429 or 503 is retried, in its key's turn, if the request can be sent
// again (GET, HEAD, OPTIONS, TRACE, PUT or DELETE without a body, or any
// request with GetBody), the retry would leave within MaxRetryWait and
// before the deadline, and the key's retry budget holds a token (see
// RetryTokens); otherwise it is returned as it came.
//
// The zero Transport is usable. Its fields must not change after its
// first request. It is safe for concurrent use and starts no goroutine;
// a request that does not wait allocates nothing beyond what Base does.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Key returns the key a request is paced under; nil means its URL's
	// host (with its port, if given).
	Key func(*http.Request) string
	// Pace configures the pacing, the learning from answers, the retries
	// and client-side throttling (see pace.Config: Rate, MaxKeys,
	// MaxRetries, RetryTokens, RetryRatio, MaxRetryWait, Throttle,
	// ThrottleWindow); its zero value is usable. A request refused
	// locally by throttling fails with an error wrapping
	// pace.ErrThrottled.
	Pace pace.Config

	once  sync.Once
	pacer *pace.Pacer
	err   error
}

var _ http.RoundTripper = (*Transport)(nil)

// init makes the Transport's pacer, once.
func (t *Transport) init() (*pace.Pacer, error) {
	t.once.Do(func() {
		cfg := t.Pace
		cfg.Prefix = "httplimit: Transport"
		t.pacer, t.err = pace.New(cfg)
	})
	return t.pacer, t.err
}

// RoundTrip sends req in its key's turn and returns the answer, after the
// retries the Transport allows. It returns an error without sending req
// when the Transport's configuration is invalid, when req's turn would
// come after its context's deadline, when throttling refuses it, or when
// its key is new and the table is full; otherwise Base's answer or error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, err := t.init()
	if err != nil {
		closeBody(req)
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	var key string
	if t.Key != nil {
		key = t.Key(req)
	} else {
		key = req.URL.Host
	}
	ctx := req.Context()
	r := req
	for attempt := 0; ; attempt++ {
		tk, err := p.Acquire(ctx, key, attempt == 0)
		if err != nil {
			if attempt == 0 {
				closeBody(req)
			}
			return nil, err
		}
		resp, err := base.RoundTrip(r)
		var a pace.Answer
		switch {
		case err == nil:
			a = pace.ParseHTTP(resp.StatusCode, resp.Header, time.Now)
		case ctx.Err() == nil:
			a.Outcome = pace.OutcomeFailed
		}
		var body io.ReadCloser
		want := a.Outcome == pace.OutcomeRefused && attempt < p.MaxRetries() && replayable(req)
		if want && req.GetBody != nil {
			if body, err = req.GetBody(); err != nil {
				want, err = false, nil
			}
		}
		if !p.Done(ctx, tk, a, want) {
			if body != nil {
				body.Close()
			}
			return resp, err
		}
		// Let the connection be reused, as the answer is dropped.
		io.CopyN(io.Discard, resp.Body, 4<<10)
		resp.Body.Close()
		if body != nil {
			c := *req
			c.Body = body
			r = &c
		}
	}
}

// replayable reports whether req can be sent again.
func replayable(req *http.Request) bool {
	if req.GetBody != nil {
		return true
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// CloseIdleConnections closes the idle connections of Base, if it has a
// CloseIdleConnections method.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// Stats returns the Transport's counters; it is safe to call at any time.
func (t *Transport) Stats() pace.Stats {
	p, err := t.init()
	if err != nil {
		return pace.Stats{Protocol: "http"}
	}
	s := p.Stats()
	s.Protocol = "http"
	return s
}
