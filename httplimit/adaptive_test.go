package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// slowService is a handler that serves workers requests at once, each in
// d, and queues the rest: past workers at once, latency grows.
func slowService(workers int, d time.Duration) http.Handler {
	sem := make(chan struct{}, workers)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sem <- struct{}{}
		time.Sleep(d)
		<-sem
	})
}

// drive sends a request to h every gap, for span, each from its own
// goroutine, and waits for all of them; it returns the statuses counted.
func drive(h http.Handler, gap, span time.Duration) map[int]int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	codes := map[int]int{}
	for end := time.Now().Add(span); time.Now().Before(end); time.Sleep(gap) {
		wg.Go(func() {
			w := serve(h, "192.0.2.1:1234", "/")
			mu.Lock()
			codes[w.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// TestAdaptiveFindsCapacity puts a Middleware with an adaptive gate, its
// ceiling 16 times too high, in front of a service of 4 workers, at twice
// its capacity: the limit must come down near 4, and the gate shed the
// excess with 503 rather than let it queue.
func TestAdaptiveFindsCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 64, Adaptive: &adaptive.Config{Samples: 20}}})
		h := m.Handler(slowService(4, 10*time.Millisecond))
		// 4 workers of 10ms serve 400 a second: one request every 1.25ms
		// is twice that.
		codes := drive(h, 1250*time.Microsecond, 20*time.Second)
		t.Logf("statuses %v", codes)
		s := m.Stats()
		if s.Adaptive == nil || s.Gate == nil {
			t.Fatalf("Stats: no adaptive or gate stats: %+v", s)
		}
		if s.Adaptive.Limit < 3 || s.Adaptive.Limit > 6 {
			t.Errorf("limit %d after 20s at twice the capacity of 4; history %+v", s.Adaptive.Limit, s.Adaptive.History)
		}
		if s.Gate.Max != s.Adaptive.Limit {
			t.Errorf("gate max %d, adaptive limit %d", s.Gate.Max, s.Adaptive.Limit)
		}
		if codes[http.StatusServiceUnavailable] == 0 || uint64(codes[http.StatusServiceUnavailable]) != s.Requests[admit.ServerBusy] {
			t.Errorf("statuses %v, server_busy %d", codes, s.Requests[admit.ServerBusy])
		}
		if s.Adaptive.Samples == 0 || s.Adaptive.Windows == 0 || s.Adaptive.Baseline == 0 {
			t.Errorf("controller saw nothing: %+v", s.Adaptive)
		}
		// The admitted requests' latency, once the limit came down, stays
		// near the service time rather than growing with the queue.
		if p50 := s.Adaptive.Last.P50; p50 > 20*time.Millisecond {
			t.Errorf("last window's p50 %v, service time 10ms", p50)
		}
	})
}

// TestAdaptiveOutcomes checks what the controller is told: requests a
// later layer refuses are Ignored, and with Timeout those past their
// deadline are Dropped.
func TestAdaptiveOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{
			MaxInFlight: 8, Timeout: 50 * time.Millisecond,
			Rate: limits.Limit{Events: 1, Period: time.Hour}, Burst: 1,
			Adaptive: &adaptive.Config{Law: adaptive.AIMD{}, ProbeEvery: -1, Samples: 5, Window: 10 * time.Millisecond},
		}})
		slow := false
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if slow {
				time.Sleep(100 * time.Millisecond) // past the deadline
				return
			}
			time.Sleep(time.Millisecond)
		}))
		// Each new address is served once, then rate limited.
		for i := range 30 {
			addr := fmt.Sprintf("192.0.2.%d:1", i+1)
			serve(h, addr, "/")
			if code := serve(h, addr, "/").Code; code != http.StatusTooManyRequests {
				t.Fatalf("second request from %s: %d", addr, code)
			}
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		s := m.Stats().Adaptive
		if s.Ignored == 0 || s.Samples == 0 || s.Dropped != 0 {
			t.Errorf("after served and rate-limited requests: samples %d, ignored %d, dropped %d", s.Samples, s.Ignored, s.Dropped)
		}
		slow = true
		for i := range 30 {
			addr := fmt.Sprintf("198.51.100.%d:1", i+1)
			if code := serve(h, addr, "/").Code; code != http.StatusServiceUnavailable {
				t.Fatalf("request past its deadline: %d", code)
			}
		}
		time.Sleep(time.Second) // the handlers return
		synctest.Wait()
		s = m.Stats().Adaptive
		if s.Dropped == 0 {
			t.Errorf("requests past their deadline not reported as dropped: %+v", s)
		}
		if s.Limit >= 8 {
			t.Errorf("AIMD did not back off on timeouts: limit %d", s.Limit)
		}
	})
}

