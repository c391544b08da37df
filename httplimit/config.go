package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/front"
)

// Config configures a Middleware. Every layer is optional; the zero Config
// limits nothing.
//
// Its field docs are also the full description of the fields every front
// end has (all but InFlightStatus, Headers and Deny), to which the docs of
// grpclimit.Config link, saying only what gRPC changes.
type Config struct {
	// Exempt, if set, picks requests that bypass every layer, such as health
	// probes and static files (see ExemptPaths, ExemptPrefixes): a probe
	// refused under load gets a busy but healthy process restarted.
	Exempt func(*http.Request) bool

	// MaxInFlight caps the requests being served at once in the process,
	// with a limits.Gate of the Middleware's own; 0 sets no cap (see Gate
	// for a gate shared with other front ends). A request that finds the gate full
	// is refused with 503 and reason server_busy. With Adaptive, it is the
	// ceiling of the adaptive limit.
	MaxInFlight int
	// QueueWait is how long a request may wait for room in the gate before
	// it is refused; 0 refuses at once, or, with an adaptive gate (Adaptive
	// or Controller), waits the controller's wait (adaptive.Controller.Wait:
	// the time in which two places free, at most the mean latency, and the
	// mean latency until the controller's first window ends; set
	// Adaptive.Wait < 0 for none). Keep it short: it is for bursts that
	// clear within milliseconds, not a queue.
	QueueWait time.Duration
	// QueueAdapt, if positive, lets the gate stop queueing while waiting
	// does not help (see limits.Gate.AdaptWait): every QueueAdapt, it looks
	// at the requests that waited, and if at least four did and more than a
	// third of them waited QueueWait in vain, it refuses at once for a
	// while. 100ms suits a QueueWait of a few milliseconds; 0 never stops.
	// It needs MaxInFlight and QueueWait.
	QueueAdapt time.Duration
	// Adaptive, if set, lets the gate find its own limit: an
	// adaptive.Controller moves it between Adaptive.Min and MaxInFlight
	// (or Adaptive.Max, if lower) from the latency of the requests it
	// admits, measured from their admission until the handler returns or
	// calls ReleaseCapacity. A request refused by a later layer does not
	// count; with Timeout, one past its deadline, or answered 503 or 504
	// by the handler (with or without Timeout: the handler's writer sees
	// its status), counts as a sign of overload (adaptive.Dropped); a
	// request whose connection the handler hijacks counts as served at
	// the hijack. A request whose
	// client left, or that panicked, does not count. The limit starts from
	// Adaptive.Initial, or the ceiling, and unless Adaptive.ProbeEvery < 0
	// is halved at once to measure the baseline latency, again while that
	// shows it too high. It needs MaxInFlight; the zero adaptive.Config is
	// usable.
	Adaptive *adaptive.Config
	// Gate, if set, is a gate made elsewhere (limits.NewGate) that the
	// Middleware shares, in place of a gate of its own: with the same Gate
	// given to a grpclimit.Interceptor, and used directly by code such as
	// a WebSocket hub or a job runner, the process has one capacity
	// whatever the protocol. It excludes MaxInFlight, QueueAdapt and
	// Adaptive, which configure a gate of the Middleware's own (call
	// AdaptWait on the shared gate itself); QueueWait and Timeout still
	// apply to the Middleware's requests. Stats reports the gate's
	// counters with SharedGate set, and the metrics packages leave them to
	// the gate's own collector, registered once.
	Gate *limits.Gate
	// Controller, if set, is the adaptive.Controller that moves the
	// maximum of a shared gate (its Gate(), which Gate may leave unset):
	// the Middleware reports to it the latency and outcome of the
	// requests it admits, as with Adaptive, along with every other user
	// of the gate.
	Controller *adaptive.Controller
	// Priority, if set, returns a request's class at the gate, such as
	// limits.PriorityCritical for a reconnect or a health-critical call and
	// limits.PrioritySheddable for a prefetch; nil, or a gate without
	// reserves, puts every request in limits.PriorityDefault. The places a
	// gate keeps for the classes above a request's (limits.WithReserve, on
	// a gate made with limits.NewGate and given as Gate) are not its to
	// take: under a flood of sheddable requests, critical ones still get
	// in. Read the class from what the caller cannot choose (the route,
	// an authenticated identity), or a client may promote itself. The
	// gate counts each class's admissions and refusals (Stats.Gate).
	Priority func(*http.Request) limits.Priority
	// Timeout, if positive, is a deadline for each request, from when the
	// gate lets it in (from its arrival, without a gate): it bounds the
	// rate layers' limiter calls (each also by LimiterTimeout) and the
	// handler together. When it passes, the handler's context is cancelled
	// and the client gets 503 with reason request_timeout; a request whose
	// deadline passes before its handler starts (limiters slow to answer,
	// or failing under FailOpen) gets it without the handler being called,
	// and its charges are given back. The handler's response is buffered
	// until it returns, as with http.TimeoutHandler, so routes that stream
	// or hijack the connection need a Middleware without Timeout.
	Timeout time.Duration
	// BusyRetryAfter is the Retry-After sent with server_busy and
	// request_timeout refusals, rounded up to whole seconds; 0 means one
	// second.
	BusyRetryAfter time.Duration

	// Rate is each client's limit, such as {100, time.Minute}; the zero
	// Limit sets no rate limit unless Limiter is set. Clients are told
	// apart by address (see TrustedProxies, IPv4Prefix, IPv6Prefix).
	Rate limits.Limit
	// Burst is how many requests a client may make at once; 0 means
	// Rate.Events.
	Burst int
	// MaxKeys caps the clients tracked by each local limiter, and by the
	// per-client concurrency table; 0 means DefaultMaxKeys. A new
	// client finding a limiter's table full of clients in debt is refused
	// with 503 and reason table_full.
	MaxKeys int
	// Limiter, if set, decides for the address bucket in place of a local
	// limiter, for instance one shared by a fleet, such as a
	// redislimit.GCRA; it applies its own limit, and the RateLimit header
	// fields report the policy its Decisions carry. If Rate is set too, a
	// local limiter of Rate is asked first, in this process: a client
	// already over Rate here is refused without a call to Limiter, which
	// spares a shared store the traffic of abusive clients. Give it the
	// shared limit: a client over it in one process is over it in the
	// fleet, so the local check never refuses what Limiter would allow.
	Limiter limits.Limiter
	// LimiterTimeout bounds each call to Limiter, CallerLimiter or a
	// route policy's Limiter; past it, the call counts as failed and
	// OnLimiterError applies. 0 means 250ms, or Timeout if that is
	// shorter. The limiter's context ends a tenth of the bound (at most
	// 10ms) before it, so that a limiter giving up at its own deadline is
	// heard: the error counted and logged is then its own, with its cause
	// (a refused connection, say). A local limiter built from Rate decides
	// in process and is not bounded.
	LimiterTimeout time.Duration
	// Cost, if set, returns the cost of a request in the address and
	// caller key buckets, such as a larger one for an expensive route; nil
	// means 1. A cost above a bucket's burst is refused with reason
	// cost_above_burst (429, no Retry-After: waiting cannot help), a
	// negative one with invalid_cost (500).
	Cost func(*http.Request) int

	// CallerKey, if set, returns a key the caller chooses, such as a
	// session cookie or an API key (see CookieKey, HeaderKey), or "" for
	// none. Each such key gets its own bucket at Rate, in addition to the
	// client address bucket, which is never skipped: rotating the key does
	// not escape the address limit. The address bucket then allows
	// AddressMultiplier times Rate, so that the users behind one NAT are
	// not limited as one; requests without a caller key share one bucket
	// at Rate per address, so that leaving the key out earns nothing.
	// Limiters see a SHA-256 hash of the caller key, never the key.
	CallerKey func(*http.Request) string
	// AddressMultiplier scales the address bucket when CallerKey is set; 0
	// means DefaultAddressMultiplier.
	AddressMultiplier int
	// CallerLimiter, if set, replaces the local limiter for caller keys,
	// as Limiter does for addresses.
	CallerLimiter limits.Limiter

	// TrustedProxies lists the networks of the proxies in front of the
	// service. Only a request arriving from one of them has its
	// ForwardedHeader read; the client is the right-most address in it that
	// is not a trusted proxy. Empty: the client is always the connection's
	// peer.
	TrustedProxies []netip.Prefix
	// ForwardedHeader names the one header the trusted proxies write the
	// client's address in: "X-Forwarded-For" (the default), "Forwarded"
	// (RFC 7239) or "X-Real-IP". No other is read: a proxy passes headers
	// it does not write through from the client, who could otherwise choose
	// its own address.
	ForwardedHeader string
	// IPv4Prefix and IPv6Prefix group client addresses into one bucket per
	// prefix of that length; 0 means 32 for IPv4 and 64 for IPv6, where a
	// single user commonly holds a whole /64.
	IPv4Prefix, IPv6Prefix int

	// MaxInFlightPerClient caps the requests one client address has in
	// progress at once; 0 sets no cap. Each client is counted exactly, in
	// a table of at most MaxKeys clients with requests in progress: a
	// refusal gets InFlightStatus, 429 by default, and reason
	// concurrency_limited, or, when the table is full, 503 and reason
	// concurrency_table_full. A request's count is given back however it
	// ends: return, panic, client gone or timeout.
	MaxInFlightPerClient int
	// InFlightStatus is the status of concurrency_limited refusals.
	InFlightStatus int

	// OnLimiterError says what to do when a limiter returns an error or
	// does not answer within LimiterTimeout: refuse with 503 and reason
	// limiter_error (FailClosed, the default), or serve the request
	// (FailOpen). Either way the error is counted and logged.
	OnLimiterError ErrorPolicy

	// Headers selects the rate limit headers sent on rate-limited routes;
	// the zero value sends the IETF RateLimit-Policy and RateLimit fields.
	Headers HeaderMode
	// PolicyName names the client's policy in those fields; "" means
	// "default". The address bucket, when a caller key is set, is
	// "address".
	PolicyName string

	// Deny, if set, writes the response to refused requests in place of
	// the default application/problem+json body. Retry-After and the rate
	// limit headers are set on w before it is called.
	Deny func(w http.ResponseWriter, r *http.Request, d Denial)
	// Logger, if set, logs every refusal and limiter error, with the
	// reason, method, path and a hash of the key, never the key itself.
	Logger *slog.Logger
}

