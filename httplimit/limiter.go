package httplimit

import (
	"context"

	"github.com/limitsgo/limits"
)

// Limiter decides whether a request of cost n for key may proceed now. The
// middleware takes any Limiter: Local for one process, or a limiter shared
// by a fleet, such as the Redis one of github.com/limitsgo/limits/redislimit.
//
// An error means that no decision could be made (a store unreachable, a
// deadline passed); the middleware then follows its error policy. A
// Decision returned with a nil error is final, refusals included.
type Limiter interface {
	AllowN(ctx context.Context, key string, n int) (limits.Decision, error)
}

// Local returns a Limiter deciding with g, in this process. Its AllowN never
// returns an error and ignores ctx: a local decision does not block.
func Local(g *limits.GCRA) Limiter { return local{g} }

type local struct{ g *limits.GCRA }

func (l local) AllowN(_ context.Context, key string, n int) (limits.Decision, error) {
	return l.g.AllowN(key, n), nil
}
