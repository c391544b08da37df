// Package pace keeps a client under the limits of the servers it calls:
// the engine of the outbound side, under httplimit.Transport and
// grpclimit.ClientInterceptor, and of any other protocol's client. It
// paces the
// requests of each key, learns each key's pace and pauses from the
// servers' answers, keeps a retry budget per key, and can refuse locally
// while a server refuses more than it accepts (client-side throttling).
//
// A key's requests leave in the order they came, one emission interval
// apart (w/q for a pace of q per w), never earlier: a key's schedule is a
// base time and the number of slots taken since, slot k leaving at
// base + ceil(k*w/q), so no window of length w holds more than q
// departures. A pause until P moves the base to P, and the requests that
// queued meanwhile leave at P, P + w/q, and so on.
//
// Keys live in a table of at most MaxKeys entries. An entry is in use while
// requests wait or are in flight for it, while its schedule, a pause or a
// quota window lies ahead, and for two throttling windows after a retry,
// or after a refusal if throttling is on; only an entry no longer in use makes room for a new key, and
// a new key finding every entry in use is refused. A heap of the idle
// entries, ordered by when each stops being in use, finds one in
// O(log MaxKeys).
package pace

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
)

// ErrThrottled is what the error of a request refused locally wraps:
// client-side throttling judged that its server refuses more requests
// than it accepts (see Config.Throttle).
var ErrThrottled = errors.New("request refused locally: the server refuses more than it accepts")

// Defaults of Config's zero fields.
const (
	DefaultMaxKeys        = 65536
	DefaultMaxRetries     = 2
	DefaultRetryTokens    = 10
	DefaultRetryRatio     = 0.1
	DefaultMaxRetryWait   = time.Minute
	DefaultThrottleWindow = 2 * time.Minute
)

// maxBackoff bounds the pause of a refusal that said nothing of when to
// come back; the first is a second, and each in a row doubles it.
const maxBackoff = time.Minute

// token is one retry token, in the budget's units.
const token = 1_000_000

// Config configures a Pacer, and the outbound front ends that pace with
// one (httplimit.Transport, grpclimit.ClientInterceptor). Its zero value
// is usable: its zero fields take the defaults given.
type Config struct {
	// Rate is each key's pace until its server announces one (an HTTP
	// server's RateLimit-Policy); the zero Limit paces nothing until then.
	Rate limits.Limit
	// MaxKeys caps the keys held; 0 means 65,536. A key is held while
	// requests wait or are in flight for it, while its schedule, a pause
	// or a quota window lies ahead, and for two ThrottleWindows after a
	// retry, or after a refusal with Throttle on; once it is none of
	// these, its place may go to a new key. A request for a new key when
	// all are held fails at once with a table-full error: a Pacer fails
	// closed.
	MaxKeys int
	// MaxRetries caps the retries of one request; 0 means 2, and a
	// negative value turns retries off.
	MaxRetries int
	// RetryTokens is the size of each key's retry budget, which starts
	// full; 0 means 10. Each retry takes a token, and each answer that is
	// not a refusal gives back RetryRatio of one, as in gRPC's retry
	// throttling: retries stay near that share of the requests served.
	RetryTokens int
	// RetryRatio is the share of a token each answer that is not a
	// refusal gives back to its key's budget; 0 means 0.1.
	RetryRatio float64
	// MaxRetryWait is the longest a retry may wait for its turn; 0 means
	// a minute. A refusal whose retry would wait longer is returned.
	MaxRetryWait time.Duration
	// Throttle, if at least 1, turns on client-side throttling with that
	// K (Google's SRE book suggests 2), for servers that send no limit: a
	// request is refused locally, with an error wrapping ErrThrottled,
	// with probability max(0, (requests - K*accepts) / (requests + 1)),
	// counted for its key over a sliding ThrottleWindow, where requests
	// include those refused locally and accepts are answers other than
	// refusals. A client then stops hammering a server that refuses it,
	// yet keeps probing it. 0 turns it off.
	Throttle float64
	// ThrottleWindow is the window of Throttle; 0 means two minutes.
	ThrottleWindow time.Duration

	// Prefix starts every error message, such as "httplimit: Transport";
	// front ends set it.
	Prefix string
	// Throttled is the error of a local refusal; nil means ErrThrottled,
	// which it should wrap. Front ends set it.
	Throttled error
	// Rand returns a number in [0, 1); nil means math/rand/v2's Float64.
	Rand func() float64
}