// TestQueueAdapt checks that QueueAdapt reaches the gate: under sustained
// overload with a queue wait, the gate stops queueing.
func TestQueueAdapt(t *testing.T) {
	for _, adapt := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(fmt.Sprintf("QueueAdapt=%v", adapt), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 2, QueueWait: 5 * time.Millisecond, QueueAdapt: adapt}})
				drive(m.Handler(slowService(2, 20*time.Millisecond)), time.Millisecond, 3*time.Second)
				g := m.Stats().Gate
				if adapt > 0 && g.Overloads == 0 {
					t.Errorf("QueueAdapt %v: the queue never stopped under overload: %+v", adapt, g)
				}
				if adapt == 0 && g.Overloads != 0 {
					t.Errorf("no QueueAdapt, yet overloads: %+v", g)
				}
				if g.Waited == 0 || g.WaitTime == 0 {
					t.Errorf("no wait counted: %+v", g)
				}
			})
		})
	}
}

func TestAdaptiveConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  admit.Config
		want string
	}{
		{admit.Config{Adaptive: &adaptive.Config{}}, "Adaptive needs MaxInFlight"},
		{admit.Config{QueueAdapt: time.Second}, "QueueAdapt needs MaxInFlight"},
		{admit.Config{MaxInFlight: 8, QueueAdapt: time.Second}, "QueueAdapt needs QueueWait"},
		{admit.Config{MaxInFlight: 8, QueueWait: time.Millisecond, QueueAdapt: -time.Second}, "QueueAdapt must not be negative"},
		{admit.Config{MaxInFlight: 8, Adaptive: &adaptive.Config{Max: 9}}, "must not exceed MaxInFlight"},
		{admit.Config{MaxInFlight: 8, Adaptive: &adaptive.Config{Min: 9}}, "Adaptive (with MaxInFlight 8"},
		{admit.Config{MaxInFlight: 8, Adaptive: &adaptive.Config{History: -1}}, "History must be >= 0"},
	} {
		m, err := New(Config{Limits: tc.cfg})
		if m != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "httplimit: ") {
			t.Errorf("New(%+v) = %v, %v; want an error with %q", tc.cfg, m, err, tc.want)
		}
	}
	if _, err := New(Config{Limits: admit.Config{MaxInFlight: 8, Adaptive: &adaptive.Config{Min: 9}}}); !errors.Is(err, adaptive.ErrConfig) {
		t.Errorf("a bad adaptive.Config: %v, not adaptive.ErrConfig", err)
	}
}

// TestAdaptiveLoadEnv checks that the adaptive gate's variables configure
// a Middleware's gate.
func TestAdaptiveLoadEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	cfg := Config{Limits: admit.Config{MaxInFlight: 32}}
	c := &cfg.Limits
	if err := c.LoadEnv("", env(map[string]string{"LIMITS_ADAPTIVE": "Vegas", "LIMITS_ADAPTIVE_MIN": "4", "LIMITS_QUEUE_WAIT": "5ms", "LIMITS_QUEUE_ADAPT": "100ms"})); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Adaptive.Law.(adaptive.Vegas); !ok || c.Adaptive.Min != 4 || c.QueueAdapt != 100*time.Millisecond {
		t.Errorf("read %+v, %+v", c.Adaptive, c.QueueAdapt)
	}
	if s := mustNew(t, cfg).Stats(); s.Adaptive == nil || s.Adaptive.Min != 4 || s.Gate.Max != 32 {
		t.Errorf("the Middleware of the loaded config: %+v", s.Adaptive)
	}
	if err := c.LoadEnv("", env(map[string]string{"LIMITS_ADAPTIVE": "aimd"})); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Adaptive.Law.(adaptive.AIMD); !ok || c.Adaptive.Min != 4 || c.Adaptive.ProbeEvery >= 0 {
		t.Errorf("aimd over vegas: %+v", c.Adaptive)
	}
	if err := c.LoadEnv("", env(map[string]string{"LIMITS_ADAPTIVE": "off"})); err != nil || c.Adaptive != nil {
		t.Errorf("off: %+v, %v", c.Adaptive, err)
	}
	for _, kv := range []map[string]string{
		{"LIMITS_ADAPTIVE": "fast"},
		{"LIMITS_ADAPTIVE_MIN": "4"},
		{"LIMITS_ADAPTIVE": "gradient", "LIMITS_ADAPTIVE_MIN": "0"},
		{"LIMITS_QUEUE_ADAPT": "-1s"},
	} {
		var c admit.Config
		if err := c.LoadEnv("", env(kv)); err == nil {
			t.Errorf("LoadEnv(%v) did not fail: %+v", kv, c)
		}
	}
	var login admit.Config
	if err := login.LoadEnv("LIMITS_LOGIN_", env(map[string]string{"LIMITS_LOGIN_ADAPTIVE_MIN": "2"})); err == nil || !strings.Contains(err.Error(), "set LIMITS_LOGIN_ADAPTIVE to a law") {
		t.Errorf("a floor without a law: %v", err)
	}
}

