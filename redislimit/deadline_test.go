package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// lateContext is a context whose deadline has been set on the socket but
// whose Err is still nil: the state of a context.WithTimeout whose timer
// has not fired yet when the socket's deadline, taken from it, already
// has, which happens under CPU contention. Its Done channel never closes.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

// TestDeadlineErrorWraps checks that a call that ends at its deadline
// returns an error wrapping context.DeadlineExceeded even when the context
// has not yet reported the deadline, as when the socket's deadline fires
// before the context's timer.
func TestDeadlineErrorWraps(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix()), WithTimeout(time.Hour)))
	if _, err := g.Allow(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	for i := range 3 {
		ctx := lateContext{context.Background(), time.Now().Add(30 * time.Millisecond)}
		_, err := g.Allow(ctx, "k")
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call %d: error %v, want one wrapping context.DeadlineExceeded", i, err)
		}
		err = g.Refund(ctx, "k", unitCharge(g))
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("refund %d: error %v, want one wrapping context.DeadlineExceeded", i, err)
		}
	}
}

// TestDownFailsWithin checks how long a call takes while nothing listens
// at Redis's address. With go-redis's default options, which retry a
// failed dial and a failed command with pauses, a call runs to the GCRA's
// timeout (or ends a little before it, once go-redis stops dialing and
// only pauses between its retries), and its error says why the connection
// failed. With MaxRetries -1 and DialerRetries 1, as docs/REDIS.md advises,
// a refused connection fails the call at once: with a timeout of an hour,
// every call returns the dial's error, with no deadline passed.
func TestDownFailsWithin(t *testing.T) {
	addr := closedAddr(t)
	for _, defaults := range []bool{true, false} {
		t.Run(fmt.Sprintf("defaults=%v", defaults), func(t *testing.T) {
			opts := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
			timeout := 50 * time.Millisecond
			if !defaults {
				opts.MaxRetries, opts.DialerRetries = -1, 1
				timeout = time.Hour
			}
			c := redis.NewClient(opts)
			t.Cleanup(func() { c.Close() })
			g := must(New(c, 10, time.Second, WithTimeout(timeout)))
			for i := range 30 { // beyond PoolSize failed dials, 10 per CPU
				start := time.Now()
				_, err := g.Allow(context.Background(), "k")
				elapsed := time.Since(start)
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("call %d: error %v, want one saying the connection was refused", i, err)
				}
				if !defaults && errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("call %d: error %v: waited for the deadline", i, err)
				}
				if elapsed > hangGuard {
					t.Errorf("call %d took %v", i, elapsed)
				}
			}
		})
	}
}

// unitCharge returns an allowed Decision of cost 1 such as g would have
// made just now, for Refund to send to Redis.
func unitCharge(g *GCRA) limits.Decision {
	return limits.Decision{Allowed: true, Limit: g.Limit(), Period: g.Period(), Burst: g.Burst(), Cost: 1,
		ResetAfter: g.EmissionInterval(), At: time.Now().Round(0)}
}

// countHook counts the commands a client sends.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestDefaultClientBound checks that with a *redis.Client that does not
// bound its I/O by the context, a GCRA still sends its commands through
// the hooks the client had and on its connections, but bounded by the
// context on the socket, so that no call needs a goroutine of its own, and
// leaves the caller's client as it was; and that a client whose timeouts
// turn socket deadlines off is left to the goroutine.
func TestDefaultClientBound(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), false)
	hook := &countHook{}
	c.AddHook(hook)
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	if !g.ctxAware {
		t.Fatal("the GCRA of a default client waits on a goroutine of its own")
	}
	if c.Options().ContextTimeoutEnabled {
		t.Error("New changed the caller's client")
	}
	for range 3 {
		if d, err := g.Allow(context.Background(), "k"); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	if n := hook.n.Load(); n != 4 { // the first EVALSHA meets NOSCRIPT and is sent again as EVAL
		t.Errorf("the client's hook saw %d commands, want 4", n)
	}
	if s := c.PoolStats(); s.TotalConns != 1 {
		t.Errorf("the client's pool holds %d connections, want the 1 the GCRA used", s.TotalConns)
	}
	// A pooled connection, then a paused server: the call ends at the
	// caller's deadline, on the socket.
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err := g.Allow(ctx, "k")
	cancel()
	srv.Resume()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("paused server: error %v", err)
	}

	off := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: -2, WriteTimeout: -2})
	t.Cleanup(func() { off.Close() })
	if g := must(New(off, 10, time.Hour)); g.ctxAware {
		t.Error("a client with no socket deadlines is taken as bounding its I/O by the context")
	}
}
