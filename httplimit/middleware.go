package httplimit

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// Config configures a Middleware: the layers, in Limits, and what only a
// function of an *http.Request can say. The zero Config limits nothing.
type Config struct {
	// Limits configures the layers: the gate, the rate policies and their
	// routes, per-client concurrency (see admit.Config, where every field
	// is described). The route of a request is its URL path, and its
	// method the request's method; a caller key or a policy's key names a
	// header ("X-API-Key"), a cookie ("cookie:session"), or a function of
	// Keys.
	Limits admit.Config
	// Keys, if set, are functions that read fields of a request under
	// names of their own, for Limits.CallerKey and the policies' Key: a
	// user from a verified token, say. A name here hides the header of
	// that name.
	Keys map[string]func(*http.Request) string
	// Exempt, if set, picks requests that bypass every layer, in addition
	// to the routes of Limits.Exempt.
	Exempt func(*http.Request) bool
	// Priority, if set, returns a request's class at the gate, such as
	// limits.PriorityCritical for a reconnect and
	// limits.PrioritySheddable for a prefetch; nil puts every request in
	// limits.PriorityDefault. The gate counts each class's admissions and
	// refusals; the places it keeps for the classes above a request's
	// (Limits.Reserve) are not the request's to take, a place freed goes
	// to the request waiting longest among those whose class may take it,
	// and a request that finds the queue full takes the place in it of
	// the last one of a lower class, if any. Read the
	// class from what the caller cannot choose (the route, an
	// authenticated identity), or a client may promote itself.
	Priority func(*http.Request) limits.Priority
	// Cost, if set, returns what a request costs in the rate policies
	// (those whose Cost is not set), such as a larger one for an
	// expensive route; nil, or 0, means 1. A cost above a bucket's burst
	// is refused with reason cost_above_burst (429, no Retry-After:
	// waiting cannot help), a negative one with invalid_cost (500).
	Cost func(*http.Request) int
	// InFlightStatus is the status of concurrency_limited refusals; 0
	// means 429.
	InFlightStatus int
	// Deny, if set, writes the response to refused requests in place of
	// the default application/problem+json body, with the status the
	// Middleware chose. Retry-After and the rate limit fields are set on
	// w before it is called. It may read ref, but not keep it past its
	// return.
	Deny func(w http.ResponseWriter, r *http.Request, status int, ref *admit.Refusal)
}

// Middleware limits the requests that pass through its Handler, with the
// layers of an admit.Engine applied in this order, each optional:
//
//  1. Exemptions: requests of the routes of Limits.Exempt, and those
//     Config.Exempt picks, bypass every layer.
//  2. Capacity: a limits.Gate caps the requests in progress in the process
//     (503 server_busy), at a fixed number or one that package adaptive
//     finds from latency, and a deadline bounds each request (503
//     request_timeout).
//  3. Rate: a bucket per client address, then one per caller key if
//     configured (429 rate_limited), then the policies of the request's
//     route.
//  4. Concurrency: a cap on the requests one client address has in
//     progress (429 concurrency_limited by default).
//
// A request refused by a layer costs nothing in any other (see
// admit.Engine for the whole contract). Every refusal is counted (Stats),
// may be logged, and is answered from the deciding layer's answer: its
// status and reason, a Retry-After never earlier than the truth (none when
// waiting cannot help), and the rate limit fields of the policy that
// refused. Allowed requests carry the fields of every policy applied.
//
// A Middleware is safe for concurrent use. Create one with New; the zero
// value is not usable.
type Middleware struct {
	e        *admit.Engine
	keys     map[string]func(*http.Request) string
	exempt   func(*http.Request) bool
	priority func(*http.Request) limits.Priority
	cost     func(*http.Request) int
	status   int // of concurrency_limited
	deny     func(http.ResponseWriter, *http.Request, int, *admit.Refusal)
}

// New returns a Middleware configured by cfg, or an error naming the first
// field of cfg that cannot be honoured (see admit.New).
func New(cfg Config) (*Middleware, error) {
	m := &Middleware{
		keys: cfg.Keys, exempt: cfg.Exempt, priority: cfg.Priority, cost: cfg.Cost,
		status: cfg.InFlightStatus, deny: cfg.Deny,
	}
	if m.status == 0 {
		m.status = http.StatusTooManyRequests
	}
	if m.status < 400 || m.status > 599 {
		return nil, errorf("InFlightStatus must be a 4xx or 5xx status, got %d", cfg.InFlightStatus)
	}
	if err := cfg.Limits.CheckKeys(slices.Collect(maps.Keys(cfg.Keys))); err != nil {
		return nil, errorf("Limits: %w", err)
	}
	var err error
	if m.e, err = admit.New(cfg.Limits); err != nil {
		return nil, errorf("Limits: %w", err)
	}
	return m, nil
}

