package redislimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
)

// modelFleet is a model of a fleet of processes in lease mode sharing one
// Redis, on simulated time: the server keeps each key's TAT exactly and
// reads its clock in microseconds as TIME does; each process has a clock
// of its own, skewed, and every call takes a round trip, half of it before
// the script runs.
type modelFleet struct {
	lim     *modelLimit // the limit in force
	now     int64       // the true time, in ns; the server's clock is now + srvOff
	rtt     int64
	tat     map[string]gcra.Time
	admit   []int64 // the server's time of each admission, in order
	calls   int
	decided bool // the latest decision was made by decide
}

// modelLimit is a limit of the model: its policy, whose Lead applies
// until the server's clock reaches until, as the scripts take a lead
// while keys charged under an earlier limit of a larger burst may remain.
type modelLimit struct {
	p     gcra.Policy
	until int64
}

func newModelFleet(p gcra.Policy, rtt int64) *modelFleet {
	return &modelFleet{lim: &modelLimit{p: p}, rtt: rtt, tat: map[string]gcra.Time{}}
}

// setLimit changes the fleet's limit to p at once, as every process's
// SetLimit does, and returns the new limit.
func (f *modelFleet) setLimit(p gcra.Policy) *modelLimit {
	old := f.lim
	lead := p.Convert(old.lead(f.server()), old.p.Den)
	l := &modelLimit{p: p}
	if gcra.Less(p.D, lead) {
		l.p.Lead, l.until = lead, f.server()+gcra.Ceil(lead)
	}
	f.lim = l
	return l
}

// lead returns how far a TAT may run ahead at the server's time now.
func (l *modelLimit) lead(now int64) gcra.Time {
	if now < l.until {
		return l.p.Lead
	}
	return l.p.D
}

// judge returns the policy to judge by at the server's time now.
func (l *modelLimit) judge(now int64) *gcra.Policy {
	p := l.p
	p.Lead = l.lead(now)
	return &p
}

func (f *modelFleet) server() int64 { return f.now + srvOff }

const srvOff = 1_767_225_600_000_000_000 // the server's clock: 2026-01-01

// time reads the server's clock as TIME does, to the microsecond.
func (f *modelFleet) time() gcra.Time { return gcra.Time{NS: f.server() / 1000 * 1000} }

// ahead returns how far key's TAT runs ahead of now, as the scripts of
// limit l take it: 0 if it has passed, at most l's lead.
func (f *modelFleet) ahead(l *modelLimit, key string, now gcra.Time) gcra.Time {
	a := l.p.Sub(f.tat[key], now)
	switch lead := l.lead(now.NS); {
	case !gcra.Positive(a):
		return gcra.Time{}
	case gcra.Less(lead, a):
		panic(fmt.Sprintf("a TAT %v ahead, beyond the lead %v", a, lead)) // never written by the model
	}
	return a
}

// modelProc is one process of a modelFleet: its leaseBackend, for a lease
// table of the limit in force (modelLeases serves a table of another).
type modelProc struct {
	f    *modelFleet
	skew int64
	t    *leaseTable
	// ahead counts the leases asked for with slots in hand; overHand the
	// leases that could have left the hand holding more than a lease.
	ahead, overHand int
	pending         []func() // leases taken ahead, to run once the decision is recorded
}

// later queues a lease taken ahead, for the test to run once it has
// recorded the decision that started it: the lease's round trip then
// comes after the decision, as it does on a goroutine of its own.
func (m *modelProc) later(f func()) { m.pending = append(m.pending, f) }

// runPending runs the leases taken ahead since the last call.
func (m *modelProc) runPending() {
	for len(m.pending) > 0 {
		f := m.pending[0]
		m.pending = m.pending[1:]
		f()
	}
}

func (m *modelProc) clock() int64 { return m.f.now + m.skew }