// DefaultAddressMultiplier is the AddressMultiplier used when CallerKey is
// set and none is given: an address may make 4 times the requests of one
// caller key.
const DefaultAddressMultiplier = front.DefaultAddressMultiplier

// ErrorPolicy says what the middleware does when a limiter fails. Its zero
// value is FailClosed.
type ErrorPolicy uint8

const (
	// FailClosed refuses the request with 503 and reason limiter_error.
	FailClosed ErrorPolicy = iota
	// FailOpen serves the request as if the failing limiter had allowed it;
	// a local limiter of Rate in front of it keeps counting and refusing.
	FailOpen
)

// HeaderMode selects the rate limit headers sent with responses. Its zero
// value is HeadersIETF.
type HeaderMode uint8

const (
	// HeadersIETF sends RateLimit-Policy and RateLimit in the syntax of
	// draft-ietf-httpapi-ratelimit-headers-10.
	HeadersIETF HeaderMode = iota
	// HeadersIETFAndLegacy adds X-RateLimit-Limit, X-RateLimit-Remaining
	// and X-RateLimit-Reset to the IETF fields.
	HeadersIETFAndLegacy
	// HeadersLegacy sends only the X-RateLimit-* headers.
	HeadersLegacy
	// HeadersNone sends no rate limit headers; refusals still carry
	// Retry-After.
	HeadersNone
)

