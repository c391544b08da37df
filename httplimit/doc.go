// Package httplimit provides net/http middleware that protects a service
// with the limiters of package limits, in layers: exemptions for probes and
// static files, a capacity gate and a deadline for the whole process, a
// rate limit per client address (and per caller key, such as a session or
// an API key), and a cap on the requests each client has in progress.
//
// A Middleware's Handler method has the type func(http.Handler)
// http.Handler, so it wraps any handler and plugs into net/http's ServeMux
// and routers such as chi:
//
//	m, err := httplimit.New(httplimit.Config{
//		Exempt:      httplimit.ExemptPaths("/healthz", "/readyz"),
//		MaxInFlight: 512,
//		Rate:        limits.Limit{Events: 100, Period: time.Minute},
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	http.ListenAndServe(addr, m.Handler(mux))
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
package httplimit
