package limits

import "fmt"

// Option configures what a constructor builds: WithBurst and WithMaxKeys
// a GCRA, a Sizing the sketches of a Rate, an Inflight or an Estimator,
// WithReserve a Gate. A constructor given an option that does not apply to
// what it builds panics, naming the option (NewGate returns an error
// instead): that is a programming error, not one of configuration. Options are values, safe to share; the nil Option is not
// valid.
type Option interface {
	apply(*options)
}

// options holds what the options given set.
type options struct {
	burst, maxKeys int
	sizing         Sizing
	reserves       []reserve // WithReserve's, in the order given
	set            optionSet
}

// optionSet tells which options were given.
type optionSet uint8

const (
	optBurst optionSet = 1 << iota
	optMaxKeys
	optSizing
	optReserve
)

var optionNames = map[optionSet]string{optBurst: "WithBurst", optMaxKeys: "WithMaxKeys", optSizing: "a Sizing", optReserve: "WithReserve"}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithBurst sets how many unit requests a key of a GCRA may make at once,
// after a pause long enough to recover. The default is the limit: one
// full quota at once. A burst of 1 spaces every request by T =
// period/limit.
func WithBurst(n int) Option {
	return optionFunc(func(o *options) { o.burst, o.set = n, o.set|optBurst })
}

// WithMaxKeys sets the most keys a GCRA holds at once: 1,048,576 by
// default, and at most 268,435,456. The table grows with the keys in use
// up to this cap, and takes about 23 bytes per key of the cap once full.
func WithMaxKeys(n int) Option {
	return optionFunc(func(o *options) { o.maxKeys, o.set = n, o.set|optMaxKeys })
}

// apply makes a Sizing an Option.
func (s Sizing) apply(o *options) { o.sizing, o.set = s, o.set|optSizing }

// collect applies opts over o and returns an error, without a package
// prefix, naming the first option that is not among allowed, for a
// constructor of what.
func collect(o *options, opts []Option, allowed optionSet, what string) error {
	for _, opt := range opts {
		before := o.set
		opt.apply(o)
		if added := o.set &^ before; added&^allowed != 0 {
			return fmt.Errorf("%s does not apply to %s", optionNames[added&^allowed], what)
		}
	}
	return nil
}
