package limits

import "hash/maphash"

// Inflight counts events in progress per key, such as open requests or
// connections per client: Incr counts an event in and returns a Guard whose
// Close counts it out.
//
// Counts are count-min estimates (see Estimator), so keys that collide in
// every row are counted together and a count can be too high, never too low:
// Inflight is the approximate building block, for a count whose error the
// caller accepts (see Sizing to bound it). A limit that users read as
// exact, such as httplimit's MaxInFlightPerClient, counts each client
// exactly instead. Inflight counts with a plain Estimator: its counts go
// down as guards close, which conservative update cannot do.
// All methods are safe for concurrent use, take no locks and allocate
// nothing. The zero value is not usable; call NewInflight.
type Inflight struct {
	est *Estimator
}

// NewInflight returns an Inflight of 4 hashes x 8192 slots (256 KiB), or
// of the size a Sizing option gives. It panics if the Sizing is not valid
// or is Conservative, as counts in progress go down, or if an option does
// not apply to an Inflight.
func NewInflight(opts ...Option) *Inflight {
	var o options
	if err := collect(&o, opts, optSizing, "an Inflight"); err != nil {
		panic("limits: " + err.Error())
	}
	if o.sizing.Conservative {
		panic("limits: an Inflight cannot be conservative: its counts go down")
	}
	hashes, slots := o.sizing.size([2]int{4, 8192})
	return &Inflight{est: newEstimator(hashes, slots, maphash.MakeSeed())}
}

// Size returns the memory held by in's counters, in bytes.
func (in *Inflight) Size() int { return in.est.Size() }

// Hash returns the hash of a key held as bytes, for IncrHash.
func (in *Inflight) Hash(key []byte) uint64 { return in.est.Hash(key) }

// Incr counts n events in for key and returns a Guard that counts them out,
// with key's estimated count, these events included. Call Close on the Guard,
// typically with defer, when the events end.
//
// n should be positive; n == 0 returns a Guard that gives back nothing, and a
// negative n makes the count too low until the Guard is closed.
func (in *Inflight) Incr(key string, n int64) (Guard, int64) {
	return in.IncrHash(maphash.String(in.est.seed, key), n)
}

// IncrHash is Incr for a key hashed with Hash.
func (in *Inflight) IncrHash(h uint64, n int64) (Guard, int64) {
	return Guard{est: in.est, h: h, n: n}, in.est.add(h, n)
}

// Get returns key's estimated count of events in progress.
func (in *Inflight) Get(key string) int64 {
	return in.est.Get(key)
}

// Guard holds the events one Inflight.Incr counted in, and gives them back
// when closed.
//
// A Guard is a value: keep it in one variable and call its methods through
// that variable (defer g.Close() does). Close then gives back exactly what
// Incr and Guard.Incr added, once, however many times it is called. A copy
// made before Close would give the same events back a second time, and go
// vet reports such copies. A Guard is not safe for concurrent use. The zero
// Guard holds nothing and its methods do nothing.
type Guard struct {
	_   noCopy
	est *Estimator // nil once closed
	h   uint64
	n   int64 // events held, given back by Close
}

// Incr counts n more events in for the Guard's key and returns the key's
// estimated count. Close gives these back too. After Close, Incr adds
// nothing and returns 0.
func (g *Guard) Incr(n int64) int64 {
	if g.est == nil {
		return 0
	}
	g.n += n
	return g.est.add(g.h, n)
}

// Held returns the number of events the Guard holds: what Close will give
// back, or 0 once closed.
func (g *Guard) Held() int64 {
	if g.est == nil {
		return 0
	}
	return g.n
}

// Close counts out every event the Guard holds. Calls after the first do
// nothing.
func (g *Guard) Close() {
	if g.est == nil {
		return
	}
	g.est.add(g.h, -g.n)
	g.est = nil
}

// noCopy makes go vet's copylocks check report copies of the struct that
// holds it.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}
