// Package sim simulates a service of known capacity behind a limits.Gate,
// under open-loop load, to show how a gate, fixed or moved by an
// adaptive.Controller, holds its latency. Runs are deterministic: they
// must run in a testing/synctest bubble, whose clock the gate and the
// controller read, and draw every random number from a seeded source in
// the order of arrivals.
package sim

import (
	"container/heap"
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/report"
)

// Service is a model of a service: Servers workers, each serving one
// request at a time, in the order they came (an unbounded FIFO queue), for
// a time drawn from the distribution Dist of mean Mean. Its capacity is
// Servers requests at once, Servers/Mean a second; past it, requests
// queue.
type Service struct {
	Servers int
	Mean    time.Duration
	// Dist is the shape of the service times; the zero Dist is
	// Exponential.
	Dist Dist
	// Changes sets Servers to a new number at given times, in order: a
	// slower dependency, a lost core.
	Changes []Change
	// Timeout, if positive, fails a request that has waited that long for
	// a worker, at once, as a server with a queue timeout does: the
	// request is Dropped, and counts as served in Failed.
	Timeout time.Duration
}

// Dist is a distribution of service times, scaled to a mean.
type Dist uint8

const (
	// Exponential service times: p50 0.69, p99 4.6 times the mean.
	Exponential Dist = iota
	// Lognormal service times, of shape sigma 0.5: p10 0.47, p50 0.88,
	// p99 2.8 times the mean.
	Lognormal
	// Uniform service times, between 0.8 and 1.2 times the mean.
	Uniform
	// Bimodal service times: 80% between 0.4 and 0.6 times the mean, 20%
	// between 2.6 and 3.4 times (a cache hit and a miss).
	Bimodal
)

// Dists lists the distributions, in order.
var Dists = []Dist{Exponential, Lognormal, Uniform, Bimodal}

func (d Dist) String() string {
	switch d {
	case Exponential:
		return "exponential"
	case Lognormal:
		return "lognormal"
	case Uniform:
		return "uniform"
	case Bimodal:
		return "bimodal"
	}
	return "unknown"
}

// lognormalSigma is the shape of Lognormal.
const lognormalSigma = 0.5

// draw returns a service time of mean mean from rng.
func (d Dist) draw(rng *rand.Rand, mean time.Duration) time.Duration {
	m := float64(mean)
	var v float64
	switch d {
	case Lognormal:
		v = m * math.Exp(lognormalSigma*rng.NormFloat64()-lognormalSigma*lognormalSigma/2)
	case Uniform:
		v = m * (0.8 + 0.4*rng.Float64())
	case Bimodal:
		if rng.Float64() < 0.8 {
			v = m * (0.4 + 0.2*rng.Float64())
		} else {
			v = m * (2.6 + 0.8*rng.Float64())
		}
	default:
		v = m * rng.ExpFloat64()
	}
	return even(time.Duration(v))
}

// Unloaded returns the latency percentile q of s's requests served
// without queueing, measured on n service times drawn with seed.
func (s Service) Unloaded(q float64, n int, seed uint64) time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = s.Dist.draw(rng, s.Mean)
	}
	return report.Percentile(d, q)
}

// Change is a change of a Service's workers.
type Change struct {
	At      time.Duration
	Servers int
}

// Phase is a stretch of open-loop load: requests arrive at random, Rate a
// second on average, until Until from the start.
type Phase struct {
	Until time.Duration
	Rate  float64
}

// Front is what stands between the clients and the service.
type Front struct {
	// Gate admits requests; nil admits all.
	Gate *limits.Gate
	// Ctrl, if set, is told of each request served.
	Ctrl *adaptive.Controller
	// Wait is how long a request may wait in Gate.Enter. 0 uses the
	// Controller's Enter, which waits Controller.Wait, as the front ends
	// do with an adaptive gate, or without Ctrl, TryEnter; < 0 uses
	// TryEnter.
	Wait time.Duration
}

// wait returns how long a request arriving now may wait in the gate, or
// 0 for none.
func (f Front) wait() time.Duration {
	switch {
	case f.Wait > 0:
		return f.Wait
	case f.Wait == 0 && f.Ctrl != nil:
		return f.Ctrl.Wait()
	}
	return 0
}

