package httplimit

// This file is the ResponseWriter a handler gets from a Middleware with a
// gate, written with the standard library alone, as the core module is:
// it sees the status the handler writes, gives the request's place in
// the gate back when the connection is hijacked, and keeps http.Flusher,
// http.Hijacker and http.ResponseController (through Unwrap) working.

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/limitsgo/limits/adaptive"
)

// The request of a request that holds a place in the gate is the
// ResponseWriter its handler gets: it wraps the ResponseWriter the
// Middleware was given (q.rw), and so costs no allocation of its own.
// Like the ResponseWriter it wraps, it is for the handler's goroutine.

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
		q.held.Leave(adaptive.Success)
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
		q.held.Leave(adaptive.Success)
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

// The interfaces handlers and http.ResponseController look for.
var (
	_ http.ResponseWriter = (*request)(nil)
	_ http.Flusher        = (*request)(nil)
	_ http.Hijacker       = (*request)(nil)
	_ io.ReaderFrom       = (*request)(nil)
)
