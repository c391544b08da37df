package limits

import (
	"errors"
	"fmt"
	"math"
)

// Sizing states how accurate a count-min sketch must be, in terms a caller
// knows: how many distinct keys it will count, how far an estimate may be too
// high, and how often that may fail. Its Dims method turns this into hashes
// and slots; NewEstimatorSized, NewConservativeEstimatorSized, NewRateSized
// and NewConservativeRateSized build sketches of that size.
//
// # The bounds
//
// Let N be the number of events counted (in a Rate, in one window), K the
// number of distinct keys among them, and d and w the sketch's hashes and
// slots. For any one key, with the rows placing keys independently:
//
//   - The standard count-min bound: the estimate is too high by at most
//     e*N/w (e = 2.718...) with probability at least 1 - e^-d. Each row adds
//     to the key the events of the other keys in its cell, N/w on average;
//     by Markov's inequality a row adds more than e times that with
//     probability at most 1/e, and the estimate, the smallest row, does so
//     only if every row does.
//   - The same argument over keys rather than events: each row puts (K-1)/w
//     other keys in the key's cell on average, so with w >= e*(K-1) the
//     estimate is exact with probability at least 1 - e^-d. Beyond that many
//     slots, more memory buys nothing at this failure probability, however
//     many events there are.
//
// Dims picks d = ceil(ln(1/Failure)) and the smallest w that meets either
// bound for the tolerance given. As d is rounded up, the factor e above
// becomes Failure^(-1/d), which is at most e. Both bounds are loose: on real
// traffic far fewer keys miss the tolerance than Failure allows, and a
// conservative sketch does better still, as its estimates are never above a
// plain sketch's (see ConservativeEstimator).
//
// The zero Sizing is not valid: set Keys, a tolerance, or both.
type Sizing struct {
	// Keys is the number of distinct keys expected: per window for a Rate,
	// between two calls of Reset for an Estimator. 0 means unknown; the
	// size then follows from the tolerance alone. With Keys and no
	// tolerance, the sketch is sized for exact counts.
	Keys int

	// MaxOverFraction is the tolerated over-count as a fraction of the
	// events counted, in [0, 1]: 0.001 lets an estimate be too high by a
	// thousandth of the window's events. 0 means no fractional tolerance.
	MaxOverFraction float64

	// MaxOver is the tolerated over-count in events; 0 asks for exact
	// counts. It is used only together with Events.
	MaxOver int64

	// Events is the number of events expected (per window for a Rate), N in
	// the bounds; it gives MaxOver a meaning. 0 means no absolute tolerance.
	// Set Events or MaxOverFraction, not both.
	Events int64

	// Failure is the probability, in (0, 1), that a given key's estimate is
	// off by more than the tolerance. 0 means 0.02, which gives 4 hashes.
	Failure float64
}

// defaultFailure is the Failure of a Sizing that leaves it 0: it gives
// ceil(ln 50) = 4 hashes, the default of NewRate.
const defaultFailure = 0.02

// Dims returns the hashes and slots of the smallest count-min sketch that
// meets s (see Sizing for the bounds it relies on), or an error, prefixed
// "limits: ", when s is not valid or the sketch would take more than
// 1 GiB (12 million keys counted exactly at the default Failure, 3.5
// million at a Failure of 1e-6).
// It allocates nothing unless it fails.
func (s Sizing) Dims() (hashes, slots int, err error) {
	failure := s.Failure
	switch {
	case s.Keys < 0:
		return 0, 0, fmt.Errorf("limits: Sizing.Keys must be >= 0, got %d", s.Keys)
	case s.Events < 0:
		return 0, 0, fmt.Errorf("limits: Sizing.Events must be >= 0, got %d", s.Events)
	case s.MaxOver < 0:
		return 0, 0, fmt.Errorf("limits: Sizing.MaxOver must be >= 0, got %d", s.MaxOver)
	case !(s.MaxOverFraction >= 0 && s.MaxOverFraction <= 1):
		return 0, 0, fmt.Errorf("limits: Sizing.MaxOverFraction must be in [0, 1], got %v", s.MaxOverFraction)
	case !(failure >= 0 && failure < 1):
		return 0, 0, fmt.Errorf("limits: Sizing.Failure must be in [0, 1), got %v", failure)
	case s.MaxOverFraction > 0 && s.Events > 0:
		return 0, 0, errors.New("limits: Sizing takes MaxOverFraction or Events with MaxOver, not both")
	case s.MaxOver > 0 && s.Events == 0:
		return 0, 0, errors.New("limits: Sizing.MaxOver needs Sizing.Events")
	case s.Keys == 0 && s.MaxOverFraction == 0 && s.Events == 0:
		return 0, 0, errors.New("limits: Sizing needs Keys, a tolerance, or both")
	}
	if failure == 0 {
		failure = defaultFailure
	}

	// The small allowance keeps ln(1/Failure) = 4 exactly, give or take
	// rounding, at 4 hashes.
	logInv := -math.Log(failure)
	d := max(1, math.Ceil(logInv-1e-9))
	// Each row must exceed the tolerance with probability at most q^-1, so
	// that all d rows do so with probability at most failure.
	q := math.Exp(logInv / d)

	w := math.Inf(1)
	if s.Keys > 0 {
		w = q * float64(s.Keys-1)
	}
	switch {
	case s.MaxOverFraction > 0:
		w = min(w, q/s.MaxOverFraction)
	case s.Events > 0:
		// Counts are whole: more than MaxOver means at least MaxOver+1.
		w = min(w, q*float64(s.Events)/(float64(s.MaxOver)+1))
	}
	w = max(1, math.Ceil(w-1e-9))
	if w > float64(maxCells)/d {
		return 0, 0, fmt.Errorf("limits: Sizing needs %.0f hashes x %.0f slots, more than the 1 GiB a sketch may take", d, w)
	}
	return int(d), int(w), nil
}

// mustDims returns s.Dims(), panicking with its error: the constructors that
// take a Sizing treat an invalid one as a programming error, as NewEstimator
// does a negative size.
func (s Sizing) mustDims() (hashes, slots int) {
	hashes, slots, err := s.Dims()
	if err != nil {
		panic(err.Error())
	}
	return hashes, slots
}

// NewEstimatorSized returns an Estimator sized by s (see Sizing.Dims). It
// panics, with the error Dims returns, if s is not valid.
func NewEstimatorSized(s Sizing) *Estimator {
	return NewEstimator(s.mustDims())
}