// Config is a run.
type Config struct {
	Seed    uint64
	Service Service
	Load    []Phase // the run ends with the last phase
	Front   Front
	// Bucket is the step of the time series; 0 means 250ms.
	Bucket time.Duration
}

// Request is what happened to one request.
type Request struct {
	Arrive   time.Duration // from the start of the run
	Admitted bool
	Wait     time.Duration // in the gate, admitted or not
	Done     bool          // served (or failed) before the run ended
	Failed   bool          // failed by the service's Timeout
	Latency  time.Duration // from admission to the end of service
}

// Bucket is a step of the time series.
type Bucket struct {
	End      time.Duration
	Limit    int // the gate's maximum at End; 0 without a gate
	Probing  bool
	Servers  int
	InFlight int // admitted and not done, at End
	// Arrived, Admitted and Refused count the requests that arrived in the
	// step; Done those served in it, of which P50 and P99 are the latency
	// percentiles, and Failed those the service failed.
	Arrived, Admitted, Refused, Done, Failed int
	P50, P99                                 time.Duration
}

// Result is a run's record.
type Result struct {
	Requests []Request
	Buckets  []Bucket
}

// req is a request in the run.
type req struct {
	Request
	id      int
	service time.Duration
	admit   time.Duration
	permit  limits.Permit
	started bool // by a worker
}

type evKind uint8

const (
	evDone evKind = iota // ordered first at one instant: places freed before taken
	evChange
	evStart
	evArrive
	evBucket
	evTimeout
)

type event struct {
	at   time.Duration
	kind evKind
	id   int
	r    *req
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	a, b := e[i], e[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.id < b.id
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// run is the state of a run.
type run struct {
	cfg   Config
	rng   *rand.Rand
	t0    time.Time
	mu    sync.Mutex // guards evs and the requests' fields, written by waiters
	evs   events
	reqs  []*req
	busy  int
	serve int // workers now
	queue []*req
	// live counts the requests waiting in the gate, on goroutines of
	// their own; longest is the longest wait given.
	live    atomic.Int64
	longest time.Duration
	spawned bool     // a request began to wait in the event being handled
	jobs    chan job // to the waiters idle
	// The bucket being filled.
	b    Bucket
	lats []time.Duration
	out  []Bucket
}

// Run runs cfg and returns its record. It must be called in a synctest
// bubble, in which cfg's gate and controller were made.
func Run(cfg Config) *Result {
	if cfg.Bucket == 0 {
		cfg.Bucket = 250 * time.Millisecond
	}
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), t0: time.Now(), serve: cfg.Service.Servers, jobs: make(chan job)}
	end := cfg.Load[len(cfg.Load)-1].Until
	r.push(event{at: r.interarrival(0), kind: evArrive})
	for i, c := range cfg.Service.Changes {
		r.push(event{at: c.At, kind: evChange, id: i})
	}
	for t := cfg.Bucket; t <= end; t += cfg.Bucket {
		r.push(event{at: t, kind: evBucket})
	}
	for {
		r.mu.Lock()
		if len(r.evs) == 0 {
			r.mu.Unlock()
			break
		}
		ev := heap.Pop(&r.evs).(event)
		r.mu.Unlock()
		if ev.at > end {
			break
		}
		if d := ev.at - time.Since(r.t0); d > 0 {
			time.Sleep(d)
		}
		r.spawned = false
		r.handle(ev, end)
		if r.spawned || (ev.kind == evDone && r.live.Load() > 0) {
			// Let a new waiter join the gate's queue, or those a place
			// freed push their events. (A waiter whose wait runs out does
			// so while the run sleeps, at a time no event falls on.)
			synctest.Wait()
		}
	}
	if r.longest > 0 {
		// Let the callers still waiting give up, and the waiters end, for
		// the bubble to end.
		time.Sleep(r.longest)
		synctest.Wait()
	}
	close(r.jobs)
	res := &Result{Buckets: r.out, Requests: make([]Request, len(r.reqs))}
	r.mu.Lock()
	for i, q := range r.reqs {
		res.Requests[i] = q.Request
	}
	r.mu.Unlock()
	return res
}

func (r *run) push(ev event) {
	r.mu.Lock()
	heap.Push(&r.evs, ev)
	r.mu.Unlock()
}