// decide decides at the limit in force, as a GCRA's call does.
func (m *modelProc) decide(_ context.Context, key string, n int) (limits.Decision, error) {
	f := m.f
	f.calls++
	f.decided = true
	f.now += f.rtt / 2
	now := f.time()
	p := f.lim.judge(now.NS)
	allowed, after := p.Judge(f.ahead(f.lim, key, now), n, true)
	if allowed {
		f.tat[key] = p.Add(now, after)
	}
	res := p.Report(allowed, after, n)
	f.now += f.rtt - f.rtt/2
	d := limits.Decision{Allowed: allowed, Limit: p.Limit, Period: p.Period, Burst: p.Burst, Cost: n,
		Remaining: res.Remaining, ResetAfter: res.ResetAfter, At: time.Unix(0, now.NS)}
	if !allowed {
		d.Reason, d.RetryAfter = limits.ReasonRateLimited, res.RetryAfter
	}
	return d, nil
}

func (m *modelProc) lease(ctx context.Context, key string, want int, skip int64) (leaseReply, error) {
	return m.leaseAt(m.f.lim, key, want, skip)
}

// leaseAt is the lease script at limit l.
func (m *modelProc) leaseAt(l *modelLimit, key string, want int, skip int64) (leaseReply, error) {
	f := m.f
	f.calls++
	if held := int(m.t.stats.unspent.Load()); held > 0 {
		m.ahead++
		if held+want > m.t.slots {
			m.overHand++
		}
	}
	f.now += f.rtt / 2
	now := f.time()
	p := &l.p
	a := f.ahead(l, key, now)
	if gcra.Less(a, gcra.Time{NS: skip}) {
		a = gcra.Time{NS: skip}
	}
	k := 0
	for k < want && !gcra.Less(p.D, p.Add(a, p.Cost(k+1))) {
		k++
	}
	if k > 0 {
		f.tat[key] = p.Add(p.Add(now, a), p.Cost(k))
	}
	f.now += f.rtt - f.rtt/2
	return leaseReply{k: k, ahead: a, now: now.NS}, nil
}

func (m *modelProc) giveBack(ctx context.Context, key string, top gcra.Time, n int, rounded bool) (bool, error) {
	return m.giveBackAt(m.f.lim, key, top, n, rounded)
}

// giveBackAt is the give-back script for a charge of n at limit l.
func (m *modelProc) giveBackAt(l *modelLimit, key string, top gcra.Time, n int, rounded bool) (bool, error) {
	f := m.f
	f.calls++
	t := f.tat[key]
	p := &l.p
	match := !gcra.Less(top, t) && (!gcra.Less(t, top) || rounded && gcra.Less(p.Sub(top, gcra.Time{NS: 1}), t))
	if match {
		f.tat[key] = p.Sub(t, p.Cost(n))
	}
	return match, nil
}

func (m *modelProc) failed(string, int, error) (limits.Decision, error) {
	panic("the model does not fail")
}

func (m *modelProc) aheadFailed(error) { panic("the model does not fail") }

// modelLeases is the leaseBackend of a lease table of limit l: its leases
// and give-backs are at l, whether or not l is still in force.
type modelLeases struct {
	*modelProc
	l *modelLimit
}

func (m modelLeases) lease(_ context.Context, key string, want int, skip int64) (leaseReply, error) {
	return m.leaseAt(m.l, key, want, skip)
}

func (m modelLeases) giveBack(_ context.Context, key string, top gcra.Time, n int, rounded bool) (bool, error) {
	return m.giveBackAt(m.l, key, top, n, rounded)
}

// setLimit replaces m's lease table by one of limit l, as GCRA.SetLimit
// does: the new table first, then the old one retired and its slots in
// hand given back, at the old limit. It returns the slots taken out of
// the hand and those Redis took back.
func (m *modelProc) setLimit(l *modelLimit, slots int) (collected, given int) {
	old := m.t
	m.t = newLeaseTable(&l.p, slots, old.keys, m.clock, modelLeases{m, l})
	m.t.stats, m.t.async = old.stats, old.async
	before := old.stats.returned.Load()
	runs := old.retire()
	given, _ = old.giveBackRuns(context.Background(), runs)
	return int(old.stats.returned.Load() - before), given
}