// Environment variables read by LoadEnv, with the prefix "LIMITS_". With
// another prefix, such as "LIMITS_LOGIN_", that prefix replaces "LIMITS_"
// in each name.
const (
	EnvRate                 = "LIMITS_RATE"                    // Rate, as limits.ParseLimit reads it: "100/min"
	EnvBurst                = "LIMITS_BURST"                   // Burst, an integer >= 1
	EnvMaxKeys              = "LIMITS_MAX_KEYS"                // MaxKeys, an integer >= 1
	EnvMaxInFlight          = "LIMITS_MAX_INFLIGHT"            // MaxInFlight, an integer >= 1
	EnvQueueWait            = "LIMITS_QUEUE_WAIT"              // QueueWait, a duration such as "20ms", or 0
	EnvQueueAdapt           = "LIMITS_QUEUE_ADAPT"             // QueueAdapt, a duration such as "100ms", or 0
	EnvAdaptive             = "LIMITS_ADAPTIVE"                // Adaptive's law: gradient, vegas, aimd, or off for none
	EnvAdaptiveMin          = "LIMITS_ADAPTIVE_MIN"            // Adaptive.Min, an integer >= 1; needs Adaptive
	EnvTimeout              = "LIMITS_TIMEOUT"                 // Timeout, a duration such as "10s"
	EnvBusyRetryAfter       = "LIMITS_BUSY_RETRY_AFTER"        // BusyRetryAfter, a duration such as "2s"
	EnvLimiterTimeout       = "LIMITS_LIMITER_TIMEOUT"         // LimiterTimeout, a duration such as "100ms"
	EnvAddressMultiplier    = "LIMITS_ADDRESS_MULTIPLIER"      // AddressMultiplier, an integer >= 1
	EnvMaxInFlightPerClient = "LIMITS_MAX_INFLIGHT_PER_CLIENT" // MaxInFlightPerClient, an integer >= 1
	EnvTrustedProxies       = "LIMITS_TRUSTED_PROXIES"         // TrustedProxies, comma-separated prefixes or addresses
	EnvForwardedHeader      = "LIMITS_FORWARDED_HEADER"        // ForwardedHeader: X-Forwarded-For, Forwarded or X-Real-IP
	EnvOnLimiterError       = "LIMITS_ON_LIMITER_ERROR"        // OnLimiterError: fail_closed or fail_open
	EnvHeaders              = "LIMITS_HEADERS"                 // Headers: ietf, ietf_legacy, legacy or none
	EnvPolicyName           = "LIMITS_POLICY_NAME"             // PolicyName
)