// rate returns the arrival rate at t.
func (r *run) rate(t time.Duration) float64 {
	for _, p := range r.cfg.Load {
		if t < p.Until {
			return p.Rate
		}
	}
	return 0
}

// interarrival returns the time of the arrival after one at t.
func (r *run) interarrival(t time.Duration) time.Duration {
	for {
		rate := r.rate(t)
		if rate <= 0 {
			return 1<<62 - 1
		}
		next := even(t + time.Duration(r.rng.ExpFloat64()/rate*float64(time.Second)))
		// A draw that crosses into another phase is redrawn from its start,
		// which the memorylessness of the exponential allows.
		for _, p := range r.cfg.Load {
			if t < p.Until && next >= p.Until {
				next = -1
				t = p.Until
				break
			}
			if t < p.Until {
				break
			}
		}
		if next >= 0 {
			return next
		}
	}
}

func (r *run) handle(ev event, end time.Duration) {
	now := ev.at
	switch ev.kind {
	case evArrive:
		q := &req{id: len(r.reqs), service: r.cfg.Service.Dist.draw(r.rng, r.cfg.Service.Mean)}
		q.Arrive = now
		r.mu.Lock()
		r.reqs = append(r.reqs, q)
		r.b.Arrived++
		r.mu.Unlock()
		r.push(event{at: r.interarrival(now), kind: evArrive})
		r.admit(q)
	case evStart:
		r.start(ev.r, now)
	case evDone:
		q := ev.r
		if !q.Failed {
			r.busy--
			r.startQueued(now)
		}
		r.mu.Lock()
		q.Done, q.Latency = true, now-q.admit
		o := adaptive.Success
		if q.Failed {
			o = adaptive.Dropped
			r.b.Failed++
		} else {
			r.b.Done++
			r.lats = append(r.lats, q.Latency)
		}
		r.mu.Unlock()
		if r.cfg.Front.Ctrl != nil {
			r.cfg.Front.Ctrl.Observe(q.Latency, o)
		}
		q.permit.Release()
	case evTimeout:
		if q := ev.r; !q.started {
			// Still waiting for a worker: fail it now.
			r.mu.Lock()
			q.Failed = true
			r.mu.Unlock()
			r.handle(event{at: now, kind: evDone, id: q.id, r: q}, end)
		}
	case evChange:
		r.serve = r.cfg.Service.Changes[ev.id].Servers
		r.startQueued(now)
	case evBucket:
		r.bucket(now)
	}
}

// admit passes q through the front.
func (r *run) admit(q *req) {
	f := r.cfg.Front
	switch {
	case f.Gate == nil:
		r.mu.Lock()
		q.Admitted = true
		r.b.Admitted++
		q.admit = q.Arrive
		r.mu.Unlock()
		r.start(q, q.Arrive)
	default:
		wait := f.wait()
		if wait <= 0 || f.free() {
			// No wait, or a place free now: the gate answers at once.
			var ok bool
			if wait <= 0 {
				q.permit, ok = f.Gate.TryEnter()
			} else {
				q.permit, ok = f.Gate.Enter(context.Background(), wait)
			}
			r.mu.Lock()
			r.admitted(q, ok, q.Arrive)
			r.mu.Unlock()
			if ok {
				r.start(q, q.Arrive)
			}
			return
		}
		r.longest = max(r.longest, wait)
		r.live.Add(1)
		r.spawned = true
		j := job{q: q, wait: wait | 1}
		select {
		case r.jobs <- j: // to a waiter that is idle
		default:
			go r.waiter(j)
		}
	}
}

// job is a request to wait in the gate for, with its wait, odd: its end
// never falls on an event's time.
type job struct {
	q    *req
	wait time.Duration
}

// waiter waits in the gate for j's request, then for the requests it is
// given, until the run ends. (Waiters are reused: a goroutine's stack
// grows once.)
func (r *run) waiter(j job) {
	for ok := true; ok; j, ok = <-r.jobs {
		q := j.q
		// With the Controller's wait, this is Controller.Enter, but for
		// the wait made odd.
		var in bool
		q.permit, in = r.cfg.Front.Gate.Enter(context.Background(), j.wait)
		now := time.Since(r.t0)
		r.mu.Lock()
		r.admitted(q, in, now)
		if in {
			heap.Push(&r.evs, event{at: now, kind: evStart, id: q.id, r: q})
		}
		r.mu.Unlock()
		r.live.Add(-1)
	}
}

