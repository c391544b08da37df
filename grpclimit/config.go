package grpclimit

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/front"
)

// Config configures an Interceptor. Every layer is optional: the zero
// Config limits nothing, and exempts the standard health service (see
// Exempt).
type Config struct {
	// Exempt, if set, picks the methods whose calls bypass every layer, by
	// full method name ("/package.Service/Method"; see ExemptServices,
	// ExemptMethods). nil means DefaultExempt: the standard health service,
	// whose probes, refused under load, would get a busy but healthy
	// process restarted. ExemptServices() with no argument exempts nothing.
	Exempt func(fullMethod string) bool

	// MaxInFlight caps the calls being served at once in the process, with
	// a limits.Gate; 0 sets no cap. A call that finds the gate full is
	// refused with codes.Unavailable and reason server_busy. A stream holds
	// its place only while it is set up (see Interceptor.Stream). With
	// Adaptive, it is the ceiling of the adaptive limit.
	MaxInFlight int
	// QueueWait is how long a call may wait for room in the gate before it
	// is refused; 0 refuses at once, or, with an adaptive gate (Adaptive
	// or Controller), waits the controller's wait (adaptive.Controller.Wait:
	// the time in which two places free, at most the mean latency; set
	// Adaptive.Wait < 0 for none). Keep it short: it is for bursts that
	// clear within milliseconds, not a queue.
	QueueWait time.Duration
	// QueueAdapt, if positive, lets the gate stop queueing while waiting
	// does not help (see limits.Gate.AdaptWait): every QueueAdapt, it looks
	// at the calls that waited, and if at least four did and more than a
	// third of them waited QueueWait in vain, it refuses at once for a
	// while. 100ms suits a QueueWait of a few milliseconds; 0 never stops.
	// It needs MaxInFlight and QueueWait.
	QueueAdapt time.Duration
	// Adaptive, if set, lets the gate find its own limit: an
	// adaptive.Controller moves it between Adaptive.Min and MaxInFlight
	// (or Adaptive.Max, if lower) from the latency of the calls it admits,
	// measured from their admission until the handler returns (a unary
	// call), the stream is established, or ReleaseCapacity is called. A
	// call refused by a later layer does not count; one that ends with
	// codes.Unavailable or codes.DeadlineExceeded, passes Timeout or
	// outlives the client's deadline, counts as a sign of overload
	// (adaptive.Dropped); one the client cancels, or that panics, does not
	// count. The limit starts from Adaptive.Initial, or the ceiling, and
	// unless Adaptive.ProbeEvery < 0 is halved at once to measure the
	// baseline latency, again while that shows it too high. It needs
	// MaxInFlight; the zero adaptive.Config is usable.
	Adaptive *adaptive.Config
	// Gate, if set, is a gate made elsewhere (limits.NewGate) that the
	// Interceptor shares, in place of a gate of its own: with the same
	// Gate given to an httplimit.Middleware, and used directly by code
	// such as a job runner, the process has one capacity whatever the
	// protocol. It excludes MaxInFlight, QueueAdapt and Adaptive, which
	// configure a gate of the Interceptor's own; QueueWait and Timeout
	// still apply to its calls. Stats reports the gate's counters with
	// SharedGate set, and the metrics packages leave them to the gate's
	// own collector, registered once.
	Gate *limits.Gate
	// Controller, if set, is the adaptive.Controller that moves the
	// maximum of a shared gate (its Gate(), which Gate may leave unset):
	// the Interceptor reports to it the latency and outcome of the calls
	// it admits, as with Adaptive.
	Controller *adaptive.Controller
	// Priority, if set, returns the class at the gate of a call of the
	// method named, as httplimit.Config.Priority does for a request (see
	// MetadataPriority, for a criticality that trusted callers send); nil
	// puts every call in limits.PriorityDefault.
	Priority func(ctx context.Context, fullMethod string) limits.Priority
	// Timeout, if positive, is a deadline for each unary call, from when
	// the gate lets it in (from its arrival, without a gate): it bounds the
	// rate layers' limiter calls (each also by LimiterTimeout) and the
	// handler together. When it passes, the handler's context is cancelled
	// and the client gets codes.DeadlineExceeded with reason
	// request_timeout, while the call keeps its place in the gate until the
	// handler returns; a call whose deadline passes before its handler
	// starts (limiters slow to answer, or failing under FailOpen) gets it
	// without the handler being called, and its charges are given back.
	// For a stream, which lives as long as it is used, Timeout bounds only
	// its set-up: a stream not established within Timeout of its admission
	// gives its place in the gate back and carries on.
	Timeout time.Duration
	// BusyRetryAfter is the retry delay sent with server_busy,
	// concurrency_limited, concurrency_table_full, table_full and
	// limiter_error refusals; 0 means one second.
	BusyRetryAfter time.Duration

	// Rate is each client's limit, such as {100, time.Minute}; the zero
	// Limit sets no rate limit unless Limiter is set. Clients are told
	// apart by address (see TrustedProxies, IPv4Prefix, IPv6Prefix). A
	// stream is charged once when it opens, and, with LimitMessages, for
	// each message after its first.
	Rate limits.Limit
	// Burst is how many calls a client may make at once; 0 means
	// Rate.Events.
	Burst int
	// MaxKeys caps the clients tracked by each local limiter, and by each
	// per-client concurrency table; 0 means DefaultMaxKeys. A new client
	// finding a limiter's table full of clients in debt is refused with
	// codes.Unavailable and reason table_full.
	MaxKeys int
	// Limiter, if set, decides for the address bucket in place of a local
	// limiter, for instance one shared by a fleet, such as a
	// redislimit.GCRA. If Rate is set too, a local limiter of Rate is
	// asked first, in this process: a client already over Rate here is
	// refused without a call to Limiter. Give it the shared limit.
	Limiter limits.Limiter
	// LimiterTimeout bounds each call to Limiter or CallerLimiter; past
	// it, the call counts as failed and OnLimiterError applies. 0 means
	// 250ms, or Timeout if that is shorter. The limiter's context ends a
	// tenth of the bound (at most 10ms) before it, so that a limiter giving
	// up at its own deadline is heard: the error counted and logged is
	// then its own, with its cause (a refused connection, say). A local
	// limiter built from Rate decides in process and is not bounded.
	LimiterTimeout time.Duration
	// Cost, if set, returns the cost of a call of the method named in the
	// address and caller key buckets, such as a larger one for an
	// expensive method; nil means 1. A cost above a bucket's burst is
	// refused with reason cost_above_burst (codes.ResourceExhausted, with
	// no retry delay and a pushback that stops gRPC's retries: waiting
	// cannot help), a negative one with invalid_cost (codes.Internal).
	Cost func(ctx context.Context, fullMethod string) int

	// CallerKey, if set, returns a key the caller chooses, such as a
	// bearer token or an API key (see MetadataKey), or "" for none. Each
	// such key gets its own bucket at Rate, in addition to the client
	// address bucket, which is never skipped: rotating the key does not
	// escape the address limit. The address bucket then allows
	// AddressMultiplier times Rate, so that the users behind one NAT are
	// not limited as one; calls without a caller key share one bucket at
	// Rate per address. Limiters see a SHA-256 hash of the caller key,
	// never the key.
	CallerKey func(ctx context.Context) string
	// AddressMultiplier scales the address bucket when CallerKey is set; 0
	// means DefaultAddressMultiplier.
	AddressMultiplier int
	// CallerLimiter, if set, replaces the local limiter for caller keys,
	// as Limiter does for addresses.
	CallerLimiter limits.Limiter

	// TrustedProxies lists the networks of the proxies in front of the
	// service. Only a call arriving from one of them has its
	// ForwardedHeader metadata read; the client is the right-most address
	// in it that is not a trusted proxy. Empty: the client is always the
	// connection's peer.
	TrustedProxies []netip.Prefix
	// ForwardedHeader names the one metadata key the trusted proxies write
	// the client's address in: "x-forwarded-for" (the default),
	// "forwarded" (RFC 7239) or "x-real-ip", in any case. No other is
	// read: a proxy passes through the metadata it does not write, and the
	// client could otherwise choose its own address.
	ForwardedHeader string
	// IPv4Prefix and IPv6Prefix group client addresses into one bucket per
	// prefix of that length; 0 means 32 for IPv4 and 64 for IPv6, where a
	// single user commonly holds a whole /64.
	IPv4Prefix, IPv6Prefix int

	// MaxInFlightPerClient caps the unary calls one client address has in
	// progress at once; 0 sets no cap. Each client is counted exactly, in
	// a table of at most MaxKeys clients: a refusal gets
	// codes.ResourceExhausted and reason concurrency_limited, or, when the
	// table is full, codes.Unavailable and reason concurrency_table_full.
	// A call's count is given back however it ends: return, panic, client
	// gone or timeout.
	MaxInFlightPerClient int
	// MaxStreamsPerClient caps the streams one client address has open at
	// once, for their whole life, as MaxInFlightPerClient does for unary
	// calls and with the same reasons; 0 sets no cap.
	MaxStreamsPerClient int
	// LimitMessages charges each message a stream receives after its first
	// to the client's buckets as a call, at the stream's cost (Cost, or
	// 1): a message refused makes the handler's RecvMsg return the
	// refusal's status error, which the handler should return. The first message is paid
	// for by the stream's own charge, so a server-streaming call costs as
	// much as a unary one.
	LimitMessages bool

	// OnLimiterError says what to do when a limiter returns an error or
	// does not answer within LimiterTimeout: refuse with codes.Unavailable
	// and reason limiter_error (FailClosed, the default), or serve the
	// call (FailOpen). Either way the error is counted and logged.
	OnLimiterError ErrorPolicy
	// PolicyName names the client's policy in refusals' details, logs and
	// Stats; "" means "default". The address bucket, when a caller key is
	// set, is "address", and the bucket of calls without a caller key
	// "keyless".
	PolicyName string

	// Logger, if set, logs every refusal and limiter error, with the
	// reason, the full method and a hash of the key, never the key itself.
	Logger *slog.Logger
}

