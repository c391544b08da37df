package grpclimit

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// retryConfig is a client service config that retries calls of test.Echo
// refused with RESOURCE_EXHAUSTED, with a backoff far shorter than the
// server's delays: a retry that waits long enough waits for the pushback.
const retryConfig = `{"methodConfig": [{
	"name": [{"service": "test.Echo"}],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.001s",
		"backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	}
}]}`

// scripted is a limiter with a burst of 1 that refuses the next calls it
// is told to with a delay, and allows the others; it records when it was
// asked, and about which key.
type scripted struct {
	mu     sync.Mutex
	refuse int           // calls left to refuse
	retry  time.Duration // their delay
	keys   []string
	at     []time.Time
}

func (s *scripted) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.at = append(s.keys, key), append(s.at, time.Now())
	d := limits.Decision{Cost: n, Limit: 1, Period: s.retry, Burst: 1, At: time.Now()}
	switch {
	case n > 1:
		d.Reason = limits.ReasonCostAboveBurst
	case s.refuse > 0:
		s.refuse--
		d.Reason, d.RetryAfter = limits.ReasonRateLimited, s.retry
	default:
		d.Allowed = true
	}
	return d, nil
}

func (*scripted) Refund(context.Context, string, limits.Decision) error { return nil }

// asked returns the keys the limiter was asked about, and when.
func (s *scripted) asked() ([]string, []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...), append([]time.Time(nil), s.at...)
}

// TestRetryPushbackTCP serves over a real loopback TCP connection, and
// checks that gRPC's own retry policy obeys the refusals' pushback: it
// retries a rate-limited call no sooner than the delay given, when the
// call passes, and never retries a call whose cost can never pass.
func TestRetryPushbackTCP(t *testing.T) {
	lim := &scripted{retry: 300 * time.Millisecond}
	it := mustNew(t, Config{
		Limits: admit.Config{Limiters: named(lim), Limiter: "l"},
		Cost: func(ctx context.Context, _ string) int {
			if len(metadata.ValueFromIncomingContext(ctx, "big")) > 0 {
				return 2
			}
			return 1
		},
	})
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(&echoDesc, &echo{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryConfig))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	mustSay(t, conn, "first")
	if keys, _ := lim.asked(); len(keys) != 1 || keys[0] != "a:127.0.0.1/32" {
		t.Errorf("the loopback client's keys: %q", keys)
	}
	lim.mu.Lock()
	lim.refuse = 1
	lim.mu.Unlock()
	mustSay(t, conn, "second, retried by the client")
	_, at := lim.asked()
	// The retry came when the pushback said, not at the policy's 1ms
	// backoff.
	if len(at) != 3 || at[2].Sub(at[1]) < lim.retry {
		t.Errorf("the limiter was asked %d times, the retry %v after the refusal: want 3 times, the retry no sooner than %v",
			len(at), at[len(at)-1].Sub(at[len(at)-2]), lim.retry)
	}
	if s := it.Stats(); s.Requests[limits.ReasonRateLimited] != 1 || s.Requests[admit.Allowed] != 2 {
		t.Errorf("Stats %v: want exactly one refused attempt, then the retry allowed", s.Requests)
	}

	// A cost above the burst has a pushback of -1: no retry.
	_, trailer, err := say(conn, "big", "big", "1")
	if got := describe(err, trailer); got.reason != limits.ReasonCostAboveBurst || got.pushback != "-1" {
		t.Errorf("cost above the burst: %v", got)
	}
	if _, at := lim.asked(); it.Stats().Requests[limits.ReasonCostAboveBurst] != 1 || len(at) != 4 {
		t.Errorf("cost above the burst tried %d times, the limiter asked %d times in all; want once: no retry",
			it.Stats().Requests[limits.ReasonCostAboveBurst], len(at))
	}
}
