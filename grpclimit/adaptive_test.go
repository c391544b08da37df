package grpclimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// TestAdaptiveFindsCapacity puts an Interceptor with an adaptive gate, its
// ceiling 16 times too high, in front of a service of 4 workers, at twice
// its capacity: the limit must come down near 4, and the gate refuse the
// excess with Unavailable rather than let it queue.
func TestAdaptiveFindsCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		it, err := New(Config{Limits: admit.Config{MaxInFlight: 64, Adaptive: &adaptive.Config{Samples: 20}}})
		if err != nil {
			t.Fatal(err)
		}
		sem := make(chan struct{}, 4)
		handler := func(ctx context.Context, req any) (any, error) {
			sem <- struct{}{}
			time.Sleep(10 * time.Millisecond)
			<-sem
			return req, nil
		}
		ctx := peers(1)[0]
		var wg sync.WaitGroup
		var mu sync.Mutex
		refused := 0
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(1250 * time.Microsecond) {
			wg.Go(func() {
				if _, err := it.Unary(ctx, nil, benchInfo, handler); status.Code(err) == codes.Unavailable {
					mu.Lock()
					refused++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		s := it.Stats()
		if s.Adaptive == nil || s.Gate == nil {
			t.Fatalf("Stats: no adaptive or gate stats: %+v", s)
		}
		if s.Adaptive.Limit < 3 || s.Adaptive.Limit > 6 {
			t.Errorf("limit %d after 20s at twice the capacity of 4; history %+v", s.Adaptive.Limit, s.Adaptive.History)
		}
		if refused == 0 || uint64(refused) != s.Requests[admit.ServerBusy] {
			t.Errorf("refused %d, ServerBusy %d", refused, s.Requests[admit.ServerBusy])
		}
	})
}

// TestAdaptiveOutcomes checks what the controller is told: calls a later
// layer refuses are Ignored, calls that fail with Unavailable Dropped,
// and a stream counts once it is established.
func TestAdaptiveOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		it, err := New(Config{Limits: admit.Config{
			MaxInFlight: 8, Rate: limits.Limit{Events: 1, Period: time.Hour}, Burst: 1,
			Adaptive: &adaptive.Config{Law: adaptive.AIMD{}, ProbeEvery: -1, Samples: 5, Window: 10 * time.Millisecond},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var fail error
		handler := func(ctx context.Context, req any) (any, error) {
			time.Sleep(time.Millisecond)
			return req, fail
		}
		ctxs := peers(60)
		for _, ctx := range ctxs[:30] {
			it.Unary(ctx, nil, benchInfo, handler)
			if _, err := it.Unary(ctx, nil, benchInfo, handler); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("second call: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
		s := it.Stats().Adaptive
		if s.Ignored == 0 || s.Samples == 0 || s.Dropped != 0 {
			t.Errorf("after served and rate-limited calls: samples %d, ignored %d, dropped %d", s.Samples, s.Ignored, s.Dropped)
		}
		fail = status.Error(codes.Unavailable, "a dependency is down")
		for _, ctx := range ctxs[30:] {
			it.Unary(ctx, nil, benchInfo, handler)
			time.Sleep(time.Millisecond)
		}
		s = it.Stats().Adaptive
		if s.Dropped == 0 || s.Limit >= 8 {
			t.Errorf("calls failing with Unavailable: dropped %d, limit %d", s.Dropped, s.Limit)
		}
	})
}

// TestAdaptiveStream checks that a stream holds its place in an adaptive
// gate only until it is established, and reports it then.
func TestAdaptiveStream(t *testing.T) {
	it, err := New(Config{Limits: admit.Config{MaxInFlight: 1, Adaptive: &adaptive.Config{}}})
	if err != nil {
		t.Fatal(err)
	}
	ss := &sendStream{ctx: peers(1)[0]}
	info := &grpc.StreamServerInfo{FullMethod: methodChat}
	err = it.Stream(nil, ss, info, func(srv any, s grpc.ServerStream) error {
		if n := it.Stats().Gate.InFlight; n != 1 {
			t.Errorf("in flight while setting up: %d", n)
		}
		s.SendMsg("hello")
		if n := it.Stats().Gate.InFlight; n != 0 {
			t.Errorf("in flight once established: %d", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAdaptiveConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Limits: admit.Config{Adaptive: &adaptive.Config{}}}, "Adaptive needs MaxInFlight"},
		{Config{Limits: admit.Config{QueueAdapt: time.Second}}, "QueueAdapt needs MaxInFlight"},
		{Config{Limits: admit.Config{MaxInFlight: 8, QueueAdapt: time.Second}}, "QueueAdapt needs QueueWait"},
		{Config{Limits: admit.Config{MaxInFlight: 8, QueueWait: time.Millisecond, QueueAdapt: -time.Second}}, "QueueAdapt must not be negative"},
		{Config{Limits: admit.Config{MaxInFlight: 8, Adaptive: &adaptive.Config{Max: 9}}}, "must not exceed MaxInFlight"},
	} {
		it, err := New(tc.cfg)
		if it != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "grpclimit: ") {
			t.Errorf("New(%+v) = %v, %v; want an error with %q", tc.cfg, it, err, tc.want)
		}
	}
	if _, err := New(Config{Limits: admit.Config{MaxInFlight: 8, Adaptive: &adaptive.Config{Min: 9}}}); !errors.Is(err, adaptive.ErrConfig) {
		t.Errorf("a bad adaptive.Config: %v, not adaptive.ErrConfig", err)
	}
	var c Config
	env := map[string]string{"LIMITS_GRPC_ADAPTIVE": "gradient", "LIMITS_GRPC_ADAPTIVE_MIN": "3", "LIMITS_GRPC_QUEUE_ADAPT": "50ms"}
	if err := c.Limits.LoadEnv("LIMITS_GRPC_", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Limits.Adaptive.Law.(adaptive.Gradient); !ok || c.Limits.Adaptive.Min != 3 || c.Limits.QueueAdapt != 50*time.Millisecond {
		t.Errorf("LoadEnv read %+v, %v", c.Limits.Adaptive, c.Limits.QueueAdapt)
	}
}

// TestAdaptiveCallOutcomes checks how calls that end badly are reported:
// a bare context error for the client's deadline, and a stream not
// established within Timeout, as overload; a call the client cancelled,
// as nothing.
func TestAdaptiveCallOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		it, err := New(Config{Limits: admit.Config{MaxInFlight: 8, Timeout: 10 * time.Millisecond,
			Adaptive: &adaptive.Config{Law: adaptive.AIMD{}, ProbeEvery: -1, Samples: 5, Window: time.Millisecond}}})
		if err != nil {
			t.Fatal(err)
		}
		counts := func() (samples, dropped, ignored uint64) {
			s := it.Stats().Adaptive
			return s.Samples, s.Dropped, s.Ignored
		}
		// The client cancels while the handler works: it returns the bare
		// context error.
		waiter := func(ctx context.Context, req any) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		noTimeout, err := New(Config{Limits: admit.Config{MaxInFlight: 8,
			Adaptive: &adaptive.Config{Law: adaptive.AIMD{}, ProbeEvery: -1, Samples: 5, Window: time.Millisecond}}})
		if err != nil {
			t.Fatal(err)
		}
		// Windows close on calls that tell something: each cancelled call
		// comes with one served.
		served := func(ctx context.Context, req any) (any, error) {
			time.Sleep(time.Millisecond)
			return req, nil
		}
		for _, ctx := range peers(30) {
			noTimeout.Unary(ctx, nil, benchInfo, served)
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(time.Millisecond, cancel)
			noTimeout.Unary(ctx, nil, benchInfo, waiter)
		}
		if s := noTimeout.Stats().Adaptive; s.Ignored < 20 || s.Dropped != 0 || s.Samples < 20 || s.Limit != 8 {
			t.Errorf("cancelled calls: %+v", s)
		}
		// The client's deadline passes while the handler works.
		for _, ctx := range peers(30) {
			ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			noTimeout.Unary(ctx, nil, benchInfo, waiter)
			cancel()
		}
		if s := noTimeout.Stats().Adaptive; s.Dropped == 0 || s.Limit >= 8 {
			t.Errorf("calls past the client's deadline: dropped %d, limit %d", s.Dropped, s.Limit)
		}
		// Streams whose handler takes longer than Timeout to establish.
		info := &grpc.StreamServerInfo{FullMethod: methodChat}
		for _, ctx := range peers(30) {
			it.Stream(nil, &sendStream{ctx: ctx}, info, func(srv any, s grpc.ServerStream) error {
				time.Sleep(20 * time.Millisecond)
				return s.SendMsg("late")
			})
		}
		if _, dropped, _ := counts(); dropped == 0 || it.Stats().Adaptive.Limit >= 8 {
			t.Errorf("streams not established in time: %+v", it.Stats().Adaptive)
		}
	})
}
