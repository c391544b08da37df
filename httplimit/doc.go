// Package httplimit provides net/http middleware that protects a service
// with the layers of package admit, in order: exemptions for probes and
// static files, a capacity gate (fixed, or adaptive: see
// admit.Config.Adaptive) and a deadline for the whole process, a rate
// limit per client address (and per caller key, such as a session or an
// API key), the rate policies of the request's route, and a cap on the
// requests each client has in progress.
//
// A Middleware's Handler method has the type func(http.Handler)
// http.Handler, so it wraps any handler and plugs into net/http's ServeMux
// and routers such as chi:
//
//	mux := http.NewServeMux()
//	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
//		Exempt:      []string{"/healthz", "/readyz"},
//		MaxInFlight: 512,
//		Rate:        limits.Limit{Events: 100, Period: time.Minute},
//	}})
//	if err != nil {
//		log.Fatal(err)
//	}
//	log.Fatal(http.ListenAndServe(":8080", m.Handler(mux)))
//
// Refusals are answered with 429 or 503, a Retry-After header never
// earlier than the limiter's answer, the IETF RateLimit-Policy and
// RateLimit header fields, and an application/problem+json body (RFC 9457)
// carrying a reason code. They are counted (Stats) and may be logged.
//
// Clients are told apart by the address of the connection's peer, grouped
// by prefix (IPv6 by /64); forwarding headers count only from trusted
// proxies. A key the caller chooses, such as a session cookie, can add a
// fairer bucket per key, but never replaces the address bucket: a caller
// cannot escape its address limit by changing keys.
//
// Config.Limits, the layers, is data: it reads from a JSON file and from the
// environment (admit.Config.LoadEnv), and Middleware.Update replaces it
// while the middleware serves, keeping every key's state and every
// counter. Transport is the client side: an http.RoundTripper that keeps
// outbound calls under the limits the servers announce.
//
// # The contract across layers
//
// The layers run in one order: exemptions, capacity (the gate, then the
// deadline), the client address's bucket, the caller key's bucket, the
// policies of the request's route, per-client concurrency. The order is
// part of the contract, and so is this:
//
//   - A refused request costs nothing: when a layer refuses, the buckets
//     earlier layers charged are given back, leaving each key owing no
//     less than before the request and exactly that much when no other
//     request came in between. Requests that ran concurrently are charged
//     as they would have been anyway.
//   - A caller key gets a bucket only for a request its address allowed,
//     so the entries one address can create are bounded by its own
//     allowance: rotating session cookies cannot fill the table that new
//     users need.
//   - Every wait is bounded: the gate's queue by QueueWait (with an
//     adaptive gate and no QueueWait, by the controller's wait, at most
//     the mean latency), each call of a limiter by LimiterTimeout, the
//     request from its admission (limiter calls and handler together) by
//     Timeout. Past the bound the layer's policy applies, and every place
//     taken is given back on every way out: return, panic, client gone,
//     timeout, ReleaseCapacity.
//   - Per-client concurrency is counted exactly for each client.
//   - A refusal reports the layer that refused: its status, reason code,
//     policy and RateLimit fields, and a Retry-After only when waiting
//     helps, never earlier than the truth.
package httplimit
