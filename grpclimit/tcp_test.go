package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
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

// TestRetryPushbackTCP serves over a real loopback TCP connection, and
// checks that gRPC's own retry policy obeys the refusals' pushback: it
// retries a rate-limited call after the exact delay, when the call
// passes, and never retries a call whose cost can never pass.
func TestRetryPushbackTCP(t *testing.T) {
	const period = 300 * time.Millisecond
	rec := &recorder{}
	it := mustNew(t, Config{
		Rate:    limits.Limit{Events: 1, Period: period},
		Limiter: rec, // behind the local limiter of Rate: sees the keys it allows
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
	if got := rec.last(); got != "a:127.0.0.1/32" {
		t.Errorf("the loopback client's key: %q", got)
	}
	start := time.Now()
	var out wrapperspb.StringValue
	var trailer metadata.MD
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, methodSay, wrapperspb.String("second"), &out, grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("the second call, retried by the client: %v", err)
	}
	// The bucket refills 300ms after the first call, which took some of
	// that time: the retry came when the pushback said, not at the
	// policy's 1ms backoff.
	if d := time.Since(start); d < period/2 {
		t.Errorf("the retried call took %v: the client did not wait for the pushback", d)
	}
	if s := it.Stats(); s.RateLimited != 1 || s.Allowed != 2 {
		t.Errorf("Stats %+v: want exactly one refused attempt, then the retry allowed", s)
	}

	// A cost above the burst has a pushback of -1: no retry.
	time.Sleep(period)
	_, trailer, err = say(conn, "big", "big", "1")
	if got := describe(err, trailer); got.reason != ReasonCostAboveBurst || got.pushback != "-1" {
		t.Errorf("cost above the burst: %v", got)
	}
	if s := it.Stats(); s.CostAboveBurst != 1 {
		t.Errorf("cost above the burst tried %d times, want once: no retry", s.CostAboveBurst)
	}
}
