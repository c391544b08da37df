package ratelimit

// This file answers ShouldRateLimit: it matches each descriptor against
// the domain's tree, charges every matched limit in one Admit of the
// engine, and reports each descriptor's status.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/redislimit"
)

// Options configures a Service. The zero Options is usable: every
// decision is made in this process, with no response headers.
type Options struct {
	// Redis, if set, makes the limits a fleet's: each limit is a
	// redislimit.GCRA in lease mode (hot descriptors decided locally,
	// never over the limit across replicas), its keys under RedisPrefix.
	// nil decides every limit in this process.
	Redis redis.UniversalClient
	// RedisPrefix prefixes the Redis keys; "" means "rls:".
	RedisPrefix string
	// LeaseSlots is the most slots a lease holds (see
	// redislimit.WithLeases); 0 means 64, and 1 turns leases off: every
	// decision is a Redis call.
	LeaseSlots int
	// LeaseKeys is the size of each limit's lease table; 0 means
	// redislimit.DefaultLeaseKeys.
	LeaseKeys int
	// Timeout bounds each decision that waits on Redis; past it the
	// failure policy applies. 0 means 100ms.
	Timeout time.Duration
	// OnError is the failure policy of the descriptors whose
	// configuration sets none (see FailurePolicy); "" means FailError,
	// as envoyproxy/ratelimit answers when Redis fails.
	OnError FailurePolicy
	// ShadowMode puts every limit in shadow mode: what it would refuse is
	// counted, and every answer is OK (envoyproxy/ratelimit's
	// SHADOW_MODE).
	ShadowMode bool
	// Headers selects the rate limit fields sent in
	// response_headers_to_add: "none" (the default, ""), "ietf" for the
	// RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-10, "ietf_legacy" for those and
	// X-RateLimit-Limit, -Remaining and -Reset, "legacy" for the latter.
	Headers string
	// NearLimitRatio is the share of a limit's burst past which a hit
	// counts as near the limit; 0 means 0.8.
	NearLimitRatio float64
	// MaxKeys caps the keys each limit tracks in this process; 0 means
	// 1,048,576.
	MaxKeys int
	// Logger, if set, logs reloads and errors, and, at debug level, each
	// refusal.
	Logger *slog.Logger
	// Load are the options of LoadDir.
	Load LoadOptions
}

// Service is an envoy.service.ratelimit.v3 RateLimitService: register it
// on a grpc.Server with pb.RegisterRateLimitServiceServer. Its limits come
// from envoyproxy/ratelimit's configuration (Load, LoadDir, Watch) and
// its decisions from an admit.Engine: a GCRA per limit, exact, with the
// engine's shadow mode, live updates and counters. It is safe for
// concurrent use.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	opts    Options
	eng     *admit.Engine
	cur     atomic.Pointer[rules]
	headers int // headers mode: 0 none, 1 ietf, 2 ietf_legacy, 3 legacy

	mu sync.Mutex // serializes loads
	// gcras are the Redis limiters, by policy name and failure policy,
	// kept across loads.
	gcras map[string]*redislimit.GCRA
	// near counts the hits near the limit, by policy name, kept across
	// loads.
	near map[string]*atomic.Uint64
	n    serviceCounts
	pool sync.Pool
	// domains are the configuration in force, and overrides the limits
	// requests gave, in the order they came.
	domains   []*Domain
	overrides []overrideKey
	// fp is the fingerprint of the directory LoadDir read last.
	fp atomic.Uint64
}

// serviceCounts are the Service's own counters.
type serviceCounts struct {
	requests, unknownDomain, unmatched, unlimited, replaced atomic.Uint64
	invalid, unavailable, canceled                          atomic.Uint64
	loads, loadErrors                                       atomic.Uint64
	redisErrors                                             atomic.Uint64
}