// forwardedHeaders are the headers ForwardedHeader may name.
var forwardedHeaders = []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"}

// LoadEnv sets the fields of c named by the environment variables Env*
// that are set, read with lookup (os.LookupEnv if nil). prefix replaces
// "LIMITS_" in their names; "" keeps it. Unset variables leave their
// fields alone. A value that cannot be parsed, or that would switch a
// limit off (a zero rate, a negative count), is an error naming the
// variable read: a service should refuse to start rather than run without
// the limits it was given.
func (c *Config) LoadEnv(prefix string, lookup func(string) (string, bool)) error {
	e := front.NewEnv("httplimit", prefix, lookup)
	e.Common(reflect.ValueOf(c).Elem(), forwardedHeaders)
	e.Choice(EnvHeaders, []string{"ietf", "ietf_legacy", "legacy", "none"}, func(i int) { c.Headers = HeaderMode(i) })
	return e.Err
}

// LoadEnv sets the fields of p named by the variables RATE, BURST and
// MAX_KEYS after prefix (such as LIMITS_LOGIN_RATE for the prefix
// "LIMITS_LOGIN_"), as Config.LoadEnv does; prefix must not be empty.
func (p *Policy) LoadEnv(prefix string, lookup func(string) (string, bool)) error {
	if prefix == "" {
		return fmt.Errorf("httplimit: Policy.LoadEnv needs a prefix, such as LIMITS_%s_", strings.ToUpper(p.Name))
	}
	e := front.NewEnv("httplimit", prefix, lookup)
	e.Limit(EnvRate, &p.Rate)
	e.Integer(EnvBurst, &p.Burst)
	e.Integer(EnvMaxKeys, &p.MaxKeys)
	return e.Err
}
