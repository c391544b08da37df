package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// mustNew returns a Middleware configured by cfg, failing the test on an
// error.
func mustNew(t testing.TB, cfg Config) *Middleware {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// named returns the map of Limiters that holds l under the name "l".
func named(l limits.Limiter) map[string]limits.Limiter {
	return map[string]limits.Limiter{"l": l}
}

// serve sends one GET for path from the client address remote, with header
// name-value pairs, straight to h.
func serve(h http.Handler, remote, path string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problemOf decodes a refusal's problem body.
func problemOf(t *testing.T, w *httptest.ResponseRecorder) problem {
	t.Helper()
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return p
}

// reasonOf returns the reason code of a refusal's problem body, "" for a
// response that is none.
func reasonOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	if w.Code < 400 {
		return ""
	}
	return problemOf(t, w).Reason
}

// freeFor returns how many requests of the client at peer m would admit
// now, up to most, by admitting them through its engine and ending them
// at once: with a per-client cap of most and a gate of at least most, it
// is most exactly when the client holds no place and no count. The probe
// counts in Stats.
func freeFor(t *testing.T, m *Middleware, peer string, most int) int {
	t.Helper()
	tickets := make([]admit.Ticket, most)
	n := 0
	for ; n < most; n++ {
		if err := m.Engine().Admit(context.Background(), &admit.Request{Peer: peer, Route: "/probe"}, &tickets[n]); err != nil {
			break
		}
	}
	for i := range n {
		tickets[i].Done(adaptive.Ignored)
	}
	return n
}

// pipeListener is an in-memory network for a real http.Server and real
// http.Clients inside synctest bubbles, where loopback sockets would keep
// the bubble from ever being idle.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// remoteConn is the server's end of a pipe, claiming to come from addr.
type remoteConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.addr }

// client returns an http.Client whose connections reach the server as if
// from remote, an "ip:port".
func (l *pipeListener) client(remote string) *http.Client {
	addr, err := net.ResolveTCPAddr("tcp", remote)
	if err != nil {
		panic(err)
	}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, s := net.Pipe()
			select {
			case l.conns <- remoteConn{s, addr}:
				return c, nil
			case <-l.closed:
				return nil, net.ErrClosed
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}}
}

// pipeServer serves h on an in-memory network until the test ends. Call it
// inside a synctest bubble.
func pipeServer(t *testing.T, h http.Handler) *pipeListener {
	l := newPipeListener()
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l
}

// fetch sends a GET for path with c, with header name-value pairs, and
// returns the response with its body read.
func fetch(c *http.Client, path string, header ...string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://limits.test"+path, nil)
	if err != nil {
		return nil, "", err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body), err
}

// get is fetch for the test's goroutine: it stops the test on an error.
func get(t *testing.T, c *http.Client, path string, header ...string) (*http.Response, string) {
	t.Helper()
	resp, body, err := fetch(c, path, header...)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp, body
}

// goGet runs fetch in a new goroutine, reporting an error to t.
func goGet(t *testing.T, c *http.Client, path string) {
	go func() {
		if _, _, err := fetch(c, path); err != nil {
			t.Errorf("GET %s: %v", path, err)
		}
	}()
}

// ok is a handler that answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
