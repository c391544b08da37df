package limits

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// mustPanic runs f and returns the message of its panic, failing the test if
// f returns normally.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic")
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

func TestNewEstimatorPanics(t *testing.T) {
	tests := []struct {
		hashes, slots int
		want          string
	}{
		{0, 10, "limits: hashes must be >= 1, got 0"},
		{-1, 10, "limits: hashes must be >= 1, got -1"},
		{4, 0, "limits: slots must be >= 1, got 0"},
		{4, -5, "limits: slots must be >= 1, got -5"},
		{math.MaxInt / 2, 4, "limits: 4611686018427387903 hashes x 4 slots need more than the 1 GiB a sketch may take"},
		{4, 1 << 40, "limits: 4 hashes x 1099511627776 slots need more than the 1 GiB a sketch may take"},
		{1, 1<<27 + 1, "limits: 1 hashes x 134217729 slots need more than the 1 GiB a sketch may take"},
	}
	for _, tt := range tests {
		got := mustPanic(t, func() { NewEstimator(tt.hashes, tt.slots) })
		if got != tt.want {
			t.Errorf("NewEstimator(%d, %d) panicked with %q, want %q", tt.hashes, tt.slots, got, tt.want)
		}
	}
}

func TestEstimatorExactWithoutCollisions(t *testing.T) {
	e := NewEstimator(4, 4096)
	if got := e.Incr("a", 3); got != 3 {
		t.Errorf("Incr(a, 3) = %d, want 3", got)
	}
	if got := e.Incr("a", 2); got != 5 {
		t.Errorf("Incr(a, 2) = %d, want 5", got)
	}
	if got := e.Incr("", 7); got != 7 { // the empty key is a key like any other
		t.Errorf("Incr(\"\", 7) = %d, want 7", got)
	}
	e.Decr("a", 1)
	if got := e.Get("a"); got != 4 {
		t.Errorf("Get(a) after Decr = %d, want 4", got)
	}
	if got := e.Get("b"); got != 0 {
		t.Errorf("Get(b) = %d, want 0", got)
	}
	if got := e.Incr("a", -10); got != -6 { // negative deltas are allowed
		t.Errorf("Incr(a, -10) = %d, want -6", got)
	}
	e.Reset()
	for _, k := range []string{"a", ""} {
		if got := e.Get(k); got != 0 {
			t.Errorf("Get(%q) after Reset = %d, want 0", k, got)
		}
	}
	if got, want := e.Size(), 4*4096*8; got != want {
		t.Errorf("Size() = %d, want %d", got, want)
	}
}

// TestEstimatorNeverUnderCounts compares a sketch small enough to collide
// often against exact counts, under non-negative deltas.
func TestEstimatorNeverUnderCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range [][2]int{{1, 8}, {2, 16}, {4, 64}, {3, 1000}} {
		e := NewEstimator(size[0], size[1])
		exact := map[string]int64{}
		collided := false
		for range 20000 {
			k := fmt.Sprintf("k%d", rng.IntN(500))
			d := rng.Int64N(5)
			exact[k] += d
			got := e.Incr(k, d)
			if got < exact[k] {
				t.Fatalf("%dx%d: Incr(%s) = %d, below the true count %d", size[0], size[1], k, got, exact[k])
			}
			collided = collided || got > exact[k]
		}
		for k, want := range exact {
			if got := e.Get(k); got < want {
				t.Fatalf("%dx%d: Get(%s) = %d, below the true count %d", size[0], size[1], k, got, want)
			}
		}
		if !collided && size[1] < 100 {
			t.Errorf("%dx%d: 500 keys never collided; the sketch is not being exercised", size[0], size[1])
		}
	}
}

// TestEstimatorConcurrentNeverUnderCounts runs many goroutines against a
// locked map and checks every estimate against it afterwards.
func TestEstimatorConcurrentNeverUnderCounts(t *testing.T) {
	e := NewEstimator(3, 128)
	var mu sync.Mutex
	exact := map[string]int64{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 2000 {
				k := fmt.Sprintf("k%d", rng.IntN(300))
				d := rng.Int64N(3) + 1
				mu.Lock()
				exact[k] += d
				mu.Unlock()
				if got := e.Incr(k, d); got < d {
					t.Errorf("Incr(%s, %d) = %d, below the delta just added", k, d, got)
					return
				}
			}
		})
	}
	wg.Wait()
	for k, want := range exact {
		if got := e.Get(k); got < want {
			t.Fatalf("Get(%s) = %d, below the true count %d", k, got, want)
		}
	}
}

func TestEstimatorWrapsWithoutPanic(t *testing.T) {
	e := NewEstimator(2, 8)
	if got := e.Incr("k", math.MaxInt64); got != math.MaxInt64 {
		t.Fatalf("Incr(MaxInt64) = %d", got)
	}
	if got := e.Incr("k", 1); got != math.MinInt64 {
		t.Errorf("Incr past MaxInt64 = %d, want it to wrap to MinInt64", got)
	}
	if got := e.Get("k"); got != math.MinInt64 {
		t.Errorf("Get after wrap = %d, want MinInt64", got)
	}
}