// refund gives back d as GCRA.Refund does in lease mode: to the hand of
// m's table if d is of its runs (hand reports that, and back the slots
// that went back), otherwise in Redis, at the limit d was made under, if
// nothing was charged for the key since (redis reports that).
func (m *modelProc) refund(key string, d limits.Decision) (hand bool, back int, redis bool) {
	if p := m.t.p; d.Limit == p.Limit && d.Period == p.Period && d.Burst == p.Burst {
		spent := m.t.stats.spent.Load()
		if m.t.refund(key, d) {
			return true, int(spent - m.t.stats.spent.Load()), false
		}
	}
	dp, err := gcra.New(d.Limit, d.Period, d.Burst)
	if err != nil {
		panic(err)
	}
	top := gcra.Time{NS: d.At.UnixNano() + int64(d.ResetAfter)}
	redis, _ = m.giveBackAt(&modelLimit{p: dp}, key, top, d.Cost, true)
	return false, 0, redis
}

// conforms checks that the admission times, in order, make at most burst
// + d/T + 1 admissions in any interval of length d: for i < j, (j-i)*T -
// (t_j - t_i) <= D. T is a whole number of nanoseconds here.
func conforms(t *testing.T, p gcra.Policy, admit []int64) {
	t.Helper()
	tNS := p.T.NS
	minX := int64(0)
	for j, at := range admit {
		x := int64(j)*tNS - at
		if j > 0 && x-minX > p.D.NS {
			t.Fatalf("admission %d at %d: %d admissions in %v, over burst + d/T + 1", j, at, j+1, time.Duration(at-admit[0]))
		}
		if j == 0 || x < minX {
			minX = x
		}
	}
}

// ideal counts what one GCRA would admit of unit requests at the given
// server times, in order.
func ideal(p gcra.Policy, times []int64) int {
	var tat gcra.Time
	n := 0
	for _, at := range times {
		now := gcra.Time{NS: at}
		ok, after := p.Judge(p.Sub(tat, now), 1, true)
		if ok {
			tat = p.Add(now, after)
			n++
		}
	}
	return n
}

// leaseScenario is a fleet of processes in lease mode, for the model.
type leaseScenario struct {
	name   string
	procs  int
	limit  int
	period time.Duration
	burst  int
	slots  int
	gap    func(r *rand.Rand, proc int, now int64) int64 // time to a process's next request
	steady bool
	// wantAhead: the key has room, and leases are taken ahead.
	wantAhead bool
	rttNS     int64
	runTime   time.Duration
	// changes are the limits every process sets, at once, in order.
	changes []limitChange
}

// limitChange is a SetLimit of the whole fleet, at a time from the start:
// limit a second in bursts of burst.
type limitChange struct {
	at           time.Duration
	limit, burst int
}

