package front

import (
	"context"
	"fmt"

	"github.com/limitsgo/limits"
)

// Reset forgets key's state in every limiter of layers that can forget:
// a local GCRA, or a limiter with a Reset(ctx, key) error method, such as
// the Redis one; each limiter once, however many layers share it. It
// returns the first error, naming the key and the policy, after trying
// them all.
func Reset[R any](ctx context.Context, layers []*Layer[R], key string) error {
	var first error
	seen := map[any]bool{}
	for _, l := range layers {
		for _, lim := range []any{l.Limiter, l.Pre} {
			if lim == nil || lim == (*limits.GCRA)(nil) || seen[lim] {
				continue
			}
			seen[lim] = true
			var err error
			switch v := lim.(type) {
			case *limits.GCRA:
				v.Reset(key)
			case interface {
				Reset(context.Context, string) error
			}:
				err = v.Reset(ctx, key)
			}
			if err != nil && first == nil {
				first = fmt.Errorf("resetting %q in policy %q: %w", key, l.Name, err)
			}
		}
	}
	return first
}