// Stats counts what a Pacer did; httplimit.Transport and
// grpclimit.ClientInterceptor report theirs so, a request being a call
// for the latter.
type Stats struct {
	// Protocol names the client the counts are of, "http" for a
	// Transport, "grpc" for a ClientInterceptor; "" for a Pacer used
	// directly. Metrics are named by it (package metrics).
	Protocol string `json:"protocol,omitempty"`
	// Requests counts the requests given to the pacer, and Sent those
	// sent on, retries included.
	Requests uint64 `json:"requests"`
	Sent     uint64 `json:"sent"`
	// Waited counts the requests that waited for their key's pace or
	// pause, and WaitTime adds up their waits.
	Waited   uint64        `json:"waited"`
	WaitTime time.Duration `json:"wait_ns"`
	// Paused counts the answers that paused their key.
	Paused uint64 `json:"paused"`
	// Retries counts the retries sent, and RetryBudgetSpent the refusals
	// returned because their key's retry budget was spent.
	Retries          uint64 `json:"retries"`
	RetryBudgetSpent uint64 `json:"retry_budget_spent"`
	// Throttled counts the requests refused locally by client-side
	// throttling, with ErrThrottled.
	Throttled uint64 `json:"throttled"`
	// DeadlineExceeded counts the requests failed because their turn
	// would come after their context's deadline.
	DeadlineExceeded uint64 `json:"deadline_exceeded"`
	// TableFull counts the requests failed because every key was held.
	TableFull uint64 `json:"table_full"`
	// Keys is the number of keys held.
	Keys int `json:"keys"`
}

// Pacer paces the requests of a client per key. It is safe for concurrent
// use.
type Pacer struct {
	prefix       string
	q, w         int64 // the default pace: q per w nanoseconds; q == 0 paces nothing
	maxKeys      int
	maxRetries   int
	tokens       int64 // the budget's size, in units of token/1
	ratio        int64 // the units an accepted answer adds
	maxRetryWait int64
	k            float64
	window       int64
	throttled    error
	full         error
	rand         func() float64
	origin       time.Time

	mu   sync.Mutex
	keys map[string]*entry
	idle idleHeap

	requests, sent, waited, paused, retries  atomic.Uint64
	budgetSpent, throttledN, late, tableFull atomic.Uint64
	waitNS                                   atomic.Int64
}