// TestLeaseModel runs fleets of processes in lease mode on the model and
// checks that the fleet's admissions conform to the one GCRA, in every
// interval, and that the under-admission against one GCRA fed the same
// requests is within the bound WithLeases states: the slots expired, those
// in hand at the end and less than a lease of room, and, at steady demand,
// no more than (P+1)*slots. In the scenarios whose limit changes, every
// process sets each new limit at once, with slots in hand and leases in
// flight: the admissions conform across the changes (conformsAcross), and
// the under-admission is within the same bound and the slots Redis did
// not take back at the changes.
func TestLeaseModel(t *testing.T) {
	const ms = int64(time.Millisecond)
	scenarios := []leaseScenario{
		{name: "saturated", procs: 4, limit: 1000, period: time.Second, burst: 100, slots: 32, steady: true, rttNS: 200_000,
			gap: func(r *rand.Rand, _ int, _ int64) int64 { return 100_000 + r.Int64N(100_000) }, runTime: 20 * time.Second},
		{name: "below-limit", procs: 4, limit: 1000, period: time.Second, burst: 100, slots: 32, steady: true, wantAhead: true, rttNS: 200_000,
			gap: func(r *rand.Rand, _ int, _ int64) int64 { return 4*ms + r.Int64N(2*ms) }, runTime: 20 * time.Second},
		{name: "uneven", procs: 8, limit: 1000, period: time.Second, burst: 200, slots: 64, steady: true, rttNS: 300_000,
			gap: func(r *rand.Rand, proc int, _ int64) int64 { return int64(proc+1) * (200_000 + r.Int64N(200_000)) }, runTime: 20 * time.Second},
		{name: "bursty", procs: 6, limit: 500, period: time.Second, burst: 50, slots: 16, rttNS: 500_000,
			gap: func(r *rand.Rand, proc int, now int64) int64 {
				if (now/(300*ms)+int64(proc))%3 == 0 {
					return 20*ms + r.Int64N(20*ms) // slow
				}
				return 200_000 + r.Int64N(400_000)
			}, runTime: 20 * time.Second},
		// The limit changes, stricter and looser, while every process
		// holds slots: the admissions of any interval conform to the
		// limits they were made under (see conformsAcross).
		{name: "changing", procs: 4, limit: 1000, period: time.Second, burst: 100, slots: 32, rttNS: 200_000,
			gap: func(r *rand.Rand, _ int, _ int64) int64 { return 100_000 + r.Int64N(100_000) }, runTime: 20 * time.Second,
			changes: []limitChange{{3 * time.Second, 250, 20}, {7 * time.Second, 2000, 200}, {9 * time.Second, 2000, 20},
				{11 * time.Second, 500, 50}, {15 * time.Second, 1000, 100}, {15*time.Second + 30*time.Millisecond, 100, 10}}},
		{name: "changing-below", procs: 4, limit: 1000, period: time.Second, burst: 100, slots: 32, wantAhead: true, rttNS: 200_000,
			gap: func(r *rand.Rand, _ int, _ int64) int64 { return 4*ms + r.Int64N(2*ms) }, runTime: 20 * time.Second,
			changes: []limitChange{{3 * time.Second, 250, 20}, {7 * time.Second, 2000, 200}, {11 * time.Second, 500, 50},
				{15 * time.Second, 1000, 100}}},
		// Bursts, then quiet, and the limit changes often, between large
		// bursts and small ones: a stricter limit often finds a key that
		// has just spent a large burst.
		{name: "changing-bursty", procs: 6, limit: 500, period: time.Second, burst: 200, slots: 16, rttNS: 500_000,
			gap: func(r *rand.Rand, proc int, now int64) int64 {
				if (now/(300*ms)+int64(proc))%3 == 0 {
					return 20*ms + r.Int64N(20*ms) // slow
				}
				return 200_000 + r.Int64N(400_000)
			}, runTime: 20 * time.Second,
			changes: func() []limitChange {
				var c []limitChange
				for i := range 40 {
					at := time.Duration(i)*470*time.Millisecond + 100*time.Millisecond
					if i%2 == 0 {
						c = append(c, limitChange{at, 250, 5 + i%7})
					} else {
						c = append(c, limitChange{at, 1000, 100 + 10*(i%5)})
					}
				}
				return c
			}()},
	}
	for _, sc := range scenarios {
		for _, refunds := range []bool{false, true} {
			name := sc.name
			if refunds {
				name += "/refunds"
			}
			t.Run(name, func(t *testing.T) { runLeaseModel(t, sc, refunds) })
		}
	}
}

// modelEvent is a request, the refund of one or a change of limit, at a
// server time.
type modelEvent struct {
	at     int64 // the server's time
	refund bool
	req    int         // the request's index among the requests
	set    *modelLimit // the limit set, for a change
}

// idealRefunding counts what one GCRA of limit l would admit of the unit
// requests of events, in order, with the refunds of events given back to
// it and the changes of limit made to it.
func idealRefunding(l *modelLimit, events []modelEvent) int {
	var tat gcra.Time
	type charge struct{ tat, cost gcra.Time }
	charged := map[int]charge{} // the TAT after each request admitted, and its cost
	n, req := 0, 0
	for _, ev := range events {
		now := gcra.Time{NS: ev.at}
		p := l.judge(ev.at)
		switch {
		case ev.set != nil:
			l = ev.set
			continue
		case ev.refund:
			if c, ok := charged[ev.req]; ok {
				tat = p.RefundCost(tat, c.tat, now, c.cost, false)
			}
			continue
		}
		ok, after := p.Judge(p.Sub(tat, now), 1, true)
		if ok {
			tat = p.Add(now, after)
			charged[req] = charge{tat, p.T}
			n++
		}
		req++
	}
	return n
}

