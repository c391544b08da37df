package httplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"

	"github.com/limitsgo/limits/adaptive"
)

// serveWithTimeout runs next in its own goroutine under the request's
// deadline, set when it was admitted. If the handler returns in time, its
// buffered response is sent; if the deadline passes first, the client gets
// 503 request_timeout and the handler's context is cancelled. Either way
// the request's admission (its place in the gate and its per-client
// count) ends only when the handler has returned: until then it still
// uses the capacity they stand for.
func (m *Middleware) serveWithTimeout(next http.Handler, w http.ResponseWriter, r *http.Request, q *request) {
	deadline, _ := q.t.Deadline()
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	r = r.WithContext(ctx)
	// The handler sees, and may change or remove, the header fields set so
	// far, such as the rate limit fields, as it would on w.
	tw := &timeoutWriter{h: w.Header().Clone(), q: q}
	// done carries the handler's panic, or nil when it returns: one channel,
	// so that a panic can never be mistaken for a return.
	done := make(chan any, 1)
	go func() {
		var p any
		defer func() {
			q.done(tw.outcome(p))
			done <- p
		}()
		defer func() { p = recover() }()
		next.ServeHTTP(tw, r)
	}()
	select {
	case p := <-done:
		if p != nil {
			panic(p)
		}
		tw.mu.Lock()
		defer tw.mu.Unlock()
		clear(w.Header())
		maps.Copy(w.Header(), tw.h)
		w.WriteHeader(tw.status())
		w.Write(tw.buf.Bytes())
	case <-ctx.Done():
		deadline := errors.Is(ctx.Err(), context.DeadlineExceeded) && q.r.Context().Err() == nil
		tw.mu.Lock()
		tw.timedOut, tw.deadline = true, deadline
		tw.mu.Unlock()
		if !deadline {
			return // the client went away: nobody to answer
		}
		m.refuse(w, r, q.t.TimedOut())
	}
}

// timeoutWriter buffers a handler's response until it returns in time.
type timeoutWriter struct {
	q        *request // for ReleaseCapacity
	mu       sync.Mutex
	h        http.Header
	buf      bytes.Buffer
	code     int
	timedOut bool // the response is no longer the handler's
	deadline bool // because the deadline passed, not because the client left
}

// Header returns the buffered header map. Handlers must not change it
// after the deadline, when it may be read concurrently; http.TimeoutHandler
// has the same rule.
func (tw *timeoutWriter) Header() http.Header { return tw.h }

// Write buffers b, or fails with http.ErrHandlerTimeout after the deadline.
func (tw *timeoutWriter) Write(b []byte) (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.timedOut {
		return 0, http.ErrHandlerTimeout
	}
	if tw.code == 0 {
		tw.code = http.StatusOK
	}
	return tw.buf.Write(b)
}

// WriteHeader records the final status; like net/http, it ignores all but
// the first call and rejects invalid codes. Informational (1xx) codes, such
// as 103 Early Hints, cannot be sent ahead of a buffered response and are
// dropped.
func (tw *timeoutWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("httplimit: invalid WriteHeader code %v", code))
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.timedOut || tw.code != 0 || code < 200 {
		return
	}
	tw.code = code
}

// outcome is how a handler that returned, having panicked with p if not
// nil, went for an adaptive gate: past its deadline, or answering 503 or
// 504, it signals overload; a request whose client left, or that
// panicked, says nothing of the service's capacity.
func (tw *timeoutWriter) outcome(p any) adaptive.Outcome {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	switch {
	case tw.deadline:
		return adaptive.Dropped
	case tw.timedOut || p != nil:
		return adaptive.Ignored
	case tw.code == http.StatusServiceUnavailable || tw.code == http.StatusGatewayTimeout:
		return adaptive.Dropped
	}
	return adaptive.Success
}

func (tw *timeoutWriter) status() int {
	if tw.code == 0 {
		return http.StatusOK
	}
	return tw.code
}
