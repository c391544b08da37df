package redislimit

import (
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
	p       gcra.Policy
	now     int64 // the true time, in ns; the server's clock is now + srvOff
	rtt     int64
	tat     map[string]gcra.Time
	admit   []int64 // the server's time of each admission, in order
	calls   int
	decided bool // the latest decision was made by decide
}

const srvOff = 1_767_225_600_000_000_000 // the server's clock: 2026-01-01

func (f *modelFleet) server() int64 { return f.now + srvOff }

// time reads the server's clock as TIME does, to the microsecond.
func (f *modelFleet) time() gcra.Time { return gcra.Time{NS: f.server() / 1000 * 1000} }

func (f *modelFleet) ahead(key string, now gcra.Time) gcra.Time {
	a := f.p.Sub(f.tat[key], now)
	switch {
	case !gcra.Positive(a):
		return gcra.Time{}
	case gcra.Less(f.p.D, a):
		return f.p.D
	}
	return a
}

// modelProc is one process of a modelFleet: its leaseBackend.
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

func (m *modelProc) decide(_ context.Context, key string, n int) (limits.Decision, error) {
	f := m.f
	f.calls++
	f.decided = true
	f.now += f.rtt / 2
	now := f.time()
	allowed, after := f.p.Judge(f.ahead(key, now), n, true)
	if allowed {
		f.tat[key] = f.p.Add(now, after)
	}
	res := f.p.Report(allowed, after, n)
	f.now += f.rtt - f.rtt/2
	d := limits.Decision{Allowed: allowed, Limit: f.p.Limit, Period: f.p.Period, Burst: f.p.Burst, Cost: n,
		Remaining: res.Remaining, ResetAfter: res.ResetAfter, At: time.Unix(0, now.NS)}
	if !allowed {
		d.Reason, d.RetryAfter = limits.ReasonRateLimited, res.RetryAfter
	}
	return d, nil
}

func (m *modelProc) lease(_ context.Context, key string, want int, skip int64) (leaseReply, error) {
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
	a := f.ahead(key, now)
	if gcra.Less(a, gcra.Time{NS: skip}) {
		a = gcra.Time{NS: skip}
	}
	k := 0
	for k < want && !gcra.Less(f.p.D, f.p.Add(a, f.p.Cost(k+1))) {
		k++
	}
	if k > 0 {
		f.tat[key] = f.p.Add(f.p.Add(now, a), f.p.Cost(k))
	}
	f.now += f.rtt - f.rtt/2
	return leaseReply{k: k, ahead: a, now: now.NS}, nil
}

func (m *modelProc) giveBack(_ context.Context, key string, top gcra.Time, n int, rounded bool) (bool, error) {
	f := m.f
	f.calls++
	t := f.tat[key]
	match := !gcra.Less(top, t) && (!gcra.Less(t, top) || rounded && gcra.Less(f.p.Sub(top, gcra.Time{NS: 1}), t))
	if match {
		f.tat[key] = f.p.Sub(t, f.p.Cost(n))
	}
	return match, nil
}

func (m *modelProc) failed(string, int, error) (limits.Decision, error) {
	panic("the model does not fail")
}

func (m *modelProc) aheadFailed(error) { panic("the model does not fail") }

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
}

// TestLeaseModel runs fleets of processes in lease mode on the model and
// checks that the fleet's admissions conform to the one GCRA, in every
// interval, and that the under-admission against one GCRA fed the same
// requests is within the bound WithLeases states: the slots expired, those
// in hand at the end and less than a lease of room, and, at steady demand,
// no more than (P+1)*slots.
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

// modelEvent is a request, or the refund of one, at a server time.
type modelEvent struct {
	at     int64 // the server's time
	refund bool
	req    int // the request's index among the requests
}

// idealRefunding counts what one GCRA would admit of the unit requests
// of events, in order, with the refunds of events given back to it.
func idealRefunding(p gcra.Policy, events []modelEvent) int {
	var tat gcra.Time
	charged := map[int]gcra.Time{} // the TAT after each request admitted
	n, req := 0, 0
	for _, ev := range events {
		now := gcra.Time{NS: ev.at}
		if ev.refund {
			if c, ok := charged[ev.req]; ok {
				tat = p.Refund(tat, c, now, 1, false)
			}
			continue
		}
		ok, after := p.Judge(p.Sub(tat, now), 1, true)
		if ok {
			tat = p.Add(now, after)
			charged[req] = tat
			n++
		}
		req++
	}
	return n
}