// weighed is an admission of the model: at the server's time at, of
// weight w, its cost times the emission interval of the limit it was
// made under, whose D is d, in ns.
type weighed struct{ at, w, d int64 }

// weighedOf returns the admission of d, at the server's time at.
func weighedOf(d limits.Decision, at int64) weighed {
	t := int64(d.Period) / int64(d.Limit) // whole in the model
	return weighed{at: at, w: int64(d.Cost) * t, d: int64(d.Burst) * t}
}

// conformsAcross checks the bound WithLeases states across changes of
// limit: in the admissions, in order of time, those from the i-th to the
// j-th weigh at most t_j - t_i + D_j + w_i, where D_j is the D of the
// limit the j-th was made under, the latest of them. With one limit that
// is conforms: (j-i)*T - (t_j - t_i) <= D.
func conformsAcross(t *testing.T, adm []weighed) {
	t.Helper()
	var sum int64 // the weight of the admissions up to the j-th
	minX := int64(0)
	for j, a := range adm {
		sum += a.w
		x := sum - a.at // the i-th's x is sum - at before its weight
		if j > 0 && x-minX > a.d {
			t.Fatalf("admission %d at %d: the admissions since weigh %v over the interval's length + D = %v",
				j, a.at, time.Duration(x-minX), time.Duration(a.d))
		}
		if xi := sum - a.w - a.at; j == 0 || xi < minX {
			minX = xi
		}
	}
}

