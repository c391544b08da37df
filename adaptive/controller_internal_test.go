package adaptive

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
)

// TestEndWithoutDrainKeepsSlowest ends one window at once, with requests
// it admitted still inside, and one after they all completed: only the
// second sets how long the next window waits for its slowest requests
// (twice the slowest latency it saw), since the first never saw its
// slowest.
func TestEndWithoutDrainKeepsSlowest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := limits.NewGate(8)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(g, Config{})
		if err != nil {
			t.Fatal(err)
		}
		const before = int64(time.Second)
		c.slowest.Store(before)

		// Three admitted, one completed: not drained.
		var held []*limits.Permit
		for range 3 {
			p, ok := g.TryEnter()
			if !ok {
				t.Fatal("gate full")
			}
			held = append(held, &p)
		}
		time.Sleep(10 * time.Millisecond)
		c.Observe(10*time.Millisecond, Success)
		held[0].Release()
		c.close(c.now(), true)
		if c.closed.Load() != open {
			t.Fatal("the window did not end at once")
		}
		if got := c.slowest.Load(); got != before {
			t.Errorf("after a window that did not drain, the wait for the slowest is %v, want %v as before", time.Duration(got), time.Duration(before))
		}
		for _, p := range held[1:] {
			p.Release() // admitted before this window: counted in none
		}

		// One admitted and completed: drained.
		p, ok := g.TryEnter()
		if !ok {
			t.Fatal("gate full")
		}
		time.Sleep(20 * time.Millisecond)
		c.Observe(20*time.Millisecond, Success)
		p.Release()
		c.close(c.now(), false)
		if c.closed.Load() != open {
			t.Fatal("the drained window did not end")
		}
		if got, want := time.Duration(c.slowest.Load()), 40*time.Millisecond; got < want*7/8 || got > want*9/8 {
			t.Errorf("after a drained window, the wait for the slowest is %v, want about %v", got, want)
		}
	})
}
