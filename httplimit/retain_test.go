package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// keepingLimiter is a Limiter that keeps every key it is given, as a
// limiter built on a map does, or redislimit's table of leases.
type keepingLimiter struct {
	mu   sync.Mutex
	keys map[string]int
	g    *limits.GCRA
}

func (l *keepingLimiter) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	l.mu.Lock()
	l.keys[key]++
	l.mu.Unlock()
	return l.g.Take(ctx, key, n)
}

func (l *keepingLimiter) Refund(ctx context.Context, key string, d limits.Decision) error {
	return l.g.Refund(ctx, key, d)
}

// bigBody is a request body that holds a megabyte.
type bigBody struct {
	io.Reader
	pad []byte
}

func (*bigBody) Close() error { return nil }

// TestKeptKeyFreesRequest checks that a Limiter keeping the keys it is
// given does not keep the requests they came from: the key must not share
// the memory of the request's state, which holds the request.
func TestKeptKeyFreesRequest(t *testing.T) {
	lim := &keepingLimiter{keys: map[string]int{}, g: limits.NewGCRA(100, time.Second)}
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 10, Limiters: named(lim), Limiter: "l", Rate: limits.Limit{Events: 100, Period: time.Second}}})
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var freed atomic.Int64
	const n = 50
	for i := range n {
		func() {
			body := &bigBody{Reader: strings.NewReader(""), pad: make([]byte, 1<<20)}
			runtime.AddCleanup(body, func(*atomic.Int64) { freed.Add(1) }, &freed)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Body = body
			r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", i)
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
	}
	// Cleanups run on a goroutine of their own after a collection: give
	// them rounds enough on a busy machine.
	for i := 0; i < 200 && freed.Load() < n; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	lim.mu.Lock()
	kept := len(lim.keys)
	lim.mu.Unlock()
	if kept != n {
		t.Fatalf("the limiter was given %d keys, want %d", kept, n)
	}
	if got := freed.Load(); got < n*9/10 {
		t.Errorf("%d of %d requests freed while the limiter keeps their keys", got, n)
	}
}
