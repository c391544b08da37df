package front

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
)

// KeyKind says how a rate layer keys its buckets.
type KeyKind uint8

const (
	// ByAddress keys a bucket by the client address key.
	ByAddress KeyKind = iota
	// ByCaller keys a bucket by a key the caller chooses, hashed ("c:" and
	// 32 hex digits), or, for a request without one, by the address key
	// in the keyless layer that must follow it.
	ByCaller
	// Keyless is the layer that requests without a caller key take in
	// place of the ByCaller layer before it: "n:" and the address key.
	Keyless
)

// Layer is one rate policy as a front end applies it to requests of type
// R: which bucket a request goes to, and what it costs.
type Layer[R any] struct {
	*Rate
	Kind KeyKind
	// Key returns the caller-chosen key of a ByCaller layer, or "".
	Key func(R) string
	// Cost returns a request's cost; nil means 1.
	Cost func(R) int
}

// CallerBucket returns the bucket's key for a key the caller chose: a hash
// of it, so that session tokens and API keys never reach a limiter (or a
// shared store) in clear, and their length is fixed.
func CallerBucket(callerKey string) string {
	sum := sha256.Sum256([]byte(callerKey))
	var buf [2 + 2*16]byte
	copy(buf[:], "c:")
	hex.Encode(buf[2:], sum[:16])
	return string(buf[:])
}

// Admission applies rate layers to requests, all or nothing, and counts
// the outcomes.
type Admission struct {
	// FailOpen serves a request whose limiter failed, rather than refuse.
	FailOpen bool
	// Counts counts the refusals (and failures) of every layer, by reason.
	Counts *Counts
	// OnError, if set, is told of a limiter that failed and FailOpen
	// served the request anyway, and of a refund that failed, with the
	// request (nil for a refund) and the bucket's key.
	OnError func(ctx context.Context, req any, what, key string, err error)
}

// Admit applies layers, in order, to a request req from the client
// address key addr, appending what each charges to charges, which holds
// what earlier layers charged. If one refuses, it gives back everything
// charges holds, latest first, and returns the refusal; the request then
// costs nothing. Refunds run even if ctx has ended.
func Admit[R any](ctx context.Context, a *Admission, req R, addr string, layers []*Layer[R], charges []Charge) ([]Charge, *Refusal) {
	for i := 0; i < len(layers); i++ {
		l := layers[i]
		key := addr
		switch l.Kind {
		case ByCaller:
			if ck := l.Key(req); ck != "" {
				key = CallerBucket(ck)
			} else {
				i++ // the keyless layer, next in line, instead
				l, key = layers[i], "n:"+addr
			}
		case Keyless:
			continue // taken instead of the caller key's, above
		}
		n := 1
		if l.Cost != nil {
			n = l.Cost(req)
		}
		ch, err := l.Take(ctx, key, n)
		if err != nil {
			l.Counts.Add(ReasonLimiterError)
			a.Counts.Add(ReasonLimiterError)
			if a.FailOpen {
				if a.OnError != nil {
					a.OnError(ctx, req, "limiter failed; request served", key, err)
				}
				if ch.pre.Allowed {
					// The local limiter in front keeps counting: its charge
					// stays, given back only if a later layer refuses.
					charges = append(charges, ch)
				}
				continue
			}
			a.Refund(ctx, append(charges, ch)) // ch: Pre's charge, if any
			return nil, &Refusal{Reason: ReasonLimiterError, Rate: l.Rate, Key: key, Err: err}
		}
		if ch.Dec.Allowed {
			l.Counts.Add("")
			charges = append(charges, ch)
			continue
		}
		a.Refund(ctx, charges)
		reason := ReasonOf(ch.Dec)
		l.Counts.Add(reason)
		a.Counts.Add(reason)
		return nil, &Refusal{Reason: reason, Rate: l.Rate, Key: key, Dec: ch.Dec}
	}
	return charges, nil
}

// Refund gives back what charges charged, latest first, even if ctx has
// ended, within each limiter's timeout; a refund that fails leaves its
// charge in place.
func (a *Admission) Refund(ctx context.Context, charges []Charge) {
	ctx = context.WithoutCancel(ctx)
	for i := len(charges) - 1; i >= 0; i-- {
		if err := charges[i].Refund(ctx); err != nil && a.OnError != nil {
			a.OnError(ctx, nil, "refund failed; the charge stays", charges[i].Key, err)
		}
	}
}

// Counters are a front end's outcome counters.
type Counters struct {
	Exempt, Allowed, ServerBusy, RequestTimeout,
	ConcurrencyLimited, ConcurrencyTableFull atomic.Uint64
	// Rates counts the refusals and failures of the rate layers, by reason.
	Rates Counts
}

// Count counts one outcome of a request: "" for one allowed, "exempt", or
// the reason of its refusal.
func (c *Counters) Count(reason string) {
	switch reason {
	case "":
		c.Allowed.Add(1)
	case "exempt":
		c.Exempt.Add(1)
	case ReasonServerBusy:
		c.ServerBusy.Add(1)
	case ReasonRequestTimeout:
		c.RequestTimeout.Add(1)
	case ReasonConcurrencyLimited:
		c.ConcurrencyLimited.Add(1)
	case ReasonConcurrencyTableFull:
		c.ConcurrencyTableFull.Add(1)
	default:
		c.Rates.Add(reason)
	}
}
