package bench

import (
	"net/http"
	"time"

	"github.com/go-chi/httprate"
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// The HTTP benchmarks send requests from NumClients distinct client
// addresses, to middlewares that allow each address HTTPEvents requests
// per HTTPPeriod (the configurations in Middlewares state these values):
// no address reaches the limit in a run (each sees some tens of thousands
// of requests at most), and a minute is long enough that httprate's window
// turns at most once in a benchmark.
const (
	NumClients = 1024
	HTTPEvents = 1_000_000
	HTTPPeriod = time.Minute
)

// Middleware is one of the HTTP middlewares compared.
type Middleware struct {
	// Name names it in benchmark names, such as "HttplimitRate".
	Name string
	// Label names it in tables and charts.
	Label string
	// Kind is Baseline for the bare handler, Ours for package httplimit
	// and Peer for another library.
	Kind Kind
	// Config says how it is configured.
	Config string
	// New returns the middleware, limiting each client address to events
	// requests per period. The bare handler's limits nothing.
	New func(events int, period time.Duration) (func(http.Handler) http.Handler, error)
}

// Middlewares returns the middlewares compared: the bare handler first,
// then package httplimit, then the peers.
func Middlewares() []Middleware {
	return []Middleware{
		{
			Name:   "Bare",
			Label:  "bare handler",
			Kind:   Baseline,
			Config: "The handler alone: it writes `ok` and allocates nothing. Every overhead is a time minus its time.",
			New: func(int, time.Duration) (func(http.Handler) http.Handler, error) {
				return func(h http.Handler) http.Handler { return h }, nil
			},
		},
		{
			Name:  "HttplimitRate",
			Label: "httplimit Rate",
			Kind:  Ours,
			Config: "`httplimit.New(Config{Limits: admit.Config{Rate: limits.Limit{Events: 1_000_000, Period: time.Minute}}})`: a `limits.GCRA` " +
				"keyed by the client address (`RemoteAddr`, IPv4 /32), burst 1,000,000; it sets the `RateLimit-Policy` " +
				"and `RateLimit` headers on each response.",
			New: func(events int, period time.Duration) (func(http.Handler) http.Handler, error) {
				m, err := httplimit.New(httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: events, Period: period}}})
				if err != nil {
					return nil, err
				}
				return m.Handler, nil
			},
		},
		{
			Name:  "HttplimitGateRate",
			Label: "httplimit Gate + Rate",
			Kind:  Ours,
			Config: "As httplimit Rate, with `MaxInFlight: 1024`: each request also takes a place in a `limits.Gate` " +
				"for the process, held until the handler returns.",
			New: func(events int, period time.Duration) (func(http.Handler) http.Handler, error) {
				m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
					MaxInFlight: 1024,
					Rate:        limits.Limit{Events: events, Period: period},
				}})
				if err != nil {
					return nil, err
				}
				return m.Handler, nil
			},
		},
		{
			Name:  "HttprateLimitByIP",
			Label: "httprate LimitByIP",
			Kind:  Peer,
			Config: "go-chi/httprate v0.16.1: `httprate.LimitByIP(1_000_000, time.Minute)`, which there is " +
				"`LimitBy(1_000_000, time.Minute, KeyByIP)`: a sliding window counter in memory (`LocalCounter`) keyed " +
				"by the host of `RemoteAddr`; it sets `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` " +
				"on each response. `LimitByIP` and `KeyByIP` are deprecated in favour of `LimitBy` with a key function " +
				"of the caller's, but work as before.",
			New: func(events int, period time.Duration) (func(http.Handler) http.Handler, error) {
				//lint:ignore SA1019 LimitByIP is the middleware compared; it is deprecated but unchanged.
				return httprate.LimitByIP(events, period), nil
			},
		},
	}
}