// runLeaseModel runs the fleet of sc on the model. With refunds, each
// process refunds a quarter of the decisions it made from its slots in
// hand, in random order, and every refund must give the decision's slots
// back to the hand while the slot is still to come, as the process
// reckons it (within a round trip and a microsecond of its time), unless
// the limit changed since: then it is given back in Redis if nothing was
// charged since. With changes of limit, every process sets the limit at
// the same time, between a decision and the lease it took ahead, if any.
func runLeaseModel(t *testing.T, sc leaseScenario, refunds bool) {
	const ms = int64(time.Millisecond)
	p, err := gcra.New(sc.limit, sc.period, sc.burst)
	if err != nil || p.T.Frac != 0 {
		t.Fatal(err, p.T)
	}
	f := newModelFleet(p, sc.rttNS)
	first := f.lim
	r := rand.New(rand.NewPCG(1, uint64(len(sc.name))))
	procs := make([]*modelProc, sc.procs)
	next := make([]int64, sc.procs)
	for i := range procs {
		m := &modelProc{f: f, skew: r.Int64N(1 << 40)}
		m.t = newLeaseTable(&f.lim.p, sc.slots, 16, m.clock, modelLeases{m, f.lim})
		m.t.async = m.later
		procs[i] = m
		next[i] = r.Int64N(ms)
	}
	// owed holds each process's decisions to refund, with the indices of
	// their requests and admissions.
	type owed struct {
		d        limits.Decision
		req, adm int
	}
	owing := make([][]owed, sc.procs)
	var events []modelEvent
	var adm []weighed
	givenBack := map[int]bool{} // the admissions whose slots went back to the hand, or to Redis
	requests, decisions, local := 0, 0, 0
	refunded, given, late, missed, kept := 0, 0, 0, 0, 0
	changes, collected, dropped, skipped := sc.changes, 0, 0, 0
	end := int64(sc.runTime)
	for {
		i := 0
		for j := range next {
			if next[j] < next[i] {
				i = j
			}
		}
		if next[i] >= end {
			break
		}
		m := procs[i]
		f.now = max(f.now, next[i])
		if refunds && len(owing[i]) > 0 && r.IntN(2) == 0 {
			j := r.IntN(len(owing[i]))
			o := owing[i][j]
			owing[i] = slices.Delete(owing[i], j, j+1)
			at := f.server()
			hand, back, redis := m.refund("k", o.d)
			events = append(events, modelEvent{at: at, refund: true, req: o.req})
			refunded++
			ahead := o.d.At.UnixNano() + int64(o.d.ResetAfter) - at // to the decision's slot
			switch {
			case redis:
				given++
				givenBack[o.adm] = true
			case !hand && m.t.p.Limit != o.d.Limit:
				kept++ // of a limit since replaced, and charged since
			case back == o.d.Cost:
				given++
				givenBack[o.adm] = true
				if ahead <= 0 {
					t.Errorf("a refund %v after its slot's time gave it back", time.Duration(-ahead))
				}
			case back != 0:
				t.Fatalf("a refund of cost %d gave back %d slots", o.d.Cost, back)
			case ahead > sc.rttNS+2*int64(time.Microsecond):
				if missed++; missed <= 5 {
					t.Errorf("a refund %v before its slot's time gave nothing back (the run's: %v)", time.Duration(ahead), hand)
				}
			default:
				late++
			}
		}
		events = append(events, modelEvent{at: f.server(), req: requests})
		requests++
		before := f.calls
		f.decided = false
		d, err := m.t.take(context.Background(), "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if f.calls == before {
			local++
		}
		switch {
		case d.Allowed && f.decided:
			adm = append(adm, weighedOf(d, d.At.UnixNano()))
		case d.Allowed:
			if refunds && r.IntN(4) == 0 {
				owing[i] = append(owing[i], owed{d, requests - 1, len(adm)})
			}
			adm = append(adm, weighedOf(d, f.server()))
		}
		decisions++
		if len(changes) > 0 && f.now >= int64(changes[0].at) {
			c := changes[0]
			changes = changes[1:]
			old := f.lim.p
			np, err := gcra.New(c.limit, time.Second, c.burst)
			if err != nil || np.T.Frac != 0 {
				t.Fatal(err, np.T)
			}
			l := f.setLimit(np)
			events = append(events, modelEvent{at: f.server(), set: l})
			for _, pm := range procs {
				c, g := pm.setLimit(l, sc.slots)
				collected += c
				dropped += c - g
			}
			// The skips of the old limit, charged as if spent: up to its
			// D/8 of room, in requests of the new limit.
			skipped += int(old.D.NS/8/np.T.NS) + 1
		}
		m.runPending()
		next[i] = f.now + sc.gap(r, i, f.now)
	}
	// The admissions served: those whose slots were not given back.
	var served []weighed
	for j, a := range adm {
		if !givenBack[j] {
			served = append(served, a)
		}
	}
	slices.SortStableFunc(served, func(a, b weighed) int { return cmp.Compare(a.at, b.at) })
	conformsAcross(t, served)
	var slots, spent, expired, held, returned uint64
	ahead, overHand := 0, 0
	for _, m := range procs {
		s := m.t.stats
		slots += s.slots.Load()
		spent += s.spent.Load()
		expired += s.expired.Load()
		held += uint64(s.unspent.Load())
		returned += s.returned.Load()
		ahead += m.ahead
		overHand += m.overHand
	}
	if slots != spent+expired+returned+held {
		t.Errorf("leased %d slots: spent %d + expired %d + returned %d + in hand %d", slots, spent, expired, returned, held)
	}
	if int(returned) < collected || sc.wantAhead && len(sc.changes) > 0 && collected == 0 {
		t.Errorf("%d slots taken out of the hands at the changes, %d returned", collected, returned)
	}
	if overHand > 0 {
		t.Errorf("%d leases could have left a process more than a lease (%d slots) in hand", overHand, sc.slots)
	}
	if sc.wantAhead && ahead == 0 {
		t.Error("no lease was taken ahead, with slots in hand, at a key with room")
	}
	if refunds && given == 0 {
		t.Error("no refund gave its slot back")
	}
	want := idealRefunding(first, events)
	got := len(adm)
	under := want - got
	bound := uint64((sc.procs+1)*sc.slots + late)
	t.Logf("%d decisions, %d local, %d calls (%.1f per 1000, %d leases ahead); admitted %d, one GCRA %d: under-admission %d; expired %d, in hand at the end %d; %d refunds, %d given back, %d too late, %d kept across a change; (P+1)*slots + too late %d; %d changes, %d slots returned at them, %d of them dropped, %d more leased in flight; skips up to %d",
		decisions, local, f.calls, 1000*float64(f.calls)/float64(decisions), ahead, got, want, under, expired, held, refunded, given, late, kept, bound,
		len(sc.changes), collected, dropped, int(returned)-collected, skipped)
	// Beyond the slots lost and in hand, less than a lease of room may be
	// left while processes wait for a full lease, and a refund the process
	// reckoned too late may leave the one GCRA some room; at a change,
	// the slots Redis did not take back are lost, and so is the room the
	// old limit's skips held.
	lost := expired + held + uint64(sc.slots+late+kept+dropped+skipped)
	if under > 0 && uint64(under) > lost {
		t.Errorf("under-admission %d beyond the slots expired and in hand (%d) + slots + refunds too late or kept (%d) + dropped at changes (%d) + skips (%d)",
			under, expired+held, late+kept, dropped, skipped)
	}
	if sc.steady && uint64(max(under, 0)) > bound {
		t.Errorf("under-admission %d at steady demand beyond (P+1)*slots + refunds too late = %d", under, bound)
	}
}