// New returns a Pacer of cfg, or an error naming the field that is wrong.
// Its clock starts now: call it where it will be used (in a synctest
// bubble, inside the bubble).
func New(cfg Config) (*Pacer, error) {
	bad := func(format string, a ...any) (*Pacer, error) {
		return nil, fmt.Errorf("%s: "+format, append([]any{cfg.Prefix}, a...)...)
	}
	switch {
	case cfg.Rate != (limits.Limit{}) && cfg.Rate.Validate() != nil:
		return bad("invalid Rate: %v", cfg.Rate.Validate())
	case cfg.MaxKeys < 0:
		return bad("MaxKeys must be >= 0, got %d", cfg.MaxKeys)
	case cfg.RetryTokens < 0:
		return bad("RetryTokens must be >= 0, got %d", cfg.RetryTokens)
	case cfg.RetryRatio < 0 || math.IsNaN(cfg.RetryRatio) || math.IsInf(cfg.RetryRatio, 0):
		return bad("RetryRatio must be >= 0, got %v", cfg.RetryRatio)
	case cfg.MaxRetryWait < 0:
		return bad("MaxRetryWait must be >= 0, got %v", cfg.MaxRetryWait)
	case cfg.Throttle != 0 && !(cfg.Throttle >= 1) || math.IsInf(cfg.Throttle, 0):
		return bad("Throttle must be 0 or >= 1, got %v", cfg.Throttle)
	case cfg.ThrottleWindow < 0:
		return bad("ThrottleWindow must be >= 0, got %v", cfg.ThrottleWindow)
	}
	p := &Pacer{
		prefix:       cfg.Prefix,
		q:            int64(cfg.Rate.Events),
		w:            int64(cfg.Rate.Period),
		maxKeys:      cmpOr(cfg.MaxKeys, DefaultMaxKeys),
		maxRetries:   cfg.MaxRetries,
		tokens:       int64(cmpOr(cfg.RetryTokens, DefaultRetryTokens)) * token,
		ratio:        int64(math.Round(cmpOr(cfg.RetryRatio, DefaultRetryRatio) * token)),
		maxRetryWait: int64(cmpOr(cfg.MaxRetryWait, DefaultMaxRetryWait)),
		k:            cfg.Throttle,
		window:       int64(cmpOr(cfg.ThrottleWindow, DefaultThrottleWindow)),
		throttled:    cfg.Throttled,
		rand:         cfg.Rand,
		origin:       time.Now(),
		keys:         make(map[string]*entry),
	}
	switch {
	case cfg.MaxRetries == 0:
		p.maxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		p.maxRetries = 0
	}
	if p.throttled == nil {
		p.throttled = ErrThrottled
	}
	if p.rand == nil {
		p.rand = rand.Float64
	}
	p.full = fmt.Errorf("%s: table full: all %d keys are in use", cfg.Prefix, p.maxKeys)
	return p, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// MaxRetries returns how many times a request may be retried.
func (p *Pacer) MaxRetries() int { return p.maxRetries }

// now returns the time in nanoseconds from the Pacer's origin.
func (p *Pacer) now() int64 { return int64(time.Since(p.origin)) }

// Ticket is a request let go by Acquire, to be given to Done.
type Ticket struct {
	e   *entry
	seq uint64
}

// Acquire waits until key may send a request, in its turn, and returns
// its Ticket; the caller must pass it to Done once the answer is in.
// A first attempt (not a retry) counts as a request, and may be refused
// at once by client-side throttling with the Throttled error.
//
// It fails at once, with a *WaitError, if ctx's deadline comes before
// the request's turn, or when a pause learnt while it waits pushes its
// turn past the deadline; with ctx's error if ctx ends while it waits;
// and with a table-full error for a new key when every key held is in
// use. It allocates only if it waits.
func (p *Pacer) Acquire(ctx context.Context, key string, first bool) (Ticket, error) {
	if first {
		p.requests.Add(1)
	}
	now := p.now()
	p.mu.Lock()
	e, err := p.lookup(key, now)
	if err != nil {
		p.mu.Unlock()
		p.tableFull.Add(1)
		return Ticket{}, err
	}
	if first && p.refuse(e, now) {
		p.count(e, now, false)
		p.settle(e)
		p.mu.Unlock()
		p.throttledN.Add(1)
		return Ticket{}, p.throttled
	}
	p.take(e)
	if e.head == nil && now >= e.next() {
		seq := e.depart(now)
		p.mu.Unlock()
		p.sent.Add(1)
		return Ticket{e, seq}, nil
	}
	w := &waiter{}
	if dl, ok := ctx.Deadline(); ok {
		w.dl, w.deadline = true, p.since(dl)
		if eta := e.eta(e.n, now); eta > w.deadline {
			err := p.waitErr(e, eta, w.deadline, now)
			p.release(e)
			p.mu.Unlock()
			p.late.Add(1)
			return Ticket{}, err
		}
	}
	w.ch = make(chan struct{}, 1)
	e.push(w)
	p.mu.Unlock()
	p.waited.Add(1)
	t, err := p.wait(ctx, e, w)
	p.waitNS.Add(p.now() - now)
	return t, err
}

// since returns t in nanoseconds from the origin, saturated.
func (p *Pacer) since(t time.Time) int64 { return int64(t.Sub(p.origin)) }

// wait waits for w's turn in e's queue.
func (p *Pacer) wait(ctx context.Context, e *entry, w *waiter) (Ticket, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var tick <-chan time.Time
		p.mu.Lock()
		if w.err != nil {
			p.mu.Unlock()
			return Ticket{}, w.err
		}
		if e.head == w {
			now := p.now()
			next := e.next()
			if now >= next {
				e.unlink(w)
				seq := e.depart(now)
				if e.head != nil {
					signal(e.head)
				}
				p.mu.Unlock()
				p.sent.Add(1)
				return Ticket{e, seq}, nil
			}
			d := time.Duration(next - now)
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tick = timer.C
		}
		p.mu.Unlock()
		select {
		case <-w.ch:
		case <-tick:
		case <-ctx.Done():
			p.mu.Lock()
			if w.err != nil {
				p.mu.Unlock()
				return Ticket{}, w.err
			}
			head := e.head == w
			e.unlink(w)
			if head && e.head != nil {
				signal(e.head)
			}
			p.release(e)
			p.mu.Unlock()
			return Ticket{}, ctx.Err()
		}
	}
}

