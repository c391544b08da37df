//lint:file-ignore ST1005 errors begin with the name of the Config field they are about, as it is spelled.

package admit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// Config configures an Engine: which requests bypass it, the gate, the
// rate policies and per-client concurrency. Every layer is optional; the
// zero Config limits nothing. It is data: LoadEnv reads it from the
// environment and json.Unmarshal from a file (see UnmarshalJSON), but for
// the fields marked as set in code (Gate, Controller, Limiters, Logger).
// Front ends hold one, and add what only a function of their request can
// say (its caller key, cost, class at the gate) and how they answer.
//
// An Engine checks a Config when it is made or updated: a value that
// cannot be honoured (a negative count or duration, an invalid limit, a
// route pattern or a name that does not parse, a field that needs another)
// is an error naming the field, never a limit silently off.
type Config struct {
	// Exempt lists the routes whose requests bypass every layer, such as
	// health probes and static files ("/healthz", "/static/"), in the
	// syntax of Policy.Routes: a request that matches one is exempt, even
	// if it matches a policy's route too. A probe refused under load gets
	// a busy but healthy process restarted.
	Exempt []string `json:"exempt,omitempty"`

	// MaxInFlight caps the requests served at once in the process, with a
	// limits.Gate of the engine's own; 0 sets no cap. A request that finds
	// the gate full is refused with reason server_busy. With Adaptive, it
	// is the ceiling of the adaptive limit.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Reserve keeps places of the gate for the requests of a class and
	// those above it (see limits.WithReserve): {PriorityCritical: 12}
	// lets only critical requests take the last 12 places. It needs
	// MaxInFlight.
	Reserve map[limits.Priority]int `json:"reserve,omitempty"`
	// QueueWait is how long a request may wait for a place in the gate
	// before it is refused; 0 refuses at once, or, with an adaptive gate
	// (Adaptive or Controller), waits the controller's wait
	// (adaptive.Controller.Wait). Keep it short: it is for bursts that
	// clear within milliseconds, not a queue.
	QueueWait time.Duration `json:"queue_wait,omitempty"`
	// QueueAdapt, if positive, lets the gate stop queueing while waiting
	// does not help (limits.Gate.AdaptWait): every QueueAdapt, it looks at
	// the requests that waited, and if at least four did and more than a
	// third of them waited QueueWait in vain, it refuses at once for a
	// while. It needs MaxInFlight and QueueWait.
	QueueAdapt time.Duration `json:"queue_adapt,omitempty"`
	// Adaptive, if set, lets the gate find its own limit: an
	// adaptive.Controller moves it between Adaptive.Min and MaxInFlight
	// (or Adaptive.Max, if lower) from the latency of the requests it
	// admits, measured from their admission until their Ticket is done or
	// leaves the gate. A request refused by a later layer does not count;
	// one that passes its deadline, or that a front end reports Dropped
	// (an HTTP 503 or 504, gRPC Unavailable or DeadlineExceeded), counts
	// as a sign of overload. It needs MaxInFlight; the zero
	// adaptive.Config is usable.
	Adaptive *adaptive.Config `json:"adaptive,omitempty"`
	// Gate, if set in code, is a gate made elsewhere (limits.NewGate, or
	// another Engine's Gate) that the engine shares, so that the process
	// has one capacity whatever the protocol. It excludes MaxInFlight,
	// Reserve, QueueAdapt and Adaptive, which configure a gate of the
	// engine's own. Stats then reports the gate's counters with SharedGate
	// set, and the metrics packages leave them to the gate's own
	// collector.
	Gate *limits.Gate `json:"-"`
	// Controller, if set in code, is the adaptive.Controller of a shared
	// gate (its Gate, which Gate may leave unset): the engine reports to
	// it the latency and outcome of the requests it admits.
	Controller *adaptive.Controller `json:"-"`
	// Timeout, if positive, is a deadline for each request, from when the
	// gate lets it in (from its arrival, without a gate): it bounds the
	// limiter calls and, in the front ends, the handler. A request whose
	// deadline passes before it is admitted is refused with reason
	// request_timeout, and its charges are given back.
	Timeout time.Duration `json:"timeout,omitempty"`
	// BusyRetryAfter is the retry delay of refusals that waiting helps but
	// no limiter times (server_busy, request_timeout, table_full,
	// limiter_error, concurrency_limited, concurrency_table_full); 0
	// means one second.
	BusyRetryAfter time.Duration `json:"busy_retry_after,omitempty"`

	// Rate is each client's limit, such as 100 a minute; the zero Limit
	// sets none unless Limiter is set. Clients are told apart by address
	// (see TrustedProxies, IPv4Prefix, IPv6Prefix), and, with CallerKey,
	// by the key they send.
	Rate limits.Limit `json:"rate,omitzero"`
	// Burst is how many requests a client may make at once; 0 means
	// Rate.Events.
	Burst int `json:"burst,omitempty"`
	// MaxKeys caps the clients tracked by each local limiter, and by each
	// per-client concurrency table; 0 means 1,048,576. A new client
	// finding a limiter's table full of clients in debt is refused with
	// reason table_full.
	MaxKeys int `json:"max_keys,omitempty"`
	// Limiter, if set, names the limiter of Limiters that decides for the
	// address bucket, such as a redislimit.GCRA shared by a fleet; it
	// applies its own limit, which the rate limit fields report. If Rate
	// is set too, a local limiter of Rate is asked first: a client over
	// it in this process is refused without a call to Limiter, which
	// spares a shared store the traffic of abusive clients. Give it the
	// shared limit.
	Limiter string `json:"limiter,omitempty"`
	// LimiterTimeout bounds each call to a limiter that does not decide in
	// process; past it, the call fails and the failure policy (FailOpen)
	// applies. 0 means 250ms, or Timeout if that is shorter. The limiter's
	// context ends a tenth of the bound (at most 10ms) before it, so that
	// a limiter giving up at its own deadline is heard: the error counted
	// and logged is then its own, with its cause.
	LimiterTimeout time.Duration `json:"limiter_timeout,omitempty"`
	// CallerKey, if set, names the field of a request that holds a key
	// the caller chooses, such as a session cookie or an API key: a
	// header ("X-API-Key"), or what the front end reads under the name
	// (see Fields). Each such key gets its own bucket at Rate, in
	// addition to the client address's, which is never skipped: rotating
	// the key does not escape the address limit. The address bucket then
	// allows AddressMultiplier times Rate, so that the users behind one
	// NAT are not limited as one; requests without a key share one
	// bucket at Rate per address ("keyless"), so that leaving the key out
	// earns nothing. Limiters see a SHA-256 hash of the key, never the
	// key.
	CallerKey string `json:"caller_key,omitempty"`
	// AddressMultiplier scales the address bucket when CallerKey is set; 0
	// means 4.
	AddressMultiplier int `json:"address_multiplier,omitempty"`
	// CallerLimiter, if set, names the limiter of Limiters that decides
	// for caller keys, as Limiter does for addresses.
	CallerLimiter string `json:"caller_limiter,omitempty"`
	// PolicyName names the client's policy in the rate limit fields,
	// logs and Stats; "" means "default". The address bucket, when
	// CallerKey is set, is "address".
	PolicyName string `json:"policy_name,omitempty"`
	// Tier, if set, names the field of a request that holds its tier, such
	// as an API key's plan, as Request.Tier gives it directly: a policy
	// with Tiers applies the tier's limit to it. Read the tier from what
	// the client cannot choose: the front ends take it only from a
	// function of their own Keys (see CheckKeys), never from a header or
	// metadata the client sends.
	Tier string `json:"tier,omitempty"`
	// Tiers, with CallerKey, give the limit of each tier's caller keys
	// (their Rate, Burst, MaxKeys, Limiter; see Policy.Tiers) in place of
	// Rate, which stays the limit of keys of no tier listed and of
	// requests without a key: anonymous clients at 20 a minute per
	// address, say, and keys at 60 (free) or 600 (pro). The address
	// bucket, which a key never skips, then follows the request's tier:
	// AddressMultiplier times the tier's Rate, so that a tier's keys
	// behind one address are not held to less than their tier.
	Tiers map[string]Policy `json:"tiers,omitempty"`
	// Overrides, with CallerKey, give the limit of single caller keys, by
	// the key (see Policy.Overrides), before their tier's.
	Overrides map[string]Policy `json:"overrides,omitempty"`

	// TrustedProxies lists the networks of the proxies in front of the
	// service. Only a request arriving from one of them has its
	// ForwardedHeader read; the client is the right-most address in it
	// that is not a trusted proxy. Empty: the client is always the
	// connection's peer.
	TrustedProxies []netip.Prefix `json:"trusted_proxies,omitempty"`
	// ForwardedHeader names the one field the trusted proxies write the
	// client's address in: "X-Forwarded-For" (the default), "Forwarded"
	// (RFC 7239) or "X-Real-IP", in any case. No other is read: a proxy
	// passes fields it does not write through from the client, who could
	// otherwise choose its own address.
	ForwardedHeader string `json:"forwarded_header,omitempty"`
	// IPv4Prefix and IPv6Prefix group client addresses into one bucket per
	// prefix of that length; 0 means 32 for IPv4 and 64 for IPv6, where a
	// single user commonly holds a whole /64.
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// MaxInFlightPerClient caps the requests one client address has in
	// progress at once; 0 sets no cap. Each client is counted exactly, in
	// a table of at most MaxKeys clients with requests in progress: a
	// refusal has reason concurrency_limited, or, when the table is full,
	// concurrency_table_full. A request's count is given back when its
	// Ticket is done, however it ends.
	MaxInFlightPerClient int `json:"max_in_flight_per_client,omitempty"`
	// MaxStreamsPerClient caps the streams (Request.Stream) one client
	// address has open at once, for their whole life, as
	// MaxInFlightPerClient does for other requests; 0 sets no cap.
	MaxStreamsPerClient int `json:"max_streams_per_client,omitempty"`

	// FailOpen serves a request whose limiter failed or did not answer
	// in time, as if that limiter had allowed it, rather than refuse it
	// with reason limiter_error; a local limiter of Rate in front of it
	// keeps counting and refusing. Either way the error is counted and
	// logged.
	FailOpen bool `json:"fail_open,omitempty"`
	// Headers selects the rate limit fields front ends send: "ietf" (the
	// default, "" too) for the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-10; "ietf_legacy" for those and
	// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset;
	// "legacy" for the X-RateLimit fields alone; "none" for none (refusals
	// still carry their retry delay).
	Headers string `json:"headers,omitempty"`

	// Policies are rate limits of routes, or of every request, after the
	// address and caller key buckets: a login route limited per address,
	// an API limited per key, an export that costs more than a read.
	Policies []Policy `json:"policies,omitempty"`
	// TrustedKeys says the fields that key policies (Policy.Key) are
	// written by a trusted party, such as the descriptors a proxy sends a
	// rate limit service, not by the client: a policy with Key then needs
	// no address bucket in front of it, and a request without the field
	// skips the policy, rather than share a bucket per address. Leave it
	// false in front of clients, who could otherwise send new keys to fill
	// a table.
	TrustedKeys bool `json:"trusted_keys,omitempty"`
	// Shadow names the policies that only measure, and "gate" for the
	// gate: what one of them would refuse is counted (Stats.Shadow) and
	// logged, charges nothing, and goes on as if allowed; a policy in
	// shadow mode appears in no response's rate limit fields. So a new
	// limit is tried on real traffic before it is enforced, which is an
	// Update that takes its name out of Shadow. Every name must be a
	// policy's: "default", "address" and "keyless" for Config's own.
	Shadow []string `json:"shadow,omitempty"`

	// Limiters are the limiters that Limiter, CallerLimiter and
	// Policy.Limiter name, set in code: limiters whose state lives
	// elsewhere, such as a redislimit.GCRA shared by a fleet.
	Limiters map[string]limits.Limiter `json:"-"`
	// Logger, if set in code, logs every refusal and limiter error, with
	// the reason, the route and a hash of the key, never the key itself.
	Logger *slog.Logger `json:"-"`
}