// DefaultAddressMultiplier is the AddressMultiplier used when CallerKey is
// set and none is given: an address may make 4 times the calls of one
// caller key.
const DefaultAddressMultiplier = front.DefaultAddressMultiplier

// DefaultMaxKeys is the number of clients a local limiter, and each
// per-client concurrency table, track at most unless Config.MaxKeys says
// otherwise.
const DefaultMaxKeys = front.DefaultMaxKeys

// KeylessPolicy names the bucket that calls without a caller key share per
// client address when Config.CallerKey is set.
const KeylessPolicy = front.KeylessPolicy

// ErrorPolicy says what the interceptors do when a limiter fails. Its zero
// value is FailClosed.
type ErrorPolicy uint8

const (
	// FailClosed refuses the call with codes.Unavailable and reason
	// limiter_error.
	FailClosed ErrorPolicy = iota
	// FailOpen serves the call as if the failing limiter had allowed it;
	// a local limiter of Rate in front of it keeps counting and refusing.
	FailOpen
)

// Services whose methods Exempt functions commonly name.
const (
	// HealthService is the standard health checking service,
	// grpc.health.v1.Health.
	HealthService = "grpc.health.v1.Health"
	// ReflectionService and ReflectionServiceV1Alpha are the server
	// reflection services that tools such as grpcurl call.
	ReflectionService        = "grpc.reflection.v1.ServerReflection"
	ReflectionServiceV1Alpha = "grpc.reflection.v1alpha.ServerReflection"
)