// Done records the answer to the request of t, which it ends, and
// reports whether it may be retried: when retry asks for it, the answer
// does not forbid it, the key's budget holds a token (which it takes),
// and the retry's turn comes within MaxRetryWait and before ctx's
// deadline. The caller then calls Acquire again for the retry.
func (p *Pacer) Done(ctx context.Context, t Ticket, a Answer, retry bool) bool {
	now := p.now()
	p.mu.Lock()
	e := t.e
	e.pending--
	p.learn(e, t.seq, a, now)
	ok := false
	if retry && !a.NoRetry {
		if e.tokens < token {
			p.budgetSpent.Add(1)
		} else {
			eta := e.eta(e.n, now)
			dl, has := ctx.Deadline()
			if eta-now <= p.maxRetryWait && (!has || eta <= p.since(dl)) {
				e.tokens -= token
				e.hold = max(e.hold, now+2*p.window)
				ok = true
			}
		}
	}
	p.settle(e)
	p.mu.Unlock()
	if ok {
		p.retries.Add(1)
	}
	return ok
}

// Note records an answer that came after its request's Done, such as the
// status at the end of a stream; it counts and learns as Done does.
func (p *Pacer) Note(key string, a Answer) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	e, err := p.lookup(key, now)
	if err != nil {
		return
	}
	p.take(e)
	p.learn(e, e.sent, a, now)
	p.release(e)
}

// Stats returns the Pacer's counters.
func (p *Pacer) Stats() Stats {
	p.mu.Lock()
	n := len(p.keys)
	p.mu.Unlock()
	return Stats{
		Requests:         p.requests.Load(),
		Sent:             p.sent.Load(),
		Waited:           p.waited.Load(),
		WaitTime:         time.Duration(p.waitNS.Load()),
		Paused:           p.paused.Load(),
		Retries:          p.retries.Load(),
		RetryBudgetSpent: p.budgetSpent.Load(),
		Throttled:        p.throttledN.Load(),
		DeadlineExceeded: p.late.Load(),
		TableFull:        p.tableFull.Load(),
		Keys:             n,
	}
}

// learn records answer a to request seq of e, received at now.
func (p *Pacer) learn(e *entry, seq uint64, a Answer, now int64) {
	switch a.Outcome {
	case OutcomeAccepted:
		p.count(e, now, true)
		e.tokens = min(p.tokens, e.tokens+p.ratio)
		e.strikes = 0
	case OutcomeRefused, OutcomeFailed:
		p.count(e, now, false)
	}
	moved := false
	if a.Quota > 0 && a.Window > 0 && e.setPace(a.Quota, int64(min(a.Window, MaxPause))) {
		moved = true
	}
	if a.HasLeft && seq > e.seen {
		// The answer counted the requests before seq; those sent since
		// are spent too.
		e.seen = seq
		e.left = a.Left - int64(e.sent-seq)
		e.reset = now + int64(clamp(a.Reset))
		if e.left <= 0 && e.pause(e.reset) {
			moved = true
			p.paused.Add(1)
		}
	}
	switch {
	case a.Pause > 0:
		e.strikes = 0
		if e.pause(now + int64(clamp(a.Pause))) {
			moved = true
			p.paused.Add(1)
		}
	case a.Backoff:
		d := min(time.Second<<min(e.strikes, 6), maxBackoff)
		e.strikes++
		if e.pause(now + int64(d)) {
			moved = true
			p.paused.Add(1)
		}
	}
	if moved {
		p.reschedule(e, now)
	}
}

// reschedule fails at once the waiters of e whose turn now comes after
// their deadline, and wakes the head of the queue to look at its turn
// again.
func (p *Pacer) reschedule(e *entry, now int64) {
	i := 0
	for w := e.head; w != nil; {
		next := w.next
		if eta := e.eta(i, now); w.dl && eta > w.deadline {
			w.err = p.waitErr(e, eta, w.deadline, now)
			e.unlink(w)
			e.pending--
			p.late.Add(1)
			signal(w)
		} else {
			i++
		}
		w = next
	}
	if e.head != nil {
		signal(e.head)
	}
}