// New returns a Service with no configuration: until Load, every
// request's descriptors match nothing and are answered OK.
func New(opts Options) (*Service, error) {
	s := &Service{opts: opts, gcras: map[string]*redislimit.GCRA{}, near: map[string]*atomic.Uint64{}}
	switch opts.Headers {
	case "", "none":
	case "ietf":
		s.headers = 1
	case "ietf_legacy":
		s.headers = 2
	case "legacy":
		s.headers = 3
	default:
		return nil, fmt.Errorf("ratelimit: Options.Headers must be none, ietf, ietf_legacy or legacy, got %q", opts.Headers)
	}
	switch opts.OnError {
	case "", FailOpen, FailClosed, FailError:
	default:
		return nil, fmt.Errorf("ratelimit: Options.OnError must be open, closed or error, got %q", opts.OnError)
	}
	if opts.NearLimitRatio < 0 || opts.NearLimitRatio > 1 {
		return nil, fmt.Errorf("ratelimit: Options.NearLimitRatio must be within 0-1, got %v", opts.NearLimitRatio)
	}
	if opts.LeaseSlots < 0 || opts.LeaseSlots > redislimit.MaxLeaseSlots || opts.LeaseKeys < 0 || opts.Timeout < 0 || opts.MaxKeys < 0 {
		return nil, errors.New("ratelimit: Options.LeaseSlots, LeaseKeys, Timeout and MaxKeys must not be negative, and LeaseSlots at most redislimit.MaxLeaseSlots")
	}
	r, err := s.compile(nil, nil)
	if err != nil {
		return nil, err
	}
	if s.eng, err = admit.New(r.cfg); err != nil {
		return nil, err
	}
	s.cur.Store(r)
	s.pool.New = func() any { return new(call) }
	return s, nil
}

// Load replaces the Service's configuration with domains, keeping every
// key's state (its GCRA's TAT, in this process or in Redis) and every
// counter; requests see the old configuration or the new, never a mix.
// A configuration that cannot be honoured is an error naming the field,
// and the old one stays.
func (s *Service) Load(domains []*Domain) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.compile(domains, s.overrides)
	if err == nil {
		err = s.eng.Update(r.cfg)
	}
	if err != nil {
		s.n.loadErrors.Add(1)
		return err
	}
	s.cur.Store(r)
	s.domains = domains
	s.n.loads.Add(1)
	return nil
}

// addOverride adds the limit k that a request's descriptor gave, as a
// policy of its own, unless there already are maxOverrides of them.
func (s *Service) addOverride(k overrideKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Load().overrides[k] != nil {
		return nil
	}
	if len(s.overrides) >= maxOverrides {
		return status.Errorf(codes.ResourceExhausted, "more than %d limits given by requests' descriptors", maxOverrides)
	}
	if k.unit.Period() == 0 {
		return status.Errorf(codes.InvalidArgument, "a descriptor's limit has no valid unit")
	}
	r, err := s.compile(s.domains, append(slices.Clip(s.overrides), k))
	if err == nil {
		err = s.eng.Update(r.cfg)
	}
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "a descriptor's limit: %v", err)
	}
	s.overrides = append(s.overrides, k)
	s.cur.Store(r)
	return nil
}

// LoadDir reads dir with LoadDir and loads what it read; an error leaves
// the configuration as it was.
func (s *Service) LoadDir(dir string) error {
	// What the directory held before it was read: a change while it is
	// read is seen by Watch.
	s.fp.Store(fingerprint(dir, s.opts.Load.IgnoreDotFiles))
	ds, err := LoadDir(dir, s.opts.Load)
	if err != nil {
		s.n.loadErrors.Add(1)
		return err
	}
	return s.Load(ds)
}

// compile builds the rules of domains, with the Redis limiters they need
// (kept from the loads before, and made anew where a limit's failure
// policy changed). s.mu is held.
func (s *Service) compile(domains []*Domain, overrides []overrideKey) (*rules, error) {
	onError := s.opts.OnError
	if onError == "" {
		onError = FailError
	}
	o := compileOptions{onError: onError, globalShadow: s.opts.ShadowMode, timeout: s.opts.Timeout, maxKeys: s.opts.MaxKeys}
	if o.timeout == 0 {
		o.timeout = redislimit.DefaultTimeout
	}
	if s.opts.Redis != nil {
		o.limiter = s.gcra
	}
	r, err := compile(domains, overrides, o)
	if err != nil {
		return nil, err
	}
	if s.headers >= 2 {
		r.cfg.Headers = "ietf_legacy"
	}
	if l := s.opts.Logger; l != nil && l.Enabled(context.Background(), slog.LevelDebug) {
		r.cfg.Logger = l
	}
	for _, n := range r.nodes {
		if s.near[n.policy] == nil {
			s.near[n.policy] = new(atomic.Uint64)
		}
		n.near = s.near[n.policy]
	}
	return r, nil
}

