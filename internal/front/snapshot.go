package front

// This file reads a front end's counters into the plain values its Stats
// method reports, so that every front end reports the same shape.

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/limitsgo/limits"
)

// Totals is a snapshot of Counters, with the field names of the front
// ends' Stats.
type Totals struct {
	Exempt, Allowed, RateLimited, ServerBusy, RequestTimeout, LimiterError,
	TableFull, CostAboveBurst, InvalidCost, ConcurrencyLimited, ConcurrencyTableFull uint64
}

// Load returns a snapshot of c. Each counter is read atomically, but not
// all at one instant.
func (c *Counters) Load() Totals {
	return Totals{
		Exempt:               c.Exempt.Load(),
		Allowed:              c.Allowed.Load(),
		RateLimited:          c.Rates.RateLimited.Load(),
		ServerBusy:           c.ServerBusy.Load(),
		RequestTimeout:       c.RequestTimeout.Load(),
		LimiterError:         c.Rates.LimiterError.Load(),
		TableFull:            c.Rates.TableFull.Load(),
		CostAboveBurst:       c.Rates.CostAboveBurst.Load(),
		InvalidCost:          c.Rates.InvalidCost.Load(),
		ConcurrencyLimited:   c.ConcurrencyLimited.Load(),
		ConcurrencyTableFull: c.ConcurrencyTableFull.Load(),
	}
}

// PolicyTotals is a snapshot of one rate policy's Counts, with the field
// names, in the order, of the front ends' PolicyStats: a front end
// converts it to its own type.
type PolicyTotals struct {
	Name                                                                       string
	Allowed, RateLimited, TableFull, CostAboveBurst, InvalidCost, LimiterError uint64
	// Keys and MaxKeys are the keys the policy's local limiter holds and
	// the most it may, if it has one; 0 otherwise.
	Keys, MaxKeys int
}

// PolicyTotalsOf returns the counts of layers' policies, in order, one
// entry per policy name: a policy keyed by the caller has a second layer
// of its name for requests without a key, and both add up in one entry.
// A local limiter's keys are reported under the first policy that uses
// it only: the keyless policy shares the caller key policy's table, and
// reporting it twice would count its keys twice in a sum.
func PolicyTotalsOf[R any](layers []*Layer[R]) []PolicyTotals {
	var out []PolicyTotals
	at := map[string]int{}
	tables := map[*limits.GCRA]bool{}
	for _, l := range layers {
		i, ok := at[l.Name]
		if !ok {
			i = len(out)
			at[l.Name] = i
			out = append(out, PolicyTotals{Name: l.Name})
		}
		p, n := &out[i], &l.Counts
		p.Allowed += n.Allowed.Load()
		p.RateLimited += n.RateLimited.Load()
		p.TableFull += n.TableFull.Load()
		p.CostAboveBurst += n.CostAboveBurst.Load()
		p.InvalidCost += n.InvalidCost.Load()
		p.LimiterError += n.LimiterError.Load()
		if g := l.localGCRA(); g != nil && !tables[g] {
			tables[g] = true
			p.Keys, p.MaxKeys = g.Len(), g.MaxKeys()
		}
	}
	return out
}

// localGCRA returns the policy's limiter in this process: the limiter
// itself if it decides in process, or the one asked before it.
func (r *Rate) localGCRA() *limits.GCRA {
	if r.local != nil {
		return r.local
	}
	return r.Pre
}

// KeyHash returns a short hash of a bucket's key, enough to tell clients
// apart in logs without revealing addresses, session tokens or API keys.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