// TestLeaseRefund checks, on the model, that a lease's decision given back
// returns its slot to the hand, and that the fleet still conforms when
// refunds come in any order.
func TestLeaseRefund(t *testing.T) {
	p, _ := gcra.New(1000, time.Second, 100)
	f := newModelFleet(p, 100_000)
	m := &modelProc{f: f}
	m.t = newLeaseTable(&f.lim.p, 8, 16, m.clock, m)
	ctx := context.Background()
	refunded := 0
	type admission struct {
		d  limits.Decision
		at int64
	}
	var kept []admission
	admitted := map[int64]int{} // admissions by time
	r := rand.New(rand.NewPCG(2, 3))
	for i := range 20000 {
		f.now += 50_000 + r.Int64N(50_000)
		f.decided = false
		d, _ := m.t.take(ctx, "k", 1)
		if d.Allowed && !f.decided {
			kept = append(kept, admission{d, f.server()})
			admitted[f.server()]++
		}
		if d.Allowed && f.decided {
			admitted[d.At.UnixNano()]++
		}
		if len(kept) > 0 && i%3 == 0 { // give one back, not always the latest
			j := r.IntN(len(kept))
			a := kept[j]
			spent := m.t.stats.spent.Load()
			if m.t.refund("k", a.d) && m.t.stats.spent.Load() == spent-1 {
				admitted[a.at]-- // given back: not served
				refunded++
			}
			kept = append(kept[:j], kept[j+1:]...)
		}
	}
	for at, n := range admitted {
		for range n {
			f.admit = append(f.admit, at)
		}
	}
	slices.Sort(f.admit)
	t.Logf("%d admitted, %d given back", len(f.admit), refunded)
	if refunded == 0 {
		t.Fatal("nothing given back")
	}
	if m.t.stats.spent.Load() == 0 {
		t.Fatal("nothing spent")
	}
	conforms(t, p, f.admit)
}

// downProc is a modelProc whose lease calls fail once down is set, as
// with Redis stopped.
type downProc struct {
	*modelProc
	down         bool
	failedLeases int // with slots in hand
	aheadErrs    int // reported by aheadFailed
}

var errDown = errors.New("redis is down")

func (d *downProc) lease(ctx context.Context, key string, want int, skip int64) (leaseReply, error) {
	if d.down {
		if d.t.stats.unspent.Load() > 0 {
			d.failedLeases++
		}
		return leaseReply{}, errDown
	}
	return d.modelProc.lease(ctx, key, want, skip)
}

func (d *downProc) decide(ctx context.Context, key string, n int) (limits.Decision, error) {
	if d.down {
		return limits.Decision{}, errDown
	}
	return d.modelProc.decide(ctx, key, n)
}

func (d *downProc) failed(_ string, n int, err error) (limits.Decision, error) {
	return limits.Decision{Cost: n, Reason: limits.ReasonUnavailable}, err
}