// gcra returns the Redis limiter of n's limit, made on first use: one per
// limit and failure policy, with its keys under a prefix of its own.
func (s *Service) gcra(n *node) (limits.Limiter, error) {
	id := n.policy + "\x00" + string(n.onError)
	if g := s.gcras[id]; g != nil {
		return g, nil
	}
	prefix := s.opts.RedisPrefix
	if prefix == "" {
		prefix = "rls:"
	}
	events, burst := int(n.rpu), n.burst
	if events == 0 {
		events = 1
	}
	timeout := s.opts.Timeout
	if timeout == 0 {
		timeout = redislimit.DefaultTimeout
	}
	opts := []redislimit.Option{
		redislimit.WithBurst(burst), redislimit.WithPrefix(redisPrefix(prefix, n.path)),
		redislimit.WithTimeout(timeout),
		redislimit.WithErrorHandler(func(err error) {
			s.n.redisErrors.Add(1)
			if l := s.opts.Logger; l != nil {
				l.Warn("ratelimit: Redis gave no decision", slog.String("policy", n.policy), slog.String("error", err.Error()))
			}
		}),
	}
	if slots := s.opts.LeaseSlots; slots != 1 {
		if slots == 0 {
			slots = 64
		}
		opts = append(opts, redislimit.WithLeases(slots, s.opts.LeaseKeys))
	}
	if n.onError == FailOpen {
		opts = append(opts, redislimit.OnError(redislimit.FailOpen))
	}
	g, err := redislimit.New(s.opts.Redis, events, n.period, opts...)
	if err != nil {
		return nil, err
	}
	s.gcras[id] = g
	return fleetLimiter{g}, nil
}

// fleetLimiter is a redislimit.GCRA as the engine calls a limiter of this
// process: directly, on the request's goroutine, rather than on one of its
// own under a context with a deadline, which would cost more than a
// decision from a lease. The GCRA bounds each call to Redis itself
// (Options.Timeout). A decision Redis did not make is a refusal with
// reason limits.ReasonUnavailable (the engine's LimiterError), which
// ShouldRateLimit answers by the failure policy.
type fleetLimiter struct{ g *redislimit.GCRA }

// AllowN decides a request of cost n for key.
func (f fleetLimiter) AllowN(key string, n int) limits.Decision {
	d, err := f.g.AllowN(context.Background(), key, n)
	if err != nil {
		d.Allowed, d.Reason = false, limits.ReasonUnavailable
	}
	return d
}

// Take is the GCRA's.
func (f fleetLimiter) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	return f.g.Take(ctx, key, n)
}

// Refund is the GCRA's.
func (f fleetLimiter) Refund(ctx context.Context, key string, d limits.Decision) error {
	return f.g.Refund(ctx, key, d)
}

// SetLimit, Limit, Period and Burst are the GCRA's, for the engine's
// updates.
func (f fleetLimiter) SetLimit(limit int, period time.Duration, burst int) error {
	return f.g.SetLimit(limit, period, burst)
}
func (f fleetLimiter) Limit() int            { return f.g.Limit() }
func (f fleetLimiter) Period() time.Duration { return f.g.Period() }
func (f fleetLimiter) Burst() int            { return f.g.Burst() }

// Stats returns the engine's counters, under the protocol "ratelimit":
// by policy (one per limit of the configuration, named by its path of
// keys and values, as envoyproxy/ratelimit names its stats), by domain
// (route), and by outcome.
func (s *Service) Stats() admit.Stats {
	st := s.eng.Stats()
	st.Protocol = "ratelimit"
	return st
}

// Engine returns the Service's engine, to share its gate or read its
// counters.
func (s *Service) Engine() *admit.Engine { return s.eng }

// Config returns the configuration in force, one limit a line, as
// envoyproxy/ratelimit's /rlconfig shows it.
func (s *Service) Config() string { return s.cur.Load().text }

// call is the state of one ShouldRateLimit, reused through a pool.
type call struct {
	m     []match
	buf   []byte // the matches' counter keys
	round int    // the round being admitted
	t     admit.Ticket
	mem   [512]byte // the rate limit fields' values
	// hdr are the response headers of the latest round.
	hdr  []*core.HeaderValue
	wild [64]*node
}