// DefaultExempt is the Exempt function of a Config that sets none: it
// exempts the methods of HealthService.
func DefaultExempt(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/"+HealthService+"/")
}

// ExemptServices returns an Exempt function for the methods of the named
// services, such as HealthService and ReflectionService; with no argument,
// it exempts nothing.
func ExemptServices(services ...string) func(fullMethod string) bool {
	prefixes := make([]string, len(services))
	for i, s := range services {
		prefixes[i] = "/" + strings.Trim(s, "/") + "/"
	}
	return func(fullMethod string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(fullMethod, p) {
				return true
			}
		}
		return false
	}
}

// ExemptMethods returns an Exempt function for the methods named, by full
// name, such as "/shop.Catalog/Ping".
func ExemptMethods(methods ...string) func(fullMethod string) bool {
	set := make(map[string]bool, len(methods))
	for _, m := range methods {
		set[m] = true
	}
	return func(fullMethod string) bool { return set[fullMethod] }
}

// MetadataKey returns a CallerKey function that reads the first value of
// the named incoming metadata key, such as "authorization" or "x-api-key";
// a call without it has no caller key.
func MetadataKey(name string) func(ctx context.Context) string {
	name = strings.ToLower(name)
	return func(ctx context.Context) string {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// Environment variables read by LoadEnv, with the prefix "LIMITS_". With
// another prefix, such as "LIMITS_GRPC_", that prefix replaces "LIMITS_"
// in each name. They are the names httplimit reads, and one more.
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
	EnvMaxStreamsPerClient  = "LIMITS_MAX_STREAMS_PER_CLIENT"  // MaxStreamsPerClient, an integer >= 1
	EnvTrustedProxies       = "LIMITS_TRUSTED_PROXIES"         // TrustedProxies, comma-separated prefixes or addresses
	EnvForwardedHeader      = "LIMITS_FORWARDED_HEADER"        // ForwardedHeader: x-forwarded-for, forwarded or x-real-ip
	EnvOnLimiterError       = "LIMITS_ON_LIMITER_ERROR"        // OnLimiterError: fail_closed or fail_open
	EnvPolicyName           = "LIMITS_POLICY_NAME"             // PolicyName
)

// forwardedKeys are the metadata keys ForwardedHeader may name.
var forwardedKeys = []string{"x-forwarded-for", "forwarded", "x-real-ip"}

// LoadEnv sets the fields of c named by the environment variables Env*
// that are set, read with lookup (os.LookupEnv if nil). prefix replaces
// "LIMITS_" in their names; "" keeps it. Unset variables leave their
// fields alone. A value that cannot be parsed, or that would switch a
// limit off (a zero rate, a negative count), is an error naming the
// variable read: a service should refuse to start rather than run without
// the limits it was given.
func (c *Config) LoadEnv(prefix string, lookup func(string) (string, bool)) error {
	e := front.NewEnv("grpclimit", prefix, lookup)
	e.Limit(EnvRate, &c.Rate)
	e.Integer(EnvBurst, &c.Burst)
	e.Integer(EnvMaxKeys, &c.MaxKeys)
	e.Integer(EnvMaxInFlight, &c.MaxInFlight)
	e.Duration(EnvQueueWait, &c.QueueWait, true)
	e.Duration(EnvQueueAdapt, &c.QueueAdapt, true)
	e.Adaptive(EnvAdaptive, EnvAdaptiveMin, &c.Adaptive)
	e.Duration(EnvTimeout, &c.Timeout, false)
	e.Duration(EnvBusyRetryAfter, &c.BusyRetryAfter, false)
	e.Duration(EnvLimiterTimeout, &c.LimiterTimeout, false)
	e.Integer(EnvAddressMultiplier, &c.AddressMultiplier)
	e.Integer(EnvMaxInFlightPerClient, &c.MaxInFlightPerClient)
	e.Integer(EnvMaxStreamsPerClient, &c.MaxStreamsPerClient)
	e.Prefixes(EnvTrustedProxies, &c.TrustedProxies)
	e.Choice(EnvForwardedHeader, forwardedKeys, func(i int) { c.ForwardedHeader = forwardedKeys[i] })
	e.Choice(EnvOnLimiterError, []string{"fail_closed", "fail_open"}, func(i int) { c.OnLimiterError = ErrorPolicy(i) })
	e.String(EnvPolicyName, &c.PolicyName)
	return e.Err
}

// MetadataPriority returns a Config.Priority function that reads a call's
// class from the first value of the named incoming metadata key, such as
// "x-criticality", in any case: "critical" (or "critical_plus", after
// Google SRE's criticality levels) is limits.PriorityCritical, "sheddable"
// (or "sheddable_plus") limits.PrioritySheddable, and anything else, or no
// value, limits.PriorityDefault. A client can send any metadata: read the
// class only from callers trusted to set it (services of one's own,
// behind a proxy that strips the key from outside calls), or a client
// may take the places kept for critical calls.
func MetadataPriority(name string) func(ctx context.Context, fullMethod string) limits.Priority {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) limits.Priority {
		v := metadata.ValueFromIncomingContext(ctx, name)
		if len(v) == 0 {
			return limits.PriorityDefault
		}
		switch strings.ToLower(v[0]) {
		case "critical", "critical_plus":
			return limits.PriorityCritical
		case "sheddable", "sheddable_plus":
			return limits.PrioritySheddable
		}
		return limits.PriorityDefault
	}
}
