package limits

import (
	"errors"
	"fmt"
	"math"
)

// Sizing sets the size and the update mode of the count-min sketches under
// a Rate or an Inflight, or the size of a Rate's windows that count
// exactly first, and is passed to NewRate and NewInflight as an
// Option (to NewEstimator, which takes its size as arguments, only for
// Conservative):
//
//	perClient := limits.NewRate(time.Minute, limits.Sizing{Keys: 50_000})
//	inflight := limits.NewInflight(limits.Sizing{Hashes: 4, Slots: 16384})
//
// The size is given outright, with Hashes and Slots, or from how accurate
// the sketch must be, in terms a caller knows: how many distinct keys it
// will count (Keys), how far an estimate may be too high (MaxOverFraction,
// or MaxOver of Events), and how often that may fail (Failure). Dims turns
// those into hashes and slots, or says why it cannot: check a Sizing read
// from configuration with Dims before passing it, as constructors panic on
// an invalid one. A Sizing that gives no size keeps the constructor's
// default size.
//
// Conservative selects conservative update, for counts that only grow: in
// the same memory a conservative sketch over-counts less, never more (see
// Estimator).
//
// # A Rate from its keys
//
// A Sizing that gives Keys, and no Hashes, Slots or accuracy
// (MaxOverFraction, MaxOver, Events, Failure), sizes the windows of a Rate
// to count exactly first (see Rate), in the user's terms: Keys is the
// number of distinct keys a window is expected to hold, and Limit, if
// known, the limit the counts are compared with. Each window then holds a
// table of ceil(Keys/6.5) lines of 16 entries, rounded up to a multiple
// of 4, 64 bytes a line, at which about one key in 10,000 finds its line
// full, and a conservative sketch of 4 rows of 32-bit counters as large
// as the table, for those keys; with a Limit above 32,767, the most an
// entry counts, the sketch has at least e*(Keys-1) counters a row, so
// that every key spilling into it is counted exactly with probability at
// least 1 - e^-4. Fewer than 0.1% of the keys within the limit are then
// refused wrongly when a window holds up to Keys keys: those without an
// entry, over-counted in the sketch. Sizing{Keys: 6_656} is the default,
// 128 KiB a window; Sizing{Keys: 50_000} takes 962 KiB a window, where
// count-min windows counting the same keys exactly at the same failure
// would take 4.1 MiB. The Conservative field changes nothing there, as the
// windows are always conservative.
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
// plain sketch's.
//
// The zero Sizing gives no size and, as an Option, changes nothing: a Rate
// keeps its default (windows that count exactly first), an Estimator or
// Inflight its plain update and size.
type Sizing struct {
	// Hashes and Slots give the size outright: hashes rows of slots
	// counters each, 8 bytes a counter. Set both, or neither and size the
	// sketch by the fields below.
	Hashes, Slots int

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

	// Limit, for a Rate sized from Keys, is the largest limit its counts
	// are compared with, if known; 0 means unknown, or at most 32,767 a
	// window. Above that, a key's count spills from its entry into the
	// sketch, which is then sized to count every key exactly (see
	// NewRate). Estimators and Inflights do not use it.
	Limit int64

	// Conservative counts with conservative update: an increment raises
	// each of a key's counters only as far as the key's new estimate, and
	// leaves higher ones, which already hold more from other keys, alone.
	// Estimates are never lower than the true count and, for increments
	// that do not race, never above a plain sketch's; a conservative
	// sketch cannot take counts back, so it ignores increments <= 0, and
	// holds at most 16 hashes. An Inflight, whose counts go down, cannot
	// be conservative.
	Conservative bool
}

// sized reports whether s gives a size.
func (s Sizing) sized() bool {
	return s.Hashes != 0 || s.Slots != 0 || s.Keys != 0 || s.MaxOverFraction != 0 || s.MaxOver != 0 || s.Events != 0 || s.Failure != 0 || s.Limit != 0
}

// defaultFailure is the Failure of a Sizing that leaves it 0: it gives
// ceil(ln 50) = 4 hashes, the default of NewRate.
const defaultFailure = 0.02

// Dims returns the hashes and slots s gives, outright or as the smallest
// count-min sketch that meets its accuracy (see Sizing for the bounds it
// relies on), or an error, prefixed "limits: ", when s gives no size, is
// not valid, or asks for a sketch of more than 1 GiB (12 million keys
// counted exactly at the default Failure, 3.5 million at a Failure of
// 1e-6) or, Conservative, of more than 16 hashes. It allocates nothing
// unless it fails.
func (s Sizing) Dims() (hashes, slots int, err error) {
	hashes, slots, err = s.dims()
	if err == nil && s.Conservative && hashes > maxConservativeHashes {
		return 0, 0, fmt.Errorf("limits: a conservative sketch takes at most %d hashes, got %d", maxConservativeHashes, hashes)
	}
	return hashes, slots, err
}

