package redislimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit/redistest"
)

// TestLeaseRefundAnyOrder takes three decisions from the slots in hand of
// a hot key and refunds them in each order, against a real redis-server:
// every order gives all three back to the hand, with no call to Redis.
func TestLeaseRefundAnyOrder(t *testing.T) {
	srv := redistest.Start(t)
	for _, order := range [][3]int{{2, 1, 0}, {0, 1, 2}, {1, 2, 0}, {0, 2, 1}} {
		t.Run(fmt.Sprintf("%v", order), func(t *testing.T) {
			// A run of slots is given back to the hand only while the
			// first slot of each decision is still to come: on a machine
			// so slow that one is not, try again with a fresh key.
			for range 20 {
				if refundInOrder(t, srv.Addr(), order) {
					return
				}
			}
			t.Skip("the refunds never came before the slots' times: the machine is too slow for this test")
		})
	}
}

// refundInOrder makes a key hot in a GCRA of its own, takes three
// decisions from the slots in hand and refunds them in the given order.
// It reports false, having checked nothing, if a refund may have come after
// its decision's slot was due.
func refundInOrder(t *testing.T, addr string, order [3]int) bool {
	g := leaser(t, addr, freshPrefix(), WithLeases(16, 0))
	ctx := context.Background()
	// The call that leased: a slot's deadline, reckoned from the moment the
	// lease call was sent, is at least its decision's start plus its
	// ResetAfter, less the time that call took.
	var leaseCall time.Duration
	for g.LeaseStats().Held == 0 {
		start := time.Now()
		if d, err := g.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("heating the key: %+v, %v", d, err)
		}
		leaseCall = time.Since(start)
		if g.Stats().Answered > 10 {
			t.Fatalf("no lease in 10 calls: %+v", g.LeaseStats())
		}
	}
	if held := g.LeaseStats().Held; held < 8 {
		t.Fatalf("%d slots in hand, want at least 8", held)
	}
	var ds [3]limits.Decision
	due := time.Time{} // the earliest the first of the decisions' slots may be due
	for i := range ds {
		start := time.Now()
		d, err := g.Allow(ctx, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("decision %d: %+v, %v", i, d, err)
		}
		if at := start.Add(d.ResetAfter - leaseCall - 2*time.Microsecond); due.IsZero() || at.Before(due) {
			due = at
		}
		ds[i] = d
	}
	before, calls := g.LeaseStats(), g.Stats()
	errs := make([]error, 0, 3)
	for _, i := range order {
		errs = append(errs, g.Refund(ctx, "k", ds[i]))
	}
	if time.Now().After(due) {
		return false
	}
	after := g.LeaseStats()
	t.Logf("before the refunds %+v; after %+v", before, after)
	for i, err := range errs {
		if err != nil {
			t.Errorf("refund %d (decision %d): %v", i, order[i], err)
		}
	}
	if after.Spent != before.Spent-3 || after.Held != before.Held+3 {
		t.Errorf("refunds in the order %v: Spent %d to %d, Held %d to %d; want all three back in hand",
			order, before.Spent, after.Spent, before.Held, after.Held)
	}
	if s := g.Stats(); s.Refunds+s.RefundErrors != calls.Refunds+calls.RefundErrors {
		t.Errorf("refunds of the lease's decisions called Redis: %+v, before %+v", s, calls)
	}
	return true
}