// WaitError is the error of a request whose turn would come after its
// context's deadline. It wraps context.DeadlineExceeded.
type WaitError struct {
	// Prefix starts the error's message: the Prefix of the Pacer's
	// Config, such as "httplimit: Transport".
	Prefix string
	// Wait is how long the request would have waited, and Left how long
	// its context had left.
	Wait, Left time.Duration
	// Paused reports that the wait was the server's pause, not the key's
	// pace.
	Paused bool
}

// Error says what held the request (the pause its server asked for, or
// its key's pace), how long, and how long its context had left.
func (e *WaitError) Error() string {
	why := "the pace of its key"
	if e.Paused {
		why = "the pause its server asked for"
	}
	return fmt.Sprintf("%s: %s would hold the request %v, past its context's deadline (%v away): %v",
		e.Prefix, why, e.Wait, max(e.Left, 0), context.DeadlineExceeded)
}

// Unwrap returns context.DeadlineExceeded.
func (e *WaitError) Unwrap() error { return context.DeadlineExceeded }

func (p *Pacer) waitErr(e *entry, eta, deadline, now int64) error {
	return &WaitError{Prefix: p.prefix, Wait: time.Duration(eta - now), Left: time.Duration(deadline - now), Paused: e.pauseEnd > now}
}

// IsWaitError reports whether err is a *WaitError.
func IsWaitError(err error) bool {
	var w *WaitError
	return errors.As(err, &w)
}

// lookup returns key's entry, making one if needed, in place of an entry
// no longer in use when the table is full. A new entry is in neither the
// heap nor use: the caller takes it or settles it.
func (p *Pacer) lookup(key string, now int64) (*entry, error) {
	if e, ok := p.keys[key]; ok {
		return e, nil
	}
	var e *entry
	if len(p.keys) >= p.maxKeys {
		if len(p.idle) == 0 || p.idle[0].until > now {
			return nil, p.full
		}
		e = heap.Pop(&p.idle).(*entry)
		delete(p.keys, e.key)
		*e = entry{}
	} else {
		e = new(entry)
	}
	e.key, e.idx = key, -1
	e.q, e.w = p.q, p.w
	e.tokens = p.tokens
	e.start = now
	p.keys[key] = e
	return e, nil
}

// take counts a request in e's use, taking e off the idle heap.
func (p *Pacer) take(e *entry) {
	e.pending++
	if e.idx >= 0 {
		heap.Remove(&p.idle, e.idx)
	}
}

// release ends a request that take counted.
func (p *Pacer) release(e *entry) {
	e.pending--
	p.settle(e)
}

// settle puts e on the idle heap, or moves it there, if nothing is
// pending for it.
func (p *Pacer) settle(e *entry) {
	if e.pending > 0 {
		return
	}
	e.until = max(e.next(), e.hold, e.reset, e.pauseEnd)
	if e.idx < 0 {
		heap.Push(&p.idle, e)
	} else {
		heap.Fix(&p.idle, e.idx)
	}
}

// roll moves e's throttling windows to now's.
func (p *Pacer) roll(e *entry, now int64) {
	if d := now - e.start; d >= p.window {
		if d >= 2*p.window {
			e.prev = tally{}
		} else {
			e.prev = e.cur
		}
		e.cur = tally{}
		e.start = now - d%p.window
	}
}

// count counts a request of e, and whether its server accepted it.
func (p *Pacer) count(e *entry, now int64, accepted bool) {
	p.roll(e, now)
	e.cur.req++
	if accepted {
		e.cur.acc++
	} else if p.k > 0 {
		e.hold = max(e.hold, now+2*p.window)
	}
}

// refuse reports whether client-side throttling refuses a request of e
// at now: with probability max(0, (requests - K*accepts) / (requests + 1))
// over the sliding window, the previous window's counts weighted by the
// share of it still within one window of now.
func (p *Pacer) refuse(e *entry, now int64) bool {
	if p.k == 0 {
		return false
	}
	p.roll(e, now)
	f := 1 - float64(now-e.start)/float64(p.window)
	req := float64(e.prev.req)*f + float64(e.cur.req)
	acc := float64(e.prev.acc)*f + float64(e.cur.acc)
	pr := (req - p.k*acc) / (req + 1)
	return pr > 0 && p.rand() < pr
}