func (s Sizing) dims() (hashes, slots int, err error) {
	if s.Hashes != 0 || s.Slots != 0 {
		switch {
		case s.Keys != 0 || s.MaxOverFraction != 0 || s.MaxOver != 0 || s.Events != 0 || s.Failure != 0 || s.Limit != 0:
			return 0, 0, errors.New("limits: Sizing takes Hashes and Slots or an accuracy, not both")
		case s.Hashes < 1:
			return 0, 0, fmt.Errorf("limits: Sizing.Hashes must be >= 1, got %d", s.Hashes)
		case s.Slots < 1:
			return 0, 0, fmt.Errorf("limits: Sizing.Slots must be >= 1, got %d", s.Slots)
		case s.Hashes > maxCells/s.Slots:
			return 0, 0, fmt.Errorf("limits: %d hashes x %d slots need more than the 1 GiB a sketch may take", s.Hashes, s.Slots)
		}
		return s.Hashes, s.Slots, nil
	}
	failure := s.Failure
	switch {
	case s.Limit < 0:
		return 0, 0, fmt.Errorf("limits: Sizing.Limit must be >= 0, got %d", s.Limit)
	case s.Limit > 0 && !s.tabled():
		return 0, 0, errors.New("limits: Sizing.Limit sizes a Rate from Keys, and takes Keys with no accuracy")
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

// size returns the hashes and slots of a sketch built with s, or def if s
// gives no size, panicking with Dims's error if s is not valid: the
// constructors treat an invalid Sizing as a programming error, as
// NewEstimator does a negative size.
func (s Sizing) size(def [2]int) (hashes, slots int) {
	if !s.sized() {
		hashes, slots = def[0], def[1]
		if s.Conservative && hashes > maxConservativeHashes {
			panic(fmt.Sprintf("limits: a conservative sketch takes at most %d hashes, got %d", maxConservativeHashes, hashes))
		}
		return hashes, slots
	}
	hashes, slots, err := s.Dims()
	if err != nil {
		panic(err.Error())
	}
	return hashes, slots
}

// rateSize returns the size of a Rate's windows built with s: lines of
// table (0 for none) and the hashes and slots of the sketch, panicking as
// size does. The zero Sizing, with Conservative or not, gives the default
// table and sketch; Keys alone, or with Limit, a table and sketch sized
// from them (see Sizing); Hashes and Slots, or an accuracy, a count-min
// sketch alone.
func (s Sizing) rateSize() (lines, hashes, slots int) {
	if !s.sized() {
		return defaultRateLines, defaultRateSketch[0], defaultRateSketch[1]
	}
	if !s.tabled() {
		hashes, slots = s.size(defaultRateSketch)
		return 0, hashes, slots
	}
	lines, slots, err := s.tableDims()
	if err != nil {
		panic(err.Error())
	}
	return lines, tableHashes, slots
}

// tabled reports whether s sizes a Rate's windows as a table and a
// sketch: it gives Keys, and no size or accuracy of a count-min sketch.
func (s Sizing) tabled() bool {
	return s.Keys != 0 && s.Hashes == 0 && s.Slots == 0 && s.MaxOverFraction == 0 && s.MaxOver == 0 && s.Events == 0 && s.Failure == 0
}

// Sizing a Rate's windows from its keys: lines of table for Keys keys at
// tableLoad keys a line on average, so that about one key in 10,000 finds
// its line of 16 entries full (the share of keys over 16 in a Poisson
// count of mean 6.5, over 6.5, is 1.0e-4), and a sketch of tableHashes
// rows, of as many bytes as the table, or, with a Limit above what an
// entry holds, sized for every key to be counted exactly there with
// probability 1 - e^-4, as every key near the limit spills into it.
const (
	tableLoad   = 6.5
	tableHashes = 4
)

// tableDims returns the lines of table and the counters per row of sketch
// of a Rate's windows sized by s, which gives Keys, or an error.
func (s Sizing) tableDims() (lines, slots int, err error) {
	switch {
	case s.Keys < 0:
		return 0, 0, fmt.Errorf("limits: Sizing.Keys must be >= 0, got %d", s.Keys)
	case s.Limit < 0:
		return 0, 0, fmt.Errorf("limits: Sizing.Limit must be >= 0, got %d", s.Limit)
	}
	l := math.Ceil(float64(s.Keys)/tableLoad/4) * 4 // whole chunks of clearChunk words
	w := 4 * l                                      // as many bytes as the table: 16 counters of 4 bytes a line, over 4 rows
	if s.Limit > countMax {
		w = max(w, math.Ceil(math.E*float64(s.Keys-1)))
	}
	w = math.Ceil(w/2) * 2 // two counters a word
	if l*lineWords+tableHashes*w/2 > maxCells {
		return 0, 0, fmt.Errorf("limits: Sizing for %d keys needs %.0f lines of table and %d x %.0f counters of sketch, more than the 1 GiB a window may take", s.Keys, l, tableHashes, w)
	}
	return int(l), int(w), nil
}