func (d *downProc) aheadFailed(error) { d.aheadErrs++ }

// TestLeaseAheadFails checks that a lease taken ahead that fails stops
// the leasing ahead: the slots in hand are spent with no call each, and
// only once they are gone does a request ask Redis, and fail.
func TestLeaseAheadFails(t *testing.T) {
	p, _ := gcra.New(1000, time.Second, 100)
	f := newModelFleet(p, 100_000)
	d := &downProc{modelProc: &modelProc{f: f}}
	d.t = newLeaseTable(&f.lim.p, 32, 16, d.clock, d)
	d.t.async = d.later
	ctx := context.Background()
	step := func() (limits.Decision, error) {
		f.now += 2_000_000 // 500 a second, half the limit: the key has room
		dec, err := d.t.take(ctx, "k", 1)
		d.runPending()
		return dec, err
	}
	for range 200 {
		if dec, err := step(); err != nil || !dec.Allowed {
			t.Fatalf("before Redis went down: %+v, %v", dec, err)
		}
	}
	if d.ahead == 0 {
		t.Fatal("no lease taken ahead before Redis went down")
	}
	d.down = true
	allowed := 0
	for range 200 {
		dec, err := step()
		if err != nil {
			break
		}
		if !dec.Allowed {
			t.Fatalf("refused with slots in hand: %+v", dec)
		}
		allowed++
	}
	if allowed == 0 {
		t.Error("no decision from the slots in hand once Redis was down")
	}
	if d.failedLeases != 1 {
		t.Errorf("%d lease calls failed while slots were in hand, want 1: the lease taken ahead, whose failure stops leasing ahead", d.failedLeases)
	}
	if d.t.stats.unspent.Load() != 0 {
		t.Errorf("%d slots in hand when a request first failed, want 0", d.t.stats.unspent.Load())
	}
	if d.aheadErrs != d.failedLeases {
		t.Errorf("%d failures of leases taken ahead reported, of %d", d.aheadErrs, d.failedLeases)
	}
}

// TestLeaseSweepRunAhead checks that a full lease table reclaims the
// entry of a key that went quiet holding a run leased ahead, once that
// run's time has passed too, and counts its slots expired.
func TestLeaseSweepRunAhead(t *testing.T) {
	p, _ := gcra.New(1000, time.Second, 100)
	f := newModelFleet(p, 100_000)
	m := &modelProc{f: f}
	m.t = newLeaseTable(&f.lim.p, 32, 1, m.clock, m)
	m.t.async = m.later
	ctx := context.Background()
	entry := func(key string) *leaseEntry {
		s := &m.t.shards[maphash.String(m.t.seed, key)%leaseShards]
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.m[key]
	}
	queued := false
	for range 1000 {
		f.now += 2_000_000
		if _, err := m.t.take(ctx, "a", 1); err != nil {
			t.Fatal(err)
		}
		m.runPending()
		if e := entry("a"); e != nil && e.queued.k > 0 {
			queued = true
			break
		}
	}
	if !queued {
		t.Fatal("key a never held a run leased ahead")
	}
	// A new key of a's shard, where a new key makes room.
	b := "b"
	for i := 0; maphash.String(m.t.seed, b)%leaseShards != maphash.String(m.t.seed, "a")%leaseShards; i++ {
		b = fmt.Sprintf("b%d", i)
	}
	f.now += int64(time.Second) // ten burst times: every slot of a's is past
	if _, err := m.t.take(ctx, b, 1); err != nil {
		t.Fatal(err)
	}
	if entry(b) == nil || entry("a") != nil {
		t.Errorf("the table of one key holds a: %v, %s: %v; want %[2]s only", entry("a") != nil, b, entry(b) != nil)
	}
	s := m.t.stats
	if s.unspent.Load() != 0 || s.slots.Load() != s.spent.Load()+s.expired.Load() {
		t.Errorf("leased %d = spent %d + expired %d + in hand %d, want nothing in hand", s.slots.Load(), s.spent.Load(), s.expired.Load(), s.unspent.Load())
	}
}