// free reports whether the gate has a place free and nobody waiting, so
// that Enter takes the place at once. Only the run's own goroutine, which
// asks, and waiters, which are blocked while it runs, enter the gate.
func (f Front) free() bool {
	s := f.Gate.Stats()
	return s.InFlight < s.Max && s.Waiting == 0
}

// admitted records the gate's answer to q at now. r.mu is held.
func (r *run) admitted(q *req, ok bool, now time.Duration) {
	q.Admitted, q.Wait, q.admit = ok, now-q.Arrive, now
	if ok {
		r.b.Admitted++
	} else {
		r.b.Refused++
	}
}

// start hands q to the service at now.
func (r *run) start(q *req, now time.Duration) {
	if r.busy < r.serve && len(r.queue) == 0 {
		r.busy++
		q.started = true
		r.push(event{at: now + q.service, kind: evDone, id: q.id, r: q})
		return
	}
	r.queue = append(r.queue, q)
	if t := r.cfg.Service.Timeout; t > 0 {
		r.push(event{at: now + t, kind: evTimeout, id: q.id, r: q})
	}
}

// startQueued starts queued requests while workers are free, skipping
// those the service has failed.
func (r *run) startQueued(now time.Duration) {
	for r.busy < r.serve && len(r.queue) > 0 {
		q := r.queue[0]
		r.queue = r.queue[1:]
		if q.Failed {
			continue
		}
		r.busy++
		q.started = true
		r.push(event{at: now + q.service, kind: evDone, id: q.id, r: q})
	}
}

// bucket closes the step ending at now.
func (r *run) bucket(now time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.b
	b.End, b.Servers = now, r.serve
	if g := r.cfg.Front.Gate; g != nil {
		s := g.Stats()
		b.Limit, b.InFlight = s.Max, s.InFlight
	} else {
		b.InFlight = r.busy + len(r.queue)
	}
	if c := r.cfg.Front.Ctrl; c != nil {
		b.Probing = c.Stats().Probing
	}
	b.P50, b.P99 = report.Percentile(r.lats, 0.5), report.Percentile(r.lats, 0.99)
	r.out = append(r.out, b)
	r.b, r.lats = Bucket{}, r.lats[:0]
}

// even rounds d up to an even number of nanoseconds. Events fall on
// even times, and waits in the gate last an odd time, so that a waiter
// giving up never does so at the instant of an event: the two would run
// at once, in no fixed order.
func even(d time.Duration) time.Duration { return (d + 1) &^ 1 }

// Summary sums up the requests that arrived in a stretch of a run.
type Summary struct {
	Arrived, Admitted, Refused int
	// Served counts the admitted requests served before the run ended.
	Served int
	// Throughput is the admitted requests a second.
	Throughput float64
	// P50 and P99 are the latency percentiles of the requests served,
	// from admission; Mean their mean.
	P50, P99, Mean time.Duration
	// RefusedP50 and RefusedP99 are the percentiles of the time a refused
	// request waited before its refusal.
	RefusedP50, RefusedP99 time.Duration
}

// Summarize sums up the requests that arrived in [from, to).
func (res *Result) Summarize(from, to time.Duration) Summary {
	var s Summary
	var lat, ref []time.Duration
	var sum time.Duration
	for _, q := range res.Requests {
		if q.Arrive < from || q.Arrive >= to {
			continue
		}
		s.Arrived++
		if !q.Admitted {
			s.Refused++
			ref = append(ref, q.Wait)
			continue
		}
		s.Admitted++
		if q.Done {
			s.Served++
			lat = append(lat, q.Latency)
			sum += q.Latency
		}
	}
	s.Throughput = float64(s.Admitted) / (to - from).Seconds()
	s.P50, s.P99 = report.Percentile(lat, 0.5), report.Percentile(lat, 0.99)
	if len(lat) > 0 {
		s.Mean = sum / time.Duration(len(lat))
	}
	s.RefusedP50, s.RefusedP99 = report.Percentile(ref, 0.5), report.Percentile(ref, 0.99)
	return s
}