// match is what one descriptor of a request matched.
type match struct {
	n         *node // nil for no limit
	value     string
	cost      int
	round     int // -1: not charged
	unlimited bool
	code      pb.RateLimitResponse_Code
	remaining uint32
	reset     time.Duration
	known     bool // remaining and reset are known
	shared    uint64
}

// Field returns the counter key of the descriptor that matched the policy
// named name in the round being admitted, "" if none did: the engine
// reads each policy's key (Policy.Key is the policy's name) through it.
func (c *call) Field(name string) string {
	for i := range c.m {
		m := &c.m[i]
		if m.round == c.round && m.n != nil && m.n.policy == name {
			return m.value
		}
	}
	return ""
}

// FieldValues returns the field's one value.
func (c *call) FieldValues(name string) []string {
	if v := c.Field(name); v != "" {
		return []string{v}
	}
	return nil
}

// errNoDomain and errNoDescriptors are the answers to invalid requests,
// as envoyproxy/ratelimit words them.
var (
	errNoDomain      = status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	errNoDescriptors = status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
)

// ShouldRateLimit decides a request's descriptors. Each descriptor is
// matched as envoyproxy/ratelimit matches it (the value, then prefix
// wildcards, then the key alone, one level per entry); replaced limits
// are dropped; the limits matched are charged hits_addend (the
// descriptor's, or the request's, 0 meaning 1) in one Admit of the
// engine, all or nothing: if one refuses, the others are given back, so a
// refused request costs no limit anything. A descriptor repeating a limit
// already charged, or with another hits_addend, is charged in a further
// Admit after the first allowed it. A descriptor whose hits_addend is 0
// is reported and not charged.
//
// Each status carries the limit (current_limit), the requests left and
// the time until the key is back to its full burst (duration_until_reset),
// or, over the limit, until a request may succeed. The descriptors of a
// refused Admit other than the refusing one report OK with their limit
// alone: they were not charged.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	s.n.requests.Add(1)
	switch {
	case req.GetDomain() == "":
		s.n.invalid.Add(1)
		return nil, errNoDomain
	case len(req.GetDescriptors()) == 0:
		s.n.invalid.Add(1)
		return nil, errNoDescriptors
	}
	r := s.cur.Load()
	dom := r.domains[req.Domain]
	if dom == nil {
		s.n.unknownDomain.Add(1)
		return okResponse(len(req.Descriptors)), nil
	}
	c := s.pool.Get().(*call)
	defer func() {
		if c != nil {
			s.put(c)
		}
	}()
	if k, missing := s.match(c, r, dom, req); missing {
		// A limit a descriptor gives, first seen: made, then the request
		// decided under the rules that have it.
		s.put(c)
		c = nil
		if err := s.addOverride(k); err != nil {
			s.n.invalid.Add(1)
			return nil, err
		}
		return s.ShouldRateLimit(ctx, req)
	}
	resp, err := s.admit(ctx, c, dom)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// put returns c to the pool.
func (s *Service) put(c *call) {
	if cap(c.m) > 256 || cap(c.buf) > 64<<10 {
		return
	}
	clear(c.m)
	c.m, c.buf, c.hdr = c.m[:0], c.buf[:0], nil
	s.pool.Put(c)
}

// okResponse is the answer to descriptors that match no limit.
func okResponse(n int) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	st := make([]pb.RateLimitResponse_DescriptorStatus, n)
	for i := range st {
		st[i].Code = pb.RateLimitResponse_OK
		resp.Statuses[i] = &st[i]
	}
	return resp
}