// tally counts requests and the accepted among them.
type tally struct{ req, acc int64 }

// entry is a key's state. All its fields are under the Pacer's lock.
type entry struct {
	key     string
	pending int   // requests waiting or in flight
	idx     int   // index in the idle heap, or -1
	until   int64 // while idle: when it stops being in use

	// The schedule: slot k leaves at base + ceil(k*w/q).
	base     int64
	k        uint64
	q, w     int64
	pauseEnd int64 // the end of the latest pause
	last     int64 // when the latest request left

	// The quota window: left requests until reset, while now < reset,
	// as of the answer to request seen of the sent so far.
	left, reset int64
	sent, seen  uint64

	strikes uint // refusals in a row that asked for a backoff
	tokens  int64
	hold    int64 // the retry budget and throttling counts matter until then

	start      int64 // the current throttling window's start
	cur, prev  tally
	head, tail *waiter
	n          int // waiters
}

// at returns the time of slot k.
func (e *entry) at(k uint64) int64 { return e.base + e.span(k) }

// span returns ceil(k*w/q): k emission intervals, in nanoseconds, at most
// about 73 years.
func (e *entry) span(k uint64) int64 {
	const limit = math.MaxInt64 / 4
	if e.q == 0 || k == 0 {
		return 0
	}
	hi, lo := bits.Mul64(k, uint64(e.w))
	if hi >= uint64(e.q) {
		return limit
	}
	d, r := bits.Div64(hi, lo, uint64(e.q))
	if r != 0 {
		d++
	}
	return int64(min(d, limit))
}

// next returns when the next request may leave.
func (e *entry) next() int64 { return e.at(e.k) }

// eta returns when the request behind i others in the queue would leave,
// if nothing changes.
func (e *entry) eta(i int, now int64) int64 {
	var t int64
	if next := e.next(); next < now {
		t = now + e.span(uint64(i))
	} else {
		t = e.at(e.k + uint64(i))
	}
	if e.reset > now && int64(i) >= e.left {
		t = max(t, e.reset+e.span(uint64(int64(i)-max(e.left, 0))))
	}
	return t
}

// depart takes the slot of a request leaving at now, no earlier than
// next, and returns its sequence number.
func (e *entry) depart(now int64) uint64 {
	if now > e.next() {
		e.base, e.k = now, 1
	} else {
		e.k++
	}
	e.sent++
	e.last = now
	if e.reset > now {
		e.left--
		if e.left <= 0 {
			e.pause(e.reset)
		}
	}
	return e.sent
}

// pause holds the key's requests until t, and reports whether that moved
// its next request later.
func (e *entry) pause(t int64) bool {
	e.pauseEnd = max(e.pauseEnd, t)
	if t <= e.next() {
		return false
	}
	e.base, e.k = t, 0
	return true
}

// setPace makes q per w the key's pace, and reports whether it changed.
// The next request leaves at the next slot of the old pace, or one
// interval of the new pace after the last request, whichever is later.
func (e *entry) setPace(q, w int64) bool {
	if q == e.q && w == e.w {
		return false
	}
	next := e.next()
	e.q, e.w = q, w
	if e.sent > 0 && e.last+e.span(1) > next {
		e.base, e.k = e.last, 1
	} else {
		e.base, e.k = next, 0
	}
	return true
}

// waiter is a request waiting in a key's queue.
type waiter struct {
	prev, next *waiter
	ch         chan struct{} // signalled when its turn may have changed
	dl         bool
	deadline   int64
	err        error // set when reschedule failed it
}

func signal(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

func (e *entry) push(w *waiter) {
	w.prev = e.tail
	if e.tail != nil {
		e.tail.next = w
	} else {
		e.head = w
	}
	e.tail = w
	e.n++
}

func (e *entry) unlink(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.prev, w.next = nil, nil
	e.n--
}

// idleHeap holds the entries nothing is pending for, soonest out of use
// first.
type idleHeap []*entry

func (h idleHeap) Len() int           { return len(h) }
func (h idleHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h idleHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *idleHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}

func (h *idleHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
