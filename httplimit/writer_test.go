package httplimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits/admit"
)

// dialRaw opens a connection to the server of url from a client of its
// own, and sends a GET of path that asks to upgrade.
func dialRaw(t *testing.T, url, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n", path)
	return conn, bufio.NewReader(conn)
}

// TestHijackGivesPlaceBack serves, over loopback, a handler that hijacks
// its connection and keeps it open, behind a gate of one place and a cap
// of one request per client: once hijacked, with no call from the handler,
// the place is free for another client's request, while the hijacking
// client's count stays until the handler returns.
func TestHijackGivesPlaceBack(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, MaxInFlightPerClient: 1}})
	hijacked := make(chan struct{})
	done := make(chan struct{})
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/socket" {
			io.WriteString(w, "ok")
			return
		}
		if _, ok := w.(http.Hijacker); !ok {
			t.Error("the handler's ResponseWriter is no http.Hijacker")
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		rw.Flush()
		close(hijacked)
		<-done // the socket lives on
	})))
	defer srv.Close()
	defer close(done)

	_, br := dialRaw(t, srv.URL, "/socket")
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 101") {
		t.Fatalf("upgrade: %q, %v", line, err)
	}
	<-hijacked
	if s := m.Stats().Gate; s.InFlight != 0 {
		t.Errorf("%d in the gate after the hijack, want 0", s.InFlight)
	}
	// Another client gets the place; the socket's client does not get a
	// second request in while its handler runs.
	other := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext(ctx, network, addr)
	}}}
	resp, err := other.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another client's request while the socket is open: %d, want 200", resp.StatusCode)
	}
	resp, err = srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the socket's client, a second request: %d, want 429 concurrency_limited", resp.StatusCode)
	}
	if s := m.Stats(); s.Requests[admit.ConcurrencyLimited] != 1 || s.Requests[admit.ServerBusy] != 0 {
		t.Errorf("Stats %v", s.Requests)
	}
}

// TestSwitchingProtocolsGivesPlaceBack checks that a handler writing 101
// Switching Protocols, as a WebSocket library may before it hijacks,
// gives its place in the gate back, and that the status reaches the
// client's writer.
func TestSwitchingProtocolsGivesPlaceBack(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1}})
	inFlight := -1
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusSwitchingProtocols)
		inFlight = m.Stats().Gate.InFlight
	}))
	w := serve(h, "192.0.2.1:1", "/socket")
	if inFlight != 0 || w.Code != http.StatusSwitchingProtocols {
		t.Errorf("after 101: %d in the gate, status %d; want 0 and 101", inFlight, w.Code)
	}
	if s := m.Stats().Gate; s.InFlight != 0 || s.Admitted != 1 {
		t.Errorf("gate %+v", s)
	}
}

// TestServerSentEvents streams events through a Middleware with a gate:
// the handler's writer is an http.Flusher and its flushes reach the
// client while it runs, and http.ResponseController reaches the server's
// writer through Unwrap (a write deadline can be set).
func TestServerSentEvents(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 4}})
	next := make(chan struct{})
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the handler's ResponseWriter is no http.Flusher")
			return
		}
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the Middleware: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			f.Flush()
			<-next // the client read it before the handler goes on
		}
	})))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if want := fmt.Sprintf("data: %d\n", i); err != nil || line != want {
			t.Fatalf("event %d: %q, %v; want %q", i, line, err, want)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
}

// unwrapper is a ResponseWriter wrapping another, as logging and
// compression middleware do, with the Unwrap method
// http.ResponseController looks for.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// TestNoRequestCopy checks that a Middleware with a gate hands its handler
// the very request it was given, not a copy carrying the request's state,
// and that ReleaseCapacity finds that state through the handler's writer,
// or a writer wrapping it with Unwrap, and gives the place back.
func TestNoRequestCopy(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 2, MaxInFlightPerClient: 2}})
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		var same bool
		before, after := -1, -1
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, got *http.Request) {
			same = got == r
			if wrap {
				w = unwrapper{unwrapper{w}}
			}
			before = m.Stats().Gate.InFlight
			ReleaseCapacity(w)
			after = m.Stats().Gate.InFlight
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if !same {
			t.Errorf("wrapped %v: the handler got a copy of the request", wrap)
		}
		if before != 1 || after != 0 {
			t.Errorf("wrapped %v: %d in the gate before ReleaseCapacity, %d after; want 1 and 0", wrap, before, after)
		}
		if s := m.Stats().Gate; s.InFlight != 0 || s.Admitted != 1 || w.Code != 200 {
			t.Errorf("wrapped %v: gate %+v, status %d", wrap, s, w.Code)
		}
	}
}

// TestStatusSeen checks that a Middleware without Timeout sees the status
// its handler writes: an adaptive gate is told of the handler's own 503s
// and 504s as overload (adaptive.Dropped), of other answers as successes.
func TestStatusSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 8, Adaptive: aimdConfig()}})
		code := http.StatusOK
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Millisecond)
			w.WriteHeader(code)
		}))
		serve := func(n int) {
			for range n {
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
				time.Sleep(time.Millisecond)
			}
		}
		serve(40)
		if s := m.Stats().Adaptive; s.Samples == 0 || s.Dropped != 0 {
			t.Fatalf("200s: samples %d, dropped %d", s.Samples, s.Dropped)
		}
		for _, code = range []int{http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
			before := m.Stats().Adaptive.Dropped
			serve(40)
			if s := m.Stats().Adaptive; s.Dropped <= before {
				t.Errorf("the handler's %d: dropped %d -> %d, want more", code, before, s.Dropped)
			}
		}
		if l := m.Stats().Adaptive.Limit; l >= 8 {
			t.Errorf("AIMD did not back off on the handler's 503s and 504s: limit %d", l)
		}
	})
}