// Policy is a rate limit of some routes, or of every request: it applies
// after the address and caller key buckets of the Config, all or nothing
// (a refusal by any gives back what every earlier one charged), and before
// per-client concurrency. The zero Policy is not valid: it needs a Name and
// a Rate or a Limiter.
type Policy struct {
	// Name names the policy in the rate limit fields, refusals, logs and
	// Stats; printable ASCII, required, and unique among the policies of
	// a Config.
	Name string `json:"name"`
	// Routes lists the route patterns whose requests the policy limits;
	// none limits every request. A pattern is a path, optionally after a
	// method and a space: "/login" matches that path alone; "/api/", the
	// paths below it; "/users/{id}/login", any one segment in place of
	// {id}; "/files/{path...}", anything after /files/; "/api/{$}",
	// /api/ alone; "POST /login", that method only ("GET /x" matches HEAD
	// too). Patterns read as net/http's ServeMux reads them, and a
	// request's path is matched as ServeMux matches it (each segment
	// unescaped, so /a%2Fb is one segment). A request takes the policies of every pattern
	// that matches its route, each once, from the least specific to the
	// most (a service's, then its method's; "/api/", then "/api/export"):
	// the most literal segments, then the most segments, are the most
	// specific, and an exact path most of all. The route of an HTTP
	// request is its path; of a gRPC call, its full method
	// ("/package.Service/Method"), so that "/package.Service/" names a
	// service. Stats counts a request under its most specific route.
	Routes []string `json:"routes,omitempty"`
	// Rate is the policy's limit, applied by a local limiter of at most
	// MaxKeys keys (1,048,576 if 0) in bursts of Burst (Rate.Events if 0).
	Rate    limits.Limit `json:"rate,omitzero"`
	Burst   int          `json:"burst,omitempty"`
	MaxKeys int          `json:"max_keys,omitempty"`
	// Limiter, if set, names the limiter of Config.Limiters that decides
	// in place of the local limiter, with a local limiter of Rate, if
	// set, asked first (see Config.Limiter).
	Limiter string `json:"limiter,omitempty"`
	// Key, if set, names the field whose value keys the policy's buckets,
	// as Config.CallerKey does (a header, such as "X-API-Key", or a name
	// the front end reads); "" keys them by client address. Limiters see
	// a hash of the value, never the value, and a request without one
	// shares one bucket per address. A policy with Key needs an address
	// bucket in front of it (Config.Rate or Config.Limiter), so that a
	// key gets a bucket only for requests its address allowed.
	Key string `json:"key,omitempty"`
	// Quota, if set, makes the policy a calendar quota in place of a rate:
	// so many events per key per day, week or month, written as a Limit
	// with a calendar unit ("100/day", "5000/week", "100000/month"),
	// resetting at the start of each in Location (see package quota). A
	// refusal waits until the next period starts. With Limiter, the quota
	// in this process is asked first, as Rate is (a redislimit quota for a
	// fleet). A policy has a Rate or a Quota, not both.
	Quota string `json:"quota,omitempty"`
	// Location is the IANA time zone a Quota's periods start in, such as
	// "Europe/Paris"; "" means UTC.
	Location string `json:"location,omitempty"`
	// Cost, if positive, is what each request costs in the policy, in
	// place of its own cost (Request.Cost).
	Cost int `json:"cost,omitempty"`
	// Tiers, if set, give the limit (Rate, Burst, MaxKeys, Limiter, Quota,
	// Location, and nothing else) of the requests of each tier (Config.Tier), in a table
	// of its own; a request of another tier, or of none, takes the
	// policy's own. The rate limit fields and Stats name a tier's limit
	// as the policy and the tier: "api/pro".
	Tiers map[string]Policy `json:"tiers,omitempty"`
	// Overrides, if set, give the limit (as Tiers do) of single keys, by
	// the key's value: the field's for a policy with Key (an API key, say),
	// the client's address prefix ("192.0.2.7/32") for one by address. An
	// override comes before the request's tier. Each takes a table of its
	// own; their counts are the policy's.
	Overrides map[string]Policy `json:"overrides,omitempty"`
}