// aimdConfig is an adaptive.Config whose windows close after a few
// requests, with AIMD, which reads no baseline: the tests of outcomes read
// the controller's counts of the windows ended.
func aimdConfig() *adaptive.Config {
	return &adaptive.Config{Law: adaptive.AIMD{}, ProbeEvery: -1, Samples: 5, Window: time.Millisecond}
}

// TestAdaptiveIgnoresWhatSaysNothing checks that requests a route refuses
// after the gate let them in, handlers that panic and requests whose
// client left are reported as Ignored, never as served or as overload.
func TestAdaptiveIgnoresWhatSaysNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 8, Timeout: time.Second, Adaptive: aimdConfig(),
			Policies: []admit.Policy{{Name: "route", Routes: []string{"/"}, Rate: limits.Limit{Events: 1, Period: time.Hour}}}}})
		var mode string
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Millisecond)
			switch mode {
			case "panic":
				panic("handler bug")
			case "wait":
				<-r.Context().Done()
			}
		}))
		serve := func(addr string, ctx context.Context) int {
			w := httptest.NewRecorder()
			r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
			r.RemoteAddr = addr
			func() {
				defer func() { recover() }()
				h.ServeHTTP(w, r)
			}()
			return w.Code
		}
		counts := func() (samples, dropped, ignored uint64) {
			s := m.Stats().Adaptive
			return s.Samples, s.Dropped, s.Ignored
		}
		for i := range 40 {
			addr := fmt.Sprintf("192.0.2.%d:1", i+1)
			serve(addr, t.Context())
			if code := serve(addr, t.Context()); code != http.StatusTooManyRequests {
				t.Fatalf("second request to the route: %d", code)
			}
		}
		samples, dropped, ignored := counts()
		if samples == 0 || ignored == 0 || dropped != 0 {
			t.Fatalf("served and route-refused requests: samples %d, dropped %d, ignored %d", samples, dropped, ignored)
		}
		// Windows close on requests that tell something: each request that
		// says nothing comes with one served.
		for i := range 40 {
			mode = ""
			serve(fmt.Sprintf("198.51.100.%d:1", 2*i+1), t.Context())
			mode = "panic"
			serve(fmt.Sprintf("198.51.100.%d:1", 2*i+2), t.Context())
		}
		s2, d2, i2 := counts()
		if s2 <= samples || d2 != 0 || i2 < ignored+30 {
			t.Fatalf("panicking handlers: samples %d -> %d, dropped %d, ignored %d -> %d", samples, s2, d2, ignored, i2)
		}
		for i := range 40 {
			mode = ""
			serve(fmt.Sprintf("203.0.113.%d:1", 2*i+1), t.Context())
			mode = "wait"
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(5*time.Millisecond, cancel) // the client leaves
			serve(fmt.Sprintf("203.0.113.%d:1", 2*i+2), ctx)
			synctest.Wait() // the handler has returned
		}
		s3, d3, i3 := counts()
		if s3 <= s2 || d3 != 0 || i3 < i2+30 {
			t.Fatalf("clients that left: samples %d -> %d, dropped %d, ignored %d -> %d", s2, s3, d3, i2, i3)
		}
		if l := m.Stats().Adaptive.Limit; l != 8 {
			t.Errorf("AIMD moved the limit to %d on requests that say nothing", l)
		}
	})
}
