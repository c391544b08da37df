package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/quota"
	"github.com/limitsgo/limits/redislimit"
	"github.com/redis/go-redis/v9"
)

// A daily quota of 3 calls per API key, resetting at midnight in Paris,
// shared by every process that uses this Redis and prefix.
func ExampleNewQuota() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}, ContextTimeoutEnabled: true})
	defer rdb.Close()
	paris, _ := time.LoadLocation("Europe/Paris")
	daily, err := redislimit.NewQuota(rdb, quota.Config{Limit: 3, Per: quota.Day, Location: paris},
		redislimit.WithPrefix("example:daily:"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	defer func() { rdb.Del(ctx, daily.Key("key-123", time.Now())) }()
	for range 4 {
		d, err := daily.Allow(ctx, "key-123")
		switch {
		case err != nil:
			fmt.Println("no decision:", err)
		case !d.Allowed:
			_, midnight := quota.Day.Bounds(d.At, paris)
			fmt.Printf("refused (%v) until midnight in Paris: %v\n", d.Reason, d.At.Add(d.RetryAfter).Equal(midnight))
		default:
			fmt.Printf("allowed, %d left today\n", d.Remaining)
		}
	}
	// Output:
	// allowed, 2 left today
	// allowed, 1 left today
	// allowed, 0 left today
	// refused (rate_limited) until midnight in Paris: true
}

// TestQuotaAdmitPolicy runs a Redis quota as a policy of package admit:
// two engines, as two replicas would be, each with its own client, share
// a quota of 3 a day per client address, and admit exactly 3 of its
// requests between them; a refusal's RetryAfter runs to the next midnight.
func TestQuotaAdmitPolicy(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		t.Skip("no redis-server")
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano()) // a run of its own
	var engines [2]*admit.Engine
	for i := range engines {
		rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rdb.Close() })
		q, err := redislimit.NewQuota(rdb, quota.Config{Limit: 3}, redislimit.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		e, err := admit.New(admit.Config{
			Policies: []admit.Policy{{Name: "daily", Quota: "3/day", Limiter: "q"}},
			Limiters: map[string]limits.Limiter{"q": q},
		})
		if err != nil {
			t.Fatal(err)
		}
		engines[i] = e
	}
	day, _ := quota.Day.Bounds(time.Now(), time.UTC)
	admitted := 0
	var refusals []*admit.Refusal
	for i := range 10 {
		var tk admit.Ticket
		err := engines[i%2].Admit(ctx, &admit.Request{Peer: "192.0.2.7:1000", Route: "/report"}, &tk)
		var ref *admit.Refusal
		switch {
		case err == nil:
			admitted++
			tk.Done(adaptive.Success)
		case errors.As(err, &ref):
			refusals = append(refusals, ref)
		default:
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if now, _ := quota.Day.Bounds(time.Now(), time.UTC); !now.Equal(day) {
		t.Skip("the run crossed midnight")
	}
	if admitted != 3 || len(refusals) != 7 {
		t.Fatalf("%d admitted and %d refused by two engines, want 3 and 7", admitted, len(refusals))
	}
	for _, ref := range refusals {
		_, midnight := quota.Day.Bounds(ref.Decision.At, time.UTC)
		if ref.Reason != limits.ReasonRateLimited || ref.Policy != "daily" || ref.RetryAfter != midnight.Sub(ref.Decision.At) ||
			ref.Decision.Period != 24*time.Hour || ref.Decision.At.IsZero() || ref.Decision.At != ref.Decision.At.Round(0) {
			t.Errorf("refusal %+v (decision %+v), want rate_limited by the Redis quota, until midnight", ref, ref.Decision)
		}
	}
}
