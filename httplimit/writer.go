package httplimit

// This file is what a Middleware holds for one request, which is also the
// ResponseWriter its handler gets: it sees the status the handler writes,
// gives the request's place in the gate back when the connection is
// hijacked, and keeps http.Flusher, http.Hijacker and
// http.ResponseController (through Unwrap) working. It is written with the
// standard library alone, as the core module is.

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// request is what a Middleware holds for one request until its handler
// returns, in one allocation: its admission, the fields of its request the
// engine reads, the bytes of its rate limit fields' values, and the
// ResponseWriter its handler writes through. Like the ResponseWriter it
// wraps, it is for the handler's goroutine, but for ReleaseCapacity.
type request struct {
	t      admit.Ticket
	m      *Middleware
	r      *http.Request
	rw     http.ResponseWriter // the ResponseWriter it wraps for the handler
	status int32               // the final status the handler wrote, or 101; 0 before any
	nvals  int
	vals   [5]string // the rate limit fields' values
	// mem holds the bytes of the rate limit fields' values if they fit,
	// written once and never again, as a string's must be.
	mem [reqMem]byte
}

// reqMem is the room a request has for the bytes of its rate limit
// fields' values: enough for one policy's RateLimit field, which is all
// most requests need.
const reqMem = 48

// done ends the request's admission, telling an adaptive gate how it
// went: a request whose client left says nothing of the service's
// capacity.
func (q *request) done(o adaptive.Outcome) {
	if o == adaptive.Success && q.r.Context().Err() != nil {
		o = adaptive.Ignored
	}
	q.t.Done(o)
}

// ReleaseCapacity gives back the place in the Middleware's gate that the
// request whose handler was given w holds, before its handler returns, so
// that a long-lived request, such as a stream, no longer counts against
// Limits.MaxInFlight once its costly part is done. w is the handler's
// ResponseWriter, or one that wraps it and has an Unwrap method returning
// it (as http.ResponseController expects). A request whose connection is
// hijacked (a WebSocket upgrade) needs no call: its place is given back
// at the hijack, or when the handler writes 101 Switching Protocols. It is
// idempotent, safe for concurrent use while the handler runs, and does
// nothing for requests that hold no place. The request's per-client
// count, if any, is kept until the handler returns, hijacked or not:
// MaxInFlightPerClient then caps the sockets a client has open at once.
func ReleaseCapacity(w http.ResponseWriter) {
	for w != nil {
		switch v := w.(type) {
		case *request:
			v.t.Leave(adaptive.Success)
			return
		case *timeoutWriter:
			v.q.t.Leave(adaptive.Success)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}

// Header returns the wrapped writer's header map.
func (q *request) Header() http.Header { return q.rw.Header() }

// WriteHeader records the status, the first final one (or 101 Switching
// Protocols), and sends it. A 101 is the end of an upgrade, which gives
// the request's place in the gate back, as a hijack does: a WebSocket
// library may send it before it hijacks the connection.
func (q *request) WriteHeader(code int) {
	if q.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		q.status = int32(code)
	}
	if code == http.StatusSwitchingProtocols {
		q.t.Leave(adaptive.Success)
	}
	q.rw.WriteHeader(code)
}

// Write records the implicit 200 of a body written without WriteHeader,
// and writes b.
func (q *request) Write(b []byte) (int, error) {
	if q.status == 0 {
		q.status = http.StatusOK
	}
	return q.rw.Write(b)
}

// ReadFrom copies from r, with the wrapped writer's ReadFrom if it has
// one (the server's sendfile path), as io.Copy does.
func (q *request) ReadFrom(r io.Reader) (int64, error) {
	if q.status == 0 {
		q.status = http.StatusOK
	}
	if rf, ok := q.rw.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{q.rw}, r)
}

// Flush sends what is buffered, if the wrapped writer can (http.Flusher).
func (q *request) Flush() { q.FlushError() }

// FlushError is Flush with its error, as http.ResponseController calls
// it: http.ErrNotSupported if the wrapped writer cannot flush.
func (q *request) FlushError() error {
	if q.status == 0 {
		q.status = http.StatusOK
	}
	return http.NewResponseController(q.rw).Flush()
}

// Hijack takes over the connection, if the wrapped writer can
// (http.Hijacker; an HTTP/2 one cannot, and says http.ErrNotSupported),
// and then gives the request's place in the gate back: the upgrade is
// done, and the connection, a WebSocket say, lives on outside the
// request. The request's per-client count stays until the handler
// returns.
func (q *request) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(q.rw).Hijack()
	if err == nil {
		if q.status == 0 {
			q.status = http.StatusSwitchingProtocols
		}
		q.t.Leave(adaptive.Success)
	}
	return conn, rw, err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (q *request) Unwrap() http.ResponseWriter { return q.rw }

// outcome is how a handler that returned went, for an adaptive gate, by
// the status it wrote through q: 503 and 504 are signs of overload.
func (q *request) outcome() adaptive.Outcome {
	if q.status == http.StatusServiceUnavailable || q.status == http.StatusGatewayTimeout {
		return adaptive.Dropped
	}
	return adaptive.Success
}

// The interfaces handlers, http.ResponseController and the engine look
// for.
var (
	_ http.ResponseWriter = (*request)(nil)
	_ http.Flusher        = (*request)(nil)
	_ http.Hijacker       = (*request)(nil)
	_ io.ReaderFrom       = (*request)(nil)
	_ admit.Fields        = (*request)(nil)
)
