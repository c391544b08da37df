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

// writer wraps the ResponseWriter of a request that holds a place in the
// gate. It lives inside the request, so that it costs no allocation of
// its own. Like the ResponseWriter it wraps, it is for the handler's
// goroutine.
type writer struct {
	http.ResponseWriter
	q      *request
	status int // the final status the handler wrote, or 101; 0 before any
}

// WriteHeader records the status, the first final one (or 101 Switching
// Protocols), and sends it. A 101 is the end of an upgrade, which gives
// the request's place in the gate back, as a hijack does: a WebSocket
// library may send it before it hijacks the connection.
func (w *writer) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	if code == http.StatusSwitchingProtocols {
		w.q.held.Leave(adaptive.Success)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records the implicit 200 of a body written without WriteHeader,
// and writes b.
func (w *writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies from r, with the wrapped writer's ReadFrom if it has
// one (the server's sendfile path), as io.Copy does.
func (w *writer) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{w.ResponseWriter}, r)
}

// Flush sends what is buffered, if the wrapped writer can (http.Flusher).
func (w *writer) Flush() { w.FlushError() }

// FlushError is Flush with its error, as http.ResponseController calls
// it: http.ErrNotSupported if the wrapped writer cannot flush.
func (w *writer) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack takes over the connection, if the wrapped writer can
// (http.Hijacker; an HTTP/2 one cannot, and says http.ErrNotSupported),
// and then gives the request's place in the gate back: the upgrade is
// done, and the connection, a WebSocket say, lives on outside the
// request. The request's per-client count stays until the handler
// returns.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		if w.status == 0 {
			w.status = http.StatusSwitchingProtocols
		}
		w.q.held.Leave(adaptive.Success)
	}
	return conn, rw, err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// outcome is how a handler that returned went, for an adaptive gate, by
// the status it wrote: 503 and 504 are signs of overload.
func (w *writer) outcome() adaptive.Outcome {
	if w.status == http.StatusServiceUnavailable || w.status == http.StatusGatewayTimeout {
		return adaptive.Dropped
	}
	return adaptive.Success
}
