package redislimit

import (
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// dialWatch notes a client's latest failed dial, so that a call that ran
// out of time while go-redis was still trying to connect can say why it
// could not. go-redis dials on a goroutine of its own and retries with
// pauses, so the caller's deadline usually ends the wait before the dial
// error reaches it.
//
// A dialWatch is a redis.Hook that observes dials. It leaves commands and
// pipelines as they are, but for the commands of a GCRA when it has a
// bound client (see boundClient): it sends those with that client.
type dialWatch struct {
	last atomic.Pointer[dialFailure] // nil after a successful dial

	// bound shares the watched client's connection pool and bounds its
	// socket I/O by the context, or is nil if the watched client does that
	// itself or no such client could be had.
	bound *redis.Client
}

// boundKey marks the context of a command that a dialWatch sends with its
// bound client.
type boundKey struct{}

// diverts reports whether w sends the commands of the GCRAs with its bound
// client. w may be nil.
func (w *dialWatch) diverts() bool { return w != nil && w.bound != nil }

// boundContext returns ctx, marked for w to send its commands with the
// bound client if it has one.
func (w *dialWatch) boundContext(ctx context.Context) context.Context {
	if !w.diverts() {
		return ctx
	}
	return context.WithValue(ctx, boundKey{}, true)
}

// dialFailure is a failed dial and when it ended.
type dialFailure struct {
	err error
	at  time.Time
}

// DialHook notes the outcome of each dial.
func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			w.last.Store(&dialFailure{err: err, at: time.Now()})
		} else {
			w.last.Store(nil)
		}
		return c, err
	}
}

// ProcessHook sends a GCRA's commands with the bound client, if w has one,
// once the hooks added to the watched client before it have seen them, and
// leaves other commands alone.
func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if w.bound == nil {
		return next
	}
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(boundKey{}) != nil {
			return w.bound.Process(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook leaves pipelines alone.
func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dialProbe is how long before a call a failed dial still tells why the
// call failed: once PoolSize dials in a row have failed, go-redis fails
// calls at once with the latest dial's error, without dialing, and probes
// the server once a second; a call that then spends its time in retries'
// backoff ends at its deadline with no dial of its own.
const dialProbe = 1100 * time.Millisecond

// since returns the error of the latest dial if it failed, no dial having
// succeeded since, at most dialProbe before start, or later; else nil. w
// may be nil.
func (w *dialWatch) since(start time.Time) error {
	if w == nil {
		return nil
	}
	if f := w.last.Load(); f != nil && !f.at.Before(start.Add(-dialProbe)) {
		return f.err
	}
	return nil
}

// watches holds the dialWatch of each client that has one, so that a
// client gets one hook however many GCRAs use it. Its keys are weak
// pointers to the clients, each removed once its client is garbage, and
// so are its values: a client's hook keeps its dialWatch alive, and
// nothing here keeps the client alive, not even a bound client that refers
// back to it (as Client.WithTimeout's does with client-side caching on).
var watches struct {
	sync.Mutex
	m map[any]weak.Pointer[dialWatch]
}

// watchDials returns c's dialWatch, adding it to c first if c has none; nil
// for clients of other types than *redis.Client and *redis.ClusterClient.
// A ClusterClient's own dial hook is not used: each node has a client of
// its own, and the watch is added to those made from now on.
func watchDials(c redis.UniversalClient) *dialWatch {
	switch c := c.(type) {
	case *redis.Client:
		return watchOf(c, func(w *dialWatch) {
			w.bound = boundClient(c)
			c.AddHook(w)
		})
	case *redis.ClusterClient:
		return watchOf(c, func(w *dialWatch) {
			c.OnNewNode(func(node *redis.Client) { node.AddHook(w) })
		})
	}
	return nil
}

// boundClient returns a client that shares c's connection pool and bounds
// its socket reads and writes by the context, as ContextTimeoutEnabled
// does, with c's timeouts otherwise, made with Client.WithTimeout: so that
// a GCRA's call needs no goroutine of its own to end at its deadline. It
// returns nil if c bounds its I/O by the context itself, if c's timeouts
// turn socket deadlines off, or if the clone's options could not be set
// without setting c's. The clone has no hooks: the commands reach it from
// the hook of c's dialWatch, after c's earlier hooks.
func boundClient(c *redis.Client) *redis.Client {
	o := c.Options()
	if o.ContextTimeoutEnabled || o.ReadTimeout < 0 || o.WriteTimeout < 0 {
		return nil
	}
	clone := c.WithTimeout(o.ReadTimeout)
	co := clone.Options()
	if co == o {
		return nil
	}
	co.WriteTimeout = o.WriteTimeout
	co.ContextTimeoutEnabled = true
	if !clone.Options().ContextTimeoutEnabled {
		return nil
	}
	return clone
}

func watchOf[T any](c *T, install func(*dialWatch)) *dialWatch {
	k := weak.Make(c)
	watches.Lock()
	defer watches.Unlock()
	if wp, ok := watches.m[k]; ok {
		if w := wp.Value(); w != nil {
			return w
		}
	}
	if watches.m == nil {
		watches.m = make(map[any]weak.Pointer[dialWatch])
	}
	w := &dialWatch{}
	install(w)
	watches.m[k] = weak.Make(w)
	runtime.AddCleanup(c, func(k weak.Pointer[T]) {
		watches.Lock()
		delete(watches.m, k)
		watches.Unlock()
	}, k)
	return w
}