// maxKeysDefault is the number of keys a local limiter, and a per-client
// concurrency table, track at most unless configured otherwise.
const maxKeysDefault = 1 << 20

// The names the policies made from Config's own fields go by.
const (
	defaultPolicy = "default"
	addressPolicy = "address"
	keylessPolicy = "keyless"
)

// defaultLimiterTimeout bounds each call to a limiter that does not decide
// in process, unless configured otherwise.
const defaultLimiterTimeout = 250 * time.Millisecond

// CheckKeys checks the names of the request fields c reads (CallerKey,
// Tier and the policies' Key) against keys, the names under which a front
// end reads a field with a function of its own, such as httplimit's
// Config.Keys: it returns an error naming the field if Tier is not one of
// keys (a tier read from a header the client sets would let the client
// choose its limit), if tiers are configured without Tier (they would
// never apply), or if a name differs from one of keys in case only (a
// misspelt key would read a header in its place). The front ends call it
// in New and Update.
func (c *Config) CheckKeys(keys []string) error {
	named := map[string]string{} // the names c reads, by what names them
	add := func(what, name string) {
		if name != "" {
			named[what] = name
		}
	}
	add("CallerKey", c.CallerKey)
	add("Tier", c.Tier)
	tiers := len(c.Tiers) > 0
	for i := range c.Policies {
		add(fmt.Sprintf("Policies[%d].Key", i), c.Policies[i].Key)
		tiers = tiers || len(c.Policies[i].Tiers) > 0
	}
	switch {
	case tiers && c.Tier == "":
		return errors.New("Tiers need Tier, the field that holds a request's tier")
	case c.Tier != "" && !slices.Contains(keys, c.Tier):
		return fmt.Errorf("Tier %q: a tier is read by a function of Keys, never from what the client sends; Keys has %q", c.Tier, keys)
	}
	for what, name := range named {
		for _, k := range keys {
			if name != k && strings.EqualFold(name, k) {
				return fmt.Errorf("%s %q: Keys names %q", what, name, k)
			}
		}
	}
	return nil
}