// runLeaseModel runs the fleet of sc on the model. With refunds, each
// process refunds a quarter of the decisions it made from its slots in
// hand, in random order, and every refund must give the decision's slots
// back to the hand while the slot is still to come, as the process
// reckons it (within a round trip and a microsecond of its time).
func runLeaseModel(t *testing.T, sc leaseScenario, refunds bool) {
	const ms = int64(time.Millisecond)
	p, err := gcra.New(sc.limit, sc.period, sc.burst)
	if err != nil || p.T.Frac != 0 {
		t.Fatal(err, p.T)
	}
	f := &modelFleet{p: p, rtt: sc.rttNS, tat: map[string]gcra.Time{}}
	r := rand.New(rand.NewPCG(1, uint64(len(sc.name))))
	procs := make([]*modelProc, sc.procs)
	next := make([]int64, sc.procs)
	for i := range procs {
		m := &modelProc{f: f, skew: r.Int64N(1 << 40)}
		m.t = newLeaseTable(&f.p, sc.slots, 16, m.clock, m)
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
	givenBack := map[int]bool{} // the admissions whose slots went back to the hand
	requests, decisions, local := 0, 0, 0
	refunded, given, late, missed := 0, 0, 0, 0
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
			spent := m.t.stats.spent.Load()
			ok := m.t.refund("k", o.d)
			back := spent - m.t.stats.spent.Load()
			events = append(events, modelEvent{at: at, refund: true, req: o.req})
			refunded++
			ahead := o.d.At.UnixNano() + int64(o.d.ResetAfter) - at // to the decision's slot
			switch {
			case back == uint64(o.d.Cost):
				given++
				givenBack[o.adm] = true
				if ahead <= 0 {
					t.Errorf("a refund %v after its slot's time gave it back", time.Duration(-ahead))
				}
			case back != 0:
				t.Fatalf("a refund of cost %d gave back %d slots", o.d.Cost, back)
			case ahead > sc.rttNS+2*int64(time.Microsecond):
				if missed++; missed <= 5 {
					t.Errorf("a refund %v before its slot's time gave nothing back (the run's: %v)", time.Duration(ahead), ok)
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
			f.admit = append(f.admit, d.At.UnixNano())
		case d.Allowed:
			if refunds && r.IntN(4) == 0 {
				owing[i] = append(owing[i], owed{d, requests - 1, len(f.admit)})
			}
			f.admit = append(f.admit, f.server())
		}
		decisions++
		m.runPending()
		next[i] = f.now + sc.gap(r, i, f.now)
	}
	// The admissions served: those whose slots were not given back.
	var served []int64
	for j, at := range f.admit {
		if !givenBack[j] {
			served = append(served, at)
		}
	}
	slices.Sort(served)
	conforms(t, p, served)
	var slots, spent, expired, held uint64
	ahead, overHand := 0, 0
	for _, m := range procs {
		s := &m.t.stats
		slots += s.slots.Load()
		spent += s.spent.Load()
		expired += s.expired.Load()
		held += uint64(s.unspent.Load())
		ahead += m.ahead
		overHand += m.overHand
	}
	if slots != spent+expired+held {
		t.Errorf("leased %d slots: spent %d + expired %d + in hand %d", slots, spent, expired, held)
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
	want := idealRefunding(p, events)
	got := len(f.admit)
	under := want - got
	bound := uint64((sc.procs+1)*sc.slots + late)
	t.Logf("%d decisions, %d local, %d calls (%.1f per 1000, %d leases ahead); admitted %d, one GCRA %d: under-admission %d; expired %d, in hand at the end %d; %d refunds, %d given back, %d too late; (P+1)*slots + too late %d",
		decisions, local, f.calls, 1000*float64(f.calls)/float64(decisions), ahead, got, want, under, expired, held, refunded, given, late, bound)
	// Beyond the slots lost and in hand, less than a lease of room may be
	// left while processes wait for a full lease, and a refund the process
	// reckoned too late may leave the one GCRA some room.
	if under > 0 && uint64(under) > expired+held+uint64(sc.slots+late) {
		t.Errorf("under-admission %d beyond the slots expired and in hand (%d) + slots + refunds too late (%d)", under, expired+held, late)
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
	f := &modelFleet{p: p, rtt: 100_000, tat: map[string]gcra.Time{}}
	m := &modelProc{f: f}
	m.t = newLeaseTable(&f.p, 8, 16, m.clock, m)
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
	f := &modelFleet{p: p, rtt: 100_000, tat: map[string]gcra.Time{}}
	d := &downProc{modelProc: &modelProc{f: f}}
	d.t = newLeaseTable(&f.p, 32, 16, d.clock, d)
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
	f := &modelFleet{p: p, rtt: 100_000, tat: map[string]gcra.Time{}}
	m := &modelProc{f: f}
	m.t = newLeaseTable(&f.p, 32, 1, m.clock, m)
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
	s := &m.t.stats
	if s.unspent.Load() != 0 || s.slots.Load() != s.spent.Load()+s.expired.Load() {
		t.Errorf("leased %d = spent %d + expired %d + in hand %d, want nothing in hand", s.slots.Load(), s.spent.Load(), s.expired.Load(), s.unspent.Load())
	}
}