// Handler returns next wrapped in m's layers. Its type makes m.Handler a
// middleware for net/http's ServeMux and for routers such as chi.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
}

// Stats returns a snapshot of m's counters (see admit.Stats), with
// Protocol "http".
func (m *Middleware) Stats() admit.Stats {
	s := m.e.Stats()
	s.Protocol = "http"
	return s
}

// Engine returns the engine that applies m's layers: to share its gate
// (Engine.Gate), or to admit requests of another kind through the same
// layers.
func (m *Middleware) Engine() *admit.Engine { return m.e }

// Update replaces m's layers' configuration while m serves, keeping every
// key's state and every counter, as admit.Engine.Update does, or returns
// an error naming what cannot be honoured and changes nothing. The
// functions of Config (Keys, Exempt, Priority, Cost, Deny) stay as New
// set them.
func (m *Middleware) Update(limits admit.Config) error {
	if err := limits.CheckKeys(slices.Collect(maps.Keys(m.keys))); err != nil {
		return errorf("Limits: %w", err)
	}
	if err := m.e.Update(limits); err != nil {
		return errorf("Limits: %w", err)
	}
	return nil
}

// ClientKey returns the key of r's client address, as the address bucket
// and per-client concurrency see it (see admit.Engine.ClientKey): "a:" and
// the client's address prefix, such as "a:192.0.2.7/32". Use it to log a
// client, or to Reset it.
func (m *Middleware) ClientKey(r *http.Request) string {
	return m.e.ClientKey(&admit.Request{Peer: r.RemoteAddr, Fields: &request{m: m, r: r}})
}

// Reset forgets key's state in every limiter of m that can forget, so
// that the client finds its full burst again: to unblock an address by
// hand, say, with the key ClientKey gives (see admit.Engine.Reset).
func (m *Middleware) Reset(ctx context.Context, key string) error {
	return m.e.Reset(ctx, key)
}

// Field returns the first value of the request's field name, for the
// engine: a function of Keys, a cookie ("cookie:" and its name), or a
// header.
func (q *request) Field(name string) string {
	if fn := q.m.keys[name]; fn != nil {
		return fn(q.r)
	}
	if c, ok := strings.CutPrefix(name, "cookie:"); ok {
		ck, err := q.r.Cookie(c)
		if err != nil {
			return ""
		}
		return ck.Value
	}
	return q.r.Header.Get(name)
}

// FieldValues returns every value of the header name, for the engine.
func (q *request) FieldValues(name string) []string { return q.r.Header.Values(name) }

func (m *Middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	q := &request{m: m, r: r}
	req := admit.Request{Peer: r.RemoteAddr, Method: r.Method, Route: r.URL.EscapedPath(), Fields: q, Exempt: m.exempt != nil && m.exempt(r)}
	if !req.Exempt {
		if m.cost != nil {
			req.Cost = m.cost(r)
		}
		if m.priority != nil {
			req.Priority = m.priority(r)
		}
	}
	if err := m.e.Admit(r.Context(), &req, &q.t); err != nil {
		if ref, ok := err.(*admit.Refusal); ok {
			m.refuse(w, r, ref)
		} // else the client left: nobody to answer
		return
	}
	if q.t.Exempt() {
		next.ServeHTTP(w, r)
		return
	}
	h := w.Header()
	q.t.Fields(q.mem[:], func(name, v string) {
		q.vals[q.nvals] = v
		h[name] = q.vals[q.nvals : q.nvals+1 : q.nvals+1]
		q.nvals++
	})
	if _, ok := q.t.Deadline(); ok {
		m.serveWithTimeout(next, w, r, q)
		return
	}
	// Until the handler has returned, the request is one the service did
	// not serve: it panicked.
	outcome := adaptive.Ignored
	defer func() { q.done(outcome) }()
	// The handler writes through q, which sees its status and gives the
	// place in the gate back if it hijacks the connection.
	q.rw = w
	next.ServeHTTP(q, r)
	outcome = q.outcome()
}

// errorf returns an error prefixed with the package's name.
func errorf(format string, args ...any) error {
	return fmt.Errorf("httplimit: "+format, args...)
}
