// Package ginlimit adapts the net/http middlewares of package httplimit
// to gin: a module of its own, so that the core module's graph holds no
// gin.
//
//	m, err := httplimit.New(httplimit.Config{MaxInFlight: 64, Rate: limits.Limit{Events: 100, Period: time.Minute}})
//	login, err := m.With(httplimit.Policy{Name: "login", Rate: limits.Limit{Events: 5, Period: time.Minute}})
//	r := gin.New()
//	r.Use(ginlimit.Handler(m.Handler))
//	r.POST("/login", ginlimit.Handler(login.Handler), loginHandler)
//
// The route's Middleware applies only its own policies to a request the
// global one let in, as it does around a net/http handler, and
// httplimit.ReleaseCapacity(c.Request) gives the request's place back.
package ginlimit

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// Handler returns a gin.HandlerFunc that runs mw, a func(http.Handler)
// http.Handler such as httplimit.Middleware.Handler, around the rest of
// gin's chain. A request mw lets through goes on with c.Request set to the
// request mw passed on, whose context carries what httplimit needs for
// per-route policies (Middleware.With) and httplimit.ReleaseCapacity, and
// with c.Writer writing through mw's ResponseWriter, so that mw sees the
// status and a hijack; c.Writer is restored when the chain returns. A
// request mw refuses is aborted, mw's response written.
func Handler(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		served := false
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served = true
			orig := c.Writer
			c.Request = r
			if w != http.ResponseWriter(orig) {
				c.Writer = &writer{ResponseWriter: orig, w: w}
			}
			defer func() { c.Writer = orig }()
			c.Next()
		}))
		h.ServeHTTP(c.Writer, c.Request)
		if !served {
			c.Abort()
		}
	}
}

// writer is gin's ResponseWriter with its writes sent through w, the
// writer a middleware passed on, which in turn writes to gin's: gin still
// tracks the status and size, and the middleware sees them too.
type writer struct {
	gin.ResponseWriter
	w http.ResponseWriter
}

func (w *writer) WriteHeader(code int)              { w.w.WriteHeader(code) }
func (w *writer) Write(b []byte) (int, error)       { return w.w.Write(b) }
func (w *writer) WriteString(s string) (int, error) { return w.w.Write([]byte(s)) }

// WriteHeaderNow sends the status gin holds, which w sees first.
func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.w.WriteHeader(w.Status())
	}
	w.ResponseWriter.WriteHeaderNow()
}

// Flush flushes through w, if it can.
func (w *writer) Flush() { http.NewResponseController(w.w).Flush() }

// Hijack hijacks through w, which gives the request's place back.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.w).Hijack()
}

// Unwrap returns w, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.w }