// TestEstimatorOneHashPerCall checks that a key's cells in every row derive
// from one 64-bit hash: the Hash variants reach the same cells as the string
// ones.
func TestEstimatorOneHashPerCall(t *testing.T) {
	e := NewEstimator(4, 4096)
	for i := range 100 {
		k := fmt.Sprintf("key-%d", i)
		e.Incr(k, int64(i+1))
		if got := e.GetHash(e.Hash([]byte(k))); got != int64(i+1) {
			t.Fatalf("GetHash(Hash(%s)) = %d, want %d", k, got, i+1)
		}
		if got := e.IncrHash(e.Hash([]byte(k)), 1); got != int64(i+2) {
			t.Fatalf("IncrHash(Hash(%s)) = %d, want %d", k, got, i+2)
		}
		e.IncrHash(e.Hash([]byte(k)), -2)
		if got := e.Get(k); got != int64(i) {
			t.Fatalf("Get(%s) after IncrHash(-2) = %d, want %d", k, got, i)
		}
	}
}

// TestEstimatorSeedsDifferPerInstance finds keys that share their cell in a
// one-row sketch and checks that fresh sketches place them apart.
func TestEstimatorSeedsDifferPerInstance(t *testing.T) {
	e := NewEstimator(1, 64)
	e.Incr("victim", 1)
	var twin string
	for i := 0; twin == ""; i++ {
		if k := fmt.Sprintf("k%d", i); e.Get(k) == 1 {
			twin = k
		}
	}
	together := 0
	for range 20 {
		f := NewEstimator(1, 64)
		f.Incr("victim", 1)
		if f.Get(twin) == 1 {
			together++
		}
	}
	// With placements independent per instance they share a cell 1 time in
	// 64; with a fixed placement, every time.
	if together > 5 {
		t.Errorf("keys colliding in one Estimator collided in %d of 20 others", together)
	}
	if e.Hash([]byte("victim")) == NewEstimator(1, 64).Hash([]byte("victim")) {
		t.Error("two Estimators hash a key alike")
	}
}

// xxhashTwin returns a 16-byte printable key whose unseeded XXH64 equals that
// of target, by running the hash backwards from its output.
func xxhashTwin(target string) string {
	const (
		p1 uint64 = 11400714785074694791
		p2 uint64 = 14029467366897019727
		p3 uint64 = 1609587929392839161
		p4 uint64 = 9650029242287828579
		p5 uint64 = 2870177450012600261
	)
	inv := func(a uint64) uint64 { // inverse of odd a modulo 2^64
		x := a
		for range 6 {
			x *= 2 - a*x
		}
		return x
	}
	unshift := func(h uint64, s uint) uint64 { // inverse of h ^= h >> s
		x := h
		for range 64 {
			x = h ^ x>>s
		}
		return x
	}
	h := xxhash.Sum64String(target)
	h = unshift(h, 32)
	h *= inv(p3)
	h = unshift(h, 29)
	h *= inv(p2)
	h = unshift(h, 33)
	// h is the state after the last 8-byte lane; solve for that lane after
	// a chosen first lane.
	for i := 0; ; i++ {
		prefix := fmt.Sprintf("k%07d", i)
		s := p5 + 16
		s ^= bits.RotateLeft64(binary.LittleEndian.Uint64([]byte(prefix))*p2, 31) * p1
		s = bits.RotateLeft64(s, 27)*p1 + p4
		k := bits.RotateLeft64((h-p4)*inv(p1), -27) ^ s
		var lane [8]byte
		binary.LittleEndian.PutUint64(lane[:], bits.RotateLeft64(k*inv(p1), -31)*inv(p2))
		if strings.IndexFunc(string(lane[:]), func(r rune) bool { return r < '!' || r > '~' }) < 0 {
			return prefix + string(lane[:])
		}
	}
}

// TestEstimatorResistsCraftedCollisions shows why keys are hashed under a
// secret seed: a key crafted to collide with another under a public hash is
// counted apart.
func TestEstimatorResistsCraftedCollisions(t *testing.T) {
	victim := "203.0.113.7"
	twin := xxhashTwin(victim)
	if xxhash.Sum64String(twin) != xxhash.Sum64String(victim) {
		t.Fatalf("crafted key %q does not collide under xxhash", twin)
	}
	e := NewEstimator(4, 1024)
	e.Incr(twin, 1000)
	if got := e.Get(victim); got != 0 {
		t.Errorf("Get(%q) = %d after counting only %q", victim, got, twin)
	}
}

func TestEstimatorAllocs(t *testing.T) {
	e := NewEstimator(4, 1024)
	b := []byte("client-000123")
	allocs := testing.AllocsPerRun(1000, func() {
		e.Incr("client-000123", 1)
		e.Get("client-000123")
		e.Decr("client-000123", 1)
		e.IncrHash(e.Hash(b), 1)
	})
	if allocs != 0 {
		t.Errorf("Incr, Get, Decr and IncrHash allocate %v times per run, want 0", allocs)
	}
}
