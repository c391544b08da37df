// Package ginlimit runs net/http middleware, such as an httplimit
// Middleware's Handler, in a gin handler chain.
//
// Register the Middleware on the engine; routes' policies are found by
// the request's method and path:
//
//	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
//		MaxInFlight: 512,
//		Rate:        limits.Limit{Events: 100, Period: time.Minute},
//		Policies: []admit.Policy{
//			{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 5, Period: time.Minute}},
//		},
//	}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	var loginHandler gin.HandlerFunc // your handler
//	r := gin.New()
//	r.Use(ginlimit.Wrap(m.Handler))
//	r.POST("/login", loginHandler)
//
// The rest of the chain runs inside the middleware: the handlers see the
// request it passes on, and write through the writer it passes on, which
// c.Writer unwraps to (so httplimit.ReleaseCapacity(c.Writer) works). A
// request the middleware refuses is answered by it and ends the chain.
package ginlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
)

// Wrap returns a gin handler that runs mw around the rest of the gin
// chain: the handlers after it run, by c.Next, from the http.Handler that
// mw wraps, with c.Request set to the request mw passes on and c.Writer
// writing through the http.ResponseWriter it passes on (both are put back
// when the chain returns). If mw answers the request without calling its
// handler, as a middleware refusing the request does, the chain is
// aborted (c.Abort) and the handlers after Wrap do not run.
//
// A middleware that runs its handler on another goroutine and may return
// before it, such as an httplimit Middleware with Config.Timeout when the
// deadline passes, has its answer flushed to the client at once; the gin
// handler then waits for the chain to return, since gin reuses the
// gin.Context once its handler returns, and the chain, whose context is
// cancelled, no longer writes to the client.
//
// mw is called on every request, so it should be cheap, as the Handler
// method of an httplimit Middleware is. The returned handler is safe for
// concurrent use if mw is.
func Wrap(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		k := &chain{c: c, req: c.Request, w: c.Writer}
		defer k.restore()
		mw(k).ServeHTTP(k.w, k.req)
		k.mu.Lock()
		ran := k.state != pending
		if !ran {
			k.state = abandoned
		}
		running := k.state == running
		k.mu.Unlock()
		if !ran {
			c.Abort()
			return
		}
		if running {
			// The middleware answered while the chain still runs on
			// another goroutine: send its answer, and keep c until the
			// chain is done with it.
			k.w.Flush()
			k.wg.Wait()
		}
	}
}

// States of a chain.
const (
	pending   = iota // the middleware has not called its handler
	running          // the rest of the gin chain is running
	done             // the rest of the gin chain has returned
	abandoned        // the middleware returned without calling its handler
)

// chain is the http.Handler a middleware wraps for one request: it runs
// the rest of the gin chain.
type chain struct {
	c   *gin.Context
	req *http.Request      // c.Request before the middleware
	w   gin.ResponseWriter // c.Writer before the middleware

	mu    sync.Mutex
	state int
	wg    sync.WaitGroup // held while the chain runs
}

// ServeHTTP runs the rest of the gin chain with r and w, unless the gin
// handler has returned already.
func (k *chain) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	if k.state != pending {
		k.mu.Unlock()
		return // too late: c may be serving another request
	}
	k.state = running
	k.wg.Add(1)
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.state = done
		k.mu.Unlock()
		k.wg.Done()
	}()

	c := k.c
	c.Request = r
	if w == http.ResponseWriter(k.w) {
		c.Next()
		return
	}
	rw := &responseWriter{ResponseWriter: w, gin: k.w, size: -1, status: http.StatusOK}
	c.Writer = rw
	c.Next()
	// As gin does after the chain: a status set without a body is sent.
	rw.WriteHeaderNow()
}

// restore puts c.Request and c.Writer back as they were before the
// middleware, for the handlers before Wrap and for gin.
func (k *chain) restore() {
	k.c.Request, k.c.Writer = k.req, k.w
}

// responseWriter is a gin.ResponseWriter writing through the
// http.ResponseWriter a middleware passed on, with gin's semantics: the
// status is sent with the first write, or when the chain returns.
type responseWriter struct {
	http.ResponseWriter
	gin    gin.ResponseWriter // the writer the middleware was given
	size   int                // bytes written, or -1 before the header
	status int
}

var _ gin.ResponseWriter = (*responseWriter)(nil)

// errWritten is Hijack's error once the body has been written to.
var errWritten = errors.New("ginlimit: response body already written")

// Unwrap returns the writer the middleware passed on, for
// http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteHeader records the status to send; it cannot change once sent.
func (w *responseWriter) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

// WriteHeaderNow sends the status, unless it was sent already.
func (w *responseWriter) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.ResponseWriter.WriteHeader(w.status)
	}
}

// Write sends the status, if not sent yet, and b.
func (w *responseWriter) Write(b []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

// WriteString sends the status, if not sent yet, and s.
func (w *responseWriter) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.ResponseWriter, s)
	w.size += n
	return n, err
}

// Status returns the status sent, or to be sent.
func (w *responseWriter) Status() int { return w.status }

// Size returns the bytes of body written, or -1 before the header is sent.
func (w *responseWriter) Size() int { return w.size }

// Written reports whether the header has been sent.
func (w *responseWriter) Written() bool { return w.size != -1 }

// Hijack takes over the connection through the writer the middleware
// passed on (which may, for instance, give the request's place in the
// gate back), unless the body has been written to.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.size > 0 {
		return nil, nil, errWritten
	}
	if w.size < 0 {
		w.size = 0
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Flush sends the status, if not sent yet, and what is buffered, if the
// writer the middleware passed on can flush.
func (w *responseWriter) Flush() {
	w.WriteHeaderNow()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// CloseNotify returns the channel of the gin writer the middleware was
// given.
//
// Deprecated: as http.CloseNotifier; use the request's context.
func (w *responseWriter) CloseNotify() <-chan bool {
	return w.gin.CloseNotify()
}

// Pusher returns the writer's http.Pusher, or nil.
func (w *responseWriter) Pusher() http.Pusher {
	if p, ok := w.ResponseWriter.(http.Pusher); ok {
		return p
	}
	return nil
}