// match matches req's descriptors against dom, of rules r, fills c.m,
// and assigns each limit matched to a round of admission. It reports a
// limit a descriptor gives (RateLimitDescriptor.limit) that r lacks, and
// then fills nothing.
func (s *Service) match(c *call, r *rules, dom *domain, req *pb.RateLimitRequest) (overrideKey, bool) {
	reqHits := max(1, int64(req.HitsAddend))
	var replacing []string
	for _, d := range req.Descriptors {
		var n *node
		var shared uint64
		if l := d.GetLimit(); l != nil {
			// The descriptor's own limit, in place of the configuration's,
			// as envoyproxy/ratelimit applies it.
			k := overrideKey{domain: dom.name, rpu: l.RequestsPerUnit, unit: unitFrom(pb.RateLimitResponse_RateLimit_Unit(l.Unit))}
			if n = r.overrides[k]; n == nil {
				return k, true
			}
		} else {
			n, shared = lookup(&dom.level, d.Entries, &c.wild)
		}
		m := match{n: n, round: -1, code: pb.RateLimitResponse_OK, shared: shared}
		if n != nil {
			m.cost = int(min(reqHits, math.MaxInt32))
			if h := d.GetHitsAddend(); h != nil {
				m.cost = int(min(h.Value, math.MaxInt32))
			}
			if n.limit.Unlimited {
				m.unlimited, m.n = true, nil
			}
			replacing = append(replacing, n.limit.Replaces...)
		}
		c.m = append(c.m, m)
	}
	// Replaced limits are dropped; an unlimited match still replaces.
	if len(replacing) > 0 {
		for i := range c.m {
			m := &c.m[i]
			if m.n != nil && m.n.limit.Name != "" && contains(replacing, m.n.limit.Name) {
				m.n = nil
				s.n.replaced.Add(1)
			}
		}
	}
	// The counter keys, and the rounds: the first round charges each limit
	// once, at the first cost seen; a limit repeated, or a cost other than
	// the round's, goes to a later round.
	var costs [8]int
	rounds := 0
	for i, d := range req.Descriptors {
		m := &c.m[i]
		switch {
		case m.unlimited:
			s.n.unlimited.Add(1)
			continue
		case m.n == nil:
			s.n.unmatched.Add(1)
			continue
		case m.cost == 0:
			continue // checked, not charged
		}
		start := len(c.buf)
		if m.shared != 0 {
			lookup(&dom.level, d.Entries, &c.wild) // the wildcards of this descriptor
		}
		c.buf = appendKey(c.buf, d.Entries, m.shared, &c.wild)
		m.value = string(c.buf[start:])
		for r := 0; ; r++ {
			if r == rounds {
				if r == len(costs) {
					// More rounds than kept: the descriptor is reported and
					// not charged, as one of hits_addend 0 is.
					m.round = -1
					break
				}
				costs[r] = m.cost
				rounds++
			}
			if costs[r] != m.cost {
				continue
			}
			taken := false
			for j := range i {
				if c.m[j].round == r && c.m[j].n == m.n {
					taken = true
					break
				}
			}
			if !taken {
				m.round = r
				break
			}
		}
	}
	return overrideKey{}, false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// lookup returns the entry a descriptor's entries match, as
// envoyproxy/ratelimit's GetLimit finds it: at each level the entry of
// the key and value, else the first wildcard whose prefix the key and
// value start with, else the key's; the entry of the last descriptor
// entry, if it has a limit, is the match. nil for none. shared has bit i
// set if entry i matched a wildcard with share_threshold, whose value
// then stands for the entry's in the counter key, and wild[i] is that
// wildcard (for the first 64 entries).
func lookup(l *level, entries []*rlcommon.RateLimitDescriptor_Entry, wild *[64]*node) (n *node, shared uint64) {
	var buf [128]byte
	for i, e := range entries {
		k := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		n = l.children[string(k)]
		if n == nil {
			for _, w := range l.wildcards {
				if strings.HasPrefix(string(k), w.prefix) {
					n = w
					if w.share && i < len(wild) {
						shared |= 1 << i
						wild[i] = w
					}
					break
				}
			}
		}
		if n == nil {
			n = l.children[e.Key]
		}
		if n == nil {
			return nil, 0
		}
		if i == len(entries)-1 {
			if n.limit == nil {
				return nil, 0
			}
			return n, shared
		}
		if len(n.children) == 0 {
			return nil, 0
		}
		l = &n.level
	}
	return nil, 0
}

// appendKey appends the counter key of entries: each entry's key and
// value, or, for an entry that matched a share_threshold wildcard (bit i
// of shared), the wildcard's value in place of its own, length-prefixed
// so that no two descriptors share a key.
func appendKey(b []byte, entries []*rlcommon.RateLimitDescriptor_Entry, shared uint64, wild *[64]*node) []byte {
	for i, e := range entries {
		v := e.Value
		if shared&(1<<i) != 0 && i < len(wild) {
			v = wild[i].value
		}
		b = appendLen(b, e.Key)
		b = appendLen(b, v)
	}
	return b
}

func appendLen(b []byte, s string) []byte {
	n := len(s)
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	b = append(append(b, byte(n)), s...)
	return b
}

// admit charges the rounds of c, and makes the response.
func (s *Service) admit(ctx context.Context, c *call, dom *domain) (*pb.RateLimitResponse, error) {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	refused := false
	for c.round = 0; !refused; c.round++ {
		cost, any := 0, false
		for i := range c.m {
			if c.m[i].round == c.round {
				cost, any = c.m[i].cost, true
				break
			}
		}
		if !any {
			break
		}
		req := admit.Request{Route: dom.route, Cost: cost, Fields: c}
		err := s.eng.Admit(ctx, &req, &c.t)
		switch err := err.(type) {
		case nil:
			s.admitted(c)
			c.t.Done(adaptive.Success)
		case *admit.Refusal:
			if err := s.refused(c, err); err != nil {
				return nil, err
			}
			refused = true
		default:
			if ctx.Err() != nil {
				s.n.canceled.Add(1)
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			s.n.unavailable.Add(1)
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	// The statuses, in the order of the descriptors.
	resp.Statuses = make([]*pb.RateLimitResponse_DescriptorStatus, len(c.m))
	st := make([]pb.RateLimitResponse_DescriptorStatus, len(c.m))
	for i := range c.m {
		m, ds := &c.m[i], &st[i]
		resp.Statuses[i] = ds
		ds.Code = m.code
		switch {
		case m.unlimited:
			ds.LimitRemaining = math.MaxUint32
		case m.n != nil:
			ds.CurrentLimit = m.n.currentLimit()
			if m.known {
				ds.LimitRemaining = m.remaining
				ds.DurationUntilReset = durationpb.New(m.reset)
			}
		}
		if m.code == pb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	resp.ResponseHeadersToAdd = c.hdr
	return resp, nil
}

// currentLimit returns the limit a status reports for n: one message per
// node, which responses share and never change.
func (n *node) currentLimit() *pb.RateLimitResponse_RateLimit {
	return n.cur
}

// unitFrom returns the unit u names, "" for none.
func unitFrom(u pb.RateLimitResponse_RateLimit_Unit) Unit {
	switch u {
	case pb.RateLimitResponse_RateLimit_SECOND:
		return Second
	case pb.RateLimitResponse_RateLimit_MINUTE:
		return Minute
	case pb.RateLimitResponse_RateLimit_HOUR:
		return Hour
	case pb.RateLimitResponse_RateLimit_DAY:
		return Day
	case pb.RateLimitResponse_RateLimit_WEEK:
		return Week
	case pb.RateLimitResponse_RateLimit_MONTH:
		return Month
	case pb.RateLimitResponse_RateLimit_YEAR:
		return Year
	}
	return ""
}

// unitOf returns u as the protocol's unit.
func unitOf(u Unit) pb.RateLimitResponse_RateLimit_Unit {
	switch u {
	case Second:
		return pb.RateLimitResponse_RateLimit_SECOND
	case Minute:
		return pb.RateLimitResponse_RateLimit_MINUTE
	case Hour:
		return pb.RateLimitResponse_RateLimit_HOUR
	case Day:
		return pb.RateLimitResponse_RateLimit_DAY
	case Week:
		return pb.RateLimitResponse_RateLimit_WEEK
	case Month:
		return pb.RateLimitResponse_RateLimit_MONTH
	case Year:
		return pb.RateLimitResponse_RateLimit_YEAR
	}
	return pb.RateLimitResponse_RateLimit_UNKNOWN
}

// admitted records the statuses of the round admitted, from the rate
// limit fields of c's ticket: each policy's requests left and time until
// its key is full again.
func (s *Service) admitted(c *call) {
	c.hdr = c.hdr[:0] // the fields of the latest round are the response's
	c.t.Fields(c.mem[:], func(name, value string) {
		if name == "Ratelimit" {
			parseItems(value, func(policy string, r, t int64) {
				for i := range c.m {
					m := &c.m[i]
					if m.round == c.round && m.n != nil && m.n.policy == policy {
						m.remaining = uint32(min(max(r, 0), math.MaxUint32))
						m.reset = time.Duration(t) * time.Second
						m.known = true
						s.nearLimit(m)
					}
				}
			})
		}
		if s.headers != 0 {
			s.header(c, name, value)
		}
	})
}

// nearLimit counts m's hits if they left its key near the limit: at most
// the share 1-NearLimitRatio of its burst left.
func (s *Service) nearLimit(m *match) {
	ratio := s.opts.NearLimitRatio
	if ratio == 0 {
		ratio = 0.8
	}
	b := m.n.burst
	if used := b - int(m.remaining); used > int(math.Floor(float64(b)*ratio)) {
		m.n.near.Add(uint64(m.cost))
	}
}

// header adds the rate limit field name to c's response headers, if the
// mode asks for it.
func (s *Service) header(c *call, name, value string) {
	switch name {
	case "Ratelimit-Policy", "Ratelimit":
		if s.headers == 3 {
			return
		}
		name = strings.Replace(name, "limit", "Limit", 1)
	default:
		if s.headers == 1 {
			return
		}
		name = strings.Replace(name, "Ratelimit", "RateLimit", 1)
	}
	c.hdr = append(c.hdr, &core.HeaderValue{Key: name, Value: strings.Clone(value)})
}

// refused records the statuses of the round ref refused; it returns the
// error to answer the call with, for a limiter that failed under the
// failure policy FailError.
func (s *Service) refused(c *call, ref *admit.Refusal) error {
	var by *match
	for i := range c.m {
		m := &c.m[i]
		if m.round == c.round && m.n != nil && m.n.policy == ref.Policy {
			by = m
			break
		}
	}
	if by == nil {
		// A refusal by no limit of the request: a layer of the engine's
		// own, which this service does not configure.
		s.n.unavailable.Add(1)
		return status.Error(codes.Unavailable, ref.Error())
	}
	if ref.Reason == admit.LimiterError || ref.Decision.Reason == admit.LimiterError {
		switch by.n.onError {
		case FailError, "":
			s.n.unavailable.Add(1)
			return status.Error(codes.Unavailable, "ratelimit: no decision for "+by.n.policy+": "+ref.Error())
		case FailOpen:
			by.code = pb.RateLimitResponse_OK
			return nil
		}
	}
	by.code = pb.RateLimitResponse_OVER_LIMIT
	by.remaining, by.known = 0, true
	by.reset = ref.RetryAfter
	if by.n.rpu == 0 {
		by.reset = by.n.period // requests_per_unit 0: never allowed
	}
	if s.headers != 0 {
		c.hdr = c.hdr[:0]
		ref.Fields(c.mem[:], func(name, value string) { s.header(c, name, value) })
	}
	return nil
}

// parseItems calls f with the name, r and t of each item of a RateLimit
// field's value, as the engine writes it: a quoted name, then ;r= and ;t=
// with whole numbers, items separated by ", ".
func parseItems(v string, f func(name string, r, t int64)) {
	for len(v) > 0 {
		if v[0] != '"' {
			return
		}
		// The name, with backslash escapes.
		i, esc := 1, false
		for ; i < len(v); i++ {
			if v[i] == '\\' {
				esc = true
				i++
				continue
			}
			if v[i] == '"' {
				break
			}
		}
		if i >= len(v) {
			return
		}
		name := v[1:i]
		if esc {
			name = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(name)
		}
		v = v[i+1:]
		var r, t int64
		for len(v) > 0 && v[0] == ';' {
			j := 1
			for j < len(v) && v[j] != '=' {
				j++
			}
			if j >= len(v) {
				return
			}
			param := v[1:j]
			k := j + 1
			var n int64
			for k < len(v) && v[k] >= '0' && v[k] <= '9' {
				n = n*10 + int64(v[k]-'0')
				k++
			}
			switch param {
			case "r":
				r = n
			case "t":
				t = n
			}
			v = v[k:]
		}
		f(name, r, t)
		v = strings.TrimPrefix(v, ", ")
	}
}

// ReturnLeases gives back to Redis the slots this process holds for every
// limit (redislimit.GCRA.ReturnLeases), as on an orderly shutdown, so that
// the fleet can spend them. It returns the first error, after trying
// every limit.
func (s *Service) ReturnLeases(ctx context.Context) error {
	s.mu.Lock()
	gs := make([]*redislimit.GCRA, 0, len(s.gcras))
	for _, g := range s.gcras {
		gs = append(gs, g)
	}
	s.mu.Unlock()
	var first error
	for _, g := range gs {
		if _, err := g.ReturnLeases(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
