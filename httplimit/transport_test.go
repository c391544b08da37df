package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/pace"
)

// clientNet is an in-memory network for a real http.Server and
// http.Transport inside a synctest bubble, where loopback sockets would
// keep the bubble from ever being idle.
type clientNet struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (n *clientNet) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.done:
		return nil, net.ErrClosed
	}
}

func (n *clientNet) Close() error {
	n.once.Do(func() { close(n.done) })
	return nil
}

func (n *clientNet) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// serveClientNet serves h on an in-memory network until the test ends, and
// returns an http.Transport that reaches it whatever the URL's host. Call
// it inside a synctest bubble.
func serveClientNet(t *testing.T, h http.Handler) *http.Transport {
	n := &clientNet{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	go srv.Serve(n)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, s := net.Pipe()
		select {
		case n.conns <- s:
			return c, nil
		case <-n.done:
			return nil, net.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return tr
}

// get sends a GET for url with c, reads the body and returns the status.
func fetchStatus(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// windowServer is an API that allows 10 requests in any second (a
// sliding window: a request counts for one second from its arrival), and
// says so in the draft-10 fields: the policy q=10;w=1, and r and t, t
// rounded up to whole seconds. Answers with r=0 and refusals announce a
// pause: no request should arrive before its end. The request arriving
// pauseAt-th, if set, gets a 503 with Retry-After: 3.
type windowServer struct {
	mu       sync.Mutex
	start    time.Time
	pauseAt  int
	arrivals []time.Duration
	accepted []time.Duration
	pauses   [][2]time.Duration // announced: nothing should arrive in (from, to)
	refused  int                // 429s
}

func (s *windowServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Since(s.start)
	s.arrivals = append(s.arrivals, now)
	h := w.Header()
	h.Set("RateLimit-Policy", `"default";q=10;w=1`)
	if len(s.arrivals) == s.pauseAt {
		h.Set("Retry-After", "3")
		s.pauses = append(s.pauses, [2]time.Duration{now, now + 3*time.Second})
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// The accepted requests still in the window, oldest first.
	in := s.accepted
	for len(in) > 0 && in[0] <= now-time.Second {
		in = in[1:]
	}
	if len(in) >= 10 {
		s.refused++
		secs := ceilSeconds(in[0] + time.Second - now)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=0;t=%d`, secs))
		s.pauses = append(s.pauses, [2]time.Duration{now, now + time.Duration(secs)*time.Second})
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	s.accepted = append(s.accepted, now)
	in = append(in, now)
	left := 10 - len(in)
	secs := int64(1) // until the window is empty
	if left == 0 {
		secs = ceilSeconds(in[0] + time.Second - now)
		s.pauses = append(s.pauses, [2]time.Duration{now, now + time.Duration(secs)*time.Second})
	}
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, left, secs))
}

func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// check verifies the server's log: no 429, at most 10 arrivals in any
// second, none within an announced pause, and none closer than 100ms to
// the one before, so no burst after a pause.
func (s *windowServer) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused != 0 {
		t.Errorf("the server refused %d requests with 429", s.refused)
	}
	a := s.arrivals
	for i := range a {
		n := 0
		for j := i; j >= 0 && a[j] > a[i]-time.Second; j-- {
			n++
		}
		if n > 10 {
			t.Fatalf("%d arrivals in the second to %v: %v", n, a[i], a)
		}
		if i > 0 && a[i]-a[i-1] < 100*time.Millisecond {
			t.Fatalf("arrivals at %v and %v, closer than the pace", a[i-1], a[i])
		}
		for _, p := range s.pauses {
			if a[i] > p[0] && a[i] < p[1] {
				t.Fatalf("an arrival at %v, within the pause %v", a[i], p)
			}
		}
	}
	if len(s.pauses) == 0 {
		t.Error("the server announced no pause: the test tests nothing")
	}
}

// TestTransportStaysUnderAServersLimit is the case of a service calling
// an API that allows 10 requests a second, from 30 goroutines at once:
// with the Transport's pace (Rate) or the pace it learns from the first
// answer, the API sees no more than 10 requests in any second, none
// during a pause it announced, answers no 429, and the callers queued
// during its 503's pause resume at the pace.
func TestTransportStaysUnderAServersLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate limits.Limit
	}{
		{"Rate", limits.Limit{Events: 10, Period: time.Second}},
		{"learnt", limits.Limit{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &windowServer{start: time.Now(), pauseAt: 25}
				tr := &httplimit.Transport{Base: serveClientNet(t, srv), Pace: pace.Config{Rate: tc.rate}}
				c := &http.Client{Transport: tr}
				if tc.rate == (limits.Limit{}) {
					// The first answer teaches the pace.
					if code, err := fetchStatus(context.Background(), c, "http://api.test/"); err != nil || code != 200 {
						t.Fatalf("first request: %d, %v", code, err)
					}
				}
				var wg sync.WaitGroup
				var codes sync.Map
				for g := range 30 {
					wg.Go(func() {
						for i := range 3 {
							code, err := fetchStatus(context.Background(), c, "http://api.test/")
							if err != nil {
								t.Error(err)
							}
							codes.Store(g*3+i, code)
						}
					})
				}
				wg.Wait()
				codes.Range(func(k, v any) bool {
					if v != 200 {
						t.Errorf("request %v: status %v", k, v)
					}
					return true
				})
				srv.check(t)
				if s := tr.Stats(); s.Retries != 1 || s.Paused == 0 || s.Waited == 0 {
					t.Errorf("Stats = %+v, want the 503 retried once, pauses and waits", s)
				}
			})
		})
	}
}

// TestTransportLearnsFromHTTPLimit calls a server protected by httplimit
// over loopback: after the first answer, which announces the limit, the
// client never gets a 429, from 20 goroutines at once, while a bare
// transport under the same load gets many.
func TestTransportLearnsFromHTTPLimit(t *testing.T) {
	serve := func() (*httptest.Server, *atomic.Int64) {
		m, err := httplimit.New(httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 100, Period: time.Second}, Burst: 20}})
		if err != nil {
			t.Fatal(err)
		}
		var refused atomic.Int64
		srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
		t.Cleanup(srv.Close)
		return srv, &refused
	}
	run := func(c *http.Client, url string) (codes map[int]int) {
		codes = map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for range 5 {
					code, err := fetchStatus(context.Background(), c, url)
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return codes
	}

	bare, _ := serve()
	if codes := run(bare.Client(), bare.URL); codes[429] == 0 {
		t.Fatalf("a bare transport got %v: the load does not test the limit", codes)
	}

	srv, _ := serve()
	tr := &httplimit.Transport{Base: srv.Client().Transport, Pace: pace.Config{MaxRetries: -1}}
	c := &http.Client{Transport: tr}
	if code, err := fetchStatus(context.Background(), c, srv.URL); err != nil || code != 200 {
		t.Fatalf("first request: %d, %v", code, err)
	}
	if codes := run(c, srv.URL); codes[429] != 0 || codes[200] != 100 {
		t.Errorf("after the first answer, statuses %v, want 100 200s and no 429", codes)
	}
	if s := tr.Stats(); s.Sent != 101 || s.Waited == 0 {
		t.Errorf("Stats = %+v, want 101 sent, some waiting", s)
	}
}

// TestTransportRetryAfterDate: a Retry-After date is read against the
// answer's Date, so a server whose clock is an hour off still gets its
// retry exactly when it asked, and a server sending no Date is read
// against the local clock.
func TestTransportRetryAfterDate(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration
		date bool
	}{
		{"server an hour ahead", time.Hour, true},
		{"server an hour behind", -time.Hour, true},
		{"no Date, clocks agree", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var mu sync.Mutex
				var arrivals []time.Duration
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					defer mu.Unlock()
					arrivals = append(arrivals, time.Since(start))
					now := time.Now().Add(tc.skew)
					if tc.date {
						w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
					} else {
						w.Header()["Date"] = nil
					}
					if len(arrivals) == 1 {
						w.Header().Set("Retry-After", now.Add(3*time.Second).UTC().Format(http.TimeFormat))
						w.WriteHeader(http.StatusTooManyRequests)
					}
				})
				c := &http.Client{Transport: &httplimit.Transport{Base: serveClientNet(t, h)}}
				code, err := fetchStatus(context.Background(), c, "http://api.test/")
				if err != nil || code != 200 {
					t.Fatalf("got %d, %v; want 200 after a retry", code, err)
				}
				if want := []time.Duration{0, 3 * time.Second}; !slices.Equal(arrivals, want) {
					t.Errorf("arrivals %v, want %v", arrivals, want)
				}
			})
		})
	}
}

// TestTransportDeadlineShorterThanPause: a request whose context ends
// before the server's pause does not wait in vain, and a refusal whose
// retry would come after the deadline is returned as it came.
func TestTransportDeadlineShorterThanPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if arrivals.Add(1) == 1 {
				w.Header().Set("Retry-After", "10")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		tr := &httplimit.Transport{Base: serveClientNet(t, h)}
		c := &http.Client{Transport: tr}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()

		// The retry would leave after the deadline: the 429 comes back.
		if code, err := fetchStatus(ctx, c, "http://api.test/"); err != nil || code != 429 {
			t.Fatalf("got %d, %v; want the 429 itself", code, err)
		}
		// The next request would wait 10s, past its deadline: it fails at
		// once, unsent.
		_, err := fetchStatus(ctx, c, "http://api.test/")
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pause") {
			t.Fatalf("err = %v, want one wrapping DeadlineExceeded that names the pause", err)
		}
		if d := time.Since(start); d != 0 || arrivals.Load() != 1 {
			t.Fatalf("failed after %v with %d arrivals, want at once, unsent", d, arrivals.Load())
		}
		// Without a deadline, it waits for the pause.
		if code, err := fetchStatus(context.Background(), c, "http://api.test/"); err != nil || code != 200 || time.Since(start) != 10*time.Second {
			t.Fatalf("got %d, %v after %v; want 200 after 10s", code, err, time.Since(start))
		}
		if s := tr.Stats(); s.DeadlineExceeded != 1 || s.Retries != 0 {
			t.Errorf("Stats = %+v, want 1 deadline refusal, no retry", s)
		}
	})
}

// TestTransportPauseBeyondMaxPause: every form of a server's answer asking
// for a pause longer than pace.MaxPause (a count of seconds or a Unix time
// too large for an int64, an HTTP date in the year 9999) pauses the key
// for MaxPause: the next request, whose deadline is an hour away, fails at
// once, unsent, naming the pause.
func TestTransportPauseBeyondMaxPause(t *testing.T) {
	const huge = "99999999999999999999" // past the largest int64
	for _, tc := range []struct {
		name   string
		status int
		header []string
	}{
		{"X-RateLimit-Reset at the largest int64", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "9223372036854775807"}},
		{"X-RateLimit-Reset past the largest int64", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", huge}},
		{"RateLimit t at the largest int64", 200, []string{"RateLimit", `"default";r=0;t=9223372036854775807`}},
		{"RateLimit t past the largest int64", 200, []string{"RateLimit", `"default";r=0;t=` + huge}},
		{"Retry-After past the largest int64", 429, []string{"Retry-After", huge}},
		{"Retry-After in the year 9999", 429, []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var arrivals atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if arrivals.Add(1) == 1 {
						for i := 0; i+1 < len(tc.header); i += 2 {
							w.Header().Set(tc.header[i], tc.header[i+1])
						}
						w.WriteHeader(tc.status)
					}
				})
				c := &http.Client{Transport: &httplimit.Transport{Base: serveClientNet(t, h)}}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				if code, err := fetchStatus(ctx, c, "http://api.test/"); err != nil || code != tc.status {
					t.Fatalf("first request: %d, %v; want %d", code, err, tc.status)
				}
				_, err := fetchStatus(ctx, c, "http://api.test/")
				var w *pace.WaitError
				if !errors.As(err, &w) || !w.Paused || w.Wait != pace.MaxPause || arrivals.Load() != 1 {
					t.Fatalf("second request: %v after %d arrivals; want a pause of %v, unsent", err, arrivals.Load(), pace.MaxPause)
				}
			})
		})
	}
}

// TestTransportRetries: 429 and 503 are retried for requests that can be
// sent again, with their body, within the budget.
func TestTransportRetries(t *testing.T) {
	// refuseFirst answers the first n requests with status, and records
	// the bodies it gets.
	type server struct {
		mu     sync.Mutex
		n      int
		status int
		bodies []string
	}
	handler := func(s *server) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.bodies = append(s.bodies, string(b))
			if len(s.bodies) <= s.n {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(s.status)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		tr     *httplimit.Transport
		status int
		req    func() *http.Request
		want   int // status
		sent   int
	}{
		{"GET 503", &httplimit.Transport{}, 503, func() *http.Request {
			r, _ := http.NewRequest("GET", "http://api.test/", nil)
			return r
		}, 200, 2},
		{"POST with GetBody", &httplimit.Transport{}, 429, func() *http.Request {
			r, _ := http.NewRequest("POST", "http://api.test/", strings.NewReader("payload"))
			return r
		}, 200, 2},
		{"POST that cannot be replayed", &httplimit.Transport{}, 429, func() *http.Request {
			r, _ := http.NewRequest("POST", "http://api.test/", io.NopCloser(strings.NewReader("payload")))
			return r
		}, 429, 1},
		{"POST without body", &httplimit.Transport{}, 429, func() *http.Request {
			r, _ := http.NewRequest("POST", "http://api.test/", nil)
			return r
		}, 429, 1},
		{"retries off", &httplimit.Transport{Pace: pace.Config{MaxRetries: -1}}, 429, func() *http.Request {
			r, _ := http.NewRequest("GET", "http://api.test/", nil)
			return r
		}, 429, 1},
		{"at most MaxRetries", &httplimit.Transport{Pace: pace.Config{MaxRetries: 3}}, 429, func() *http.Request {
			r, _ := http.NewRequest("DELETE", "http://api.test/", nil)
			return r
		}, 429, 4},
		{"500 is not retried", &httplimit.Transport{}, 500, func() *http.Request {
			r, _ := http.NewRequest("GET", "http://api.test/", nil)
			return r
		}, 500, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &server{n: 10, status: tc.status}
				if tc.want == 200 {
					s.n = 1
				}
				tr := tc.tr
				tr.Base = serveClientNet(t, handler(s))
				resp, err := (&http.Client{Transport: tr}).Do(tc.req())
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want || len(s.bodies) != tc.sent {
					t.Errorf("status %d after %d sent, want %d after %d", resp.StatusCode, len(s.bodies), tc.want, tc.sent)
				}
				for _, b := range s.bodies {
					if b != s.bodies[0] {
						t.Errorf("bodies sent %q, want the same each time", s.bodies)
					}
				}
			})
		})
	}
}

// TestTransportRetryBudget: each retry takes a token of its key's budget;
// once spent, refusals come back as they came.
func TestTransportRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrivals.Add(1)
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		tr := &httplimit.Transport{Base: serveClientNet(t, h), Pace: pace.Config{MaxRetries: 1, RetryTokens: 2}}
		c := &http.Client{Transport: tr}
		for range 5 {
			if code, err := fetchStatus(context.Background(), c, "http://api.test/"); err != nil || code != 429 {
				t.Fatalf("got %d, %v; want 429", code, err)
			}
		}
		if n := arrivals.Load(); n != 7 {
			t.Errorf("%d arrivals, want 5 requests and 2 retries", n)
		}
		if s := tr.Stats(); s.Retries != 2 || s.RetryBudgetSpent != 3 || s.Requests != 5 || s.Sent != 7 {
			t.Errorf("Stats = %+v", s)
		}
	})
}

// TestTransportThrottles: against a server that refuses everything and
// says nothing of when to come back, client-side throttling refuses
// most requests locally, and lets them all through again once the
// refusals have left its window.
func TestTransportThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals atomic.Int64
		var healthy atomic.Bool
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrivals.Add(1)
			if !healthy.Load() {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		tr := &httplimit.Transport{Base: serveClientNet(t, h), Pace: pace.Config{Throttle: 2, MaxRetries: -1}}
		c := &http.Client{Transport: tr}
		throttled := 0
		for range 300 {
			_, err := fetchStatus(context.Background(), c, "http://api.test/")
			switch {
			case errors.Is(err, pace.ErrThrottled):
				throttled++
			case err != nil:
				t.Fatal(err)
			}
		}
		// Each request reaches the server with probability 1/(n+1) after n
		// refusals: about ln(300) = 6 do; 60 would take odds below 1e-20.
		if n := arrivals.Load(); n > 60 || int(n)+throttled != 300 {
			t.Errorf("%d arrivals and %d refused locally of 300", n, throttled)
		}
		if s := tr.Stats(); s.Throttled != uint64(throttled) {
			t.Errorf("Throttled = %d, want %d", s.Throttled, throttled)
		}
		healthy.Store(true)
		time.Sleep(4 * time.Minute) // two windows: the refusals are forgotten
		for range 50 {
			if code, err := fetchStatus(context.Background(), c, "http://api.test/"); err != nil || code != 200 {
				t.Fatalf("after recovery: %d, %v", code, err)
			}
		}
	})
}

// TestTransportTenThousandKeys: 10,000 keys, each paused by its server,
// fill a table of 10,000; a new key is refused at once, unsent, while
// the paused keys still wait their turn, and gets in once a pause ends.
func TestTransportTenThousandKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var arrivals atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrivals.Add(1)
			if r.URL.Query().Get("pause") != "" {
				w.Header().Set("Retry-After", "5")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		tr := &httplimit.Transport{
			Base: serveClientNet(t, h),
			Key:  func(r *http.Request) string { return r.URL.Query().Get("user") },
			Pace: pace.Config{MaxKeys: 10_000, MaxRetries: -1},
		}
		c := &http.Client{Transport: tr}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := g; i < 10_000; i += 4 {
					if code, err := fetchStatus(context.Background(), c, fmt.Sprintf("http://api.test/?pause=1&user=%d", i)); err != nil || code != 429 {
						t.Errorf("user %d: %d, %v", i, code, err)
						return
					}
				}
			})
		}
		wg.Wait()
		start := time.Now()
		_, err := fetchStatus(context.Background(), c, "http://api.test/?user=new")
		if err == nil || !strings.Contains(err.Error(), "table full") || time.Since(start) != 0 || arrivals.Load() != 10_000 {
			t.Fatalf("new key: %v after %v, %d arrivals; want table full at once, unsent", err, time.Since(start), arrivals.Load())
		}
		// A paused key waits for its turn rather than failing.
		if code, err := fetchStatus(context.Background(), c, "http://api.test/?user=17"); err != nil || code != 200 || time.Since(start) != 5*time.Second {
			t.Fatalf("paused key: %d, %v after %v; want 200 after its pause", code, err, time.Since(start))
		}
		if code, err := fetchStatus(context.Background(), c, "http://api.test/?user=new"); err != nil || code != 200 {
			t.Fatalf("new key after the pauses: %d, %v", code, err)
		}
		if s := tr.Stats(); s.TableFull != 1 || s.Keys != 10_000 {
			t.Errorf("Stats = %+v, want 1 table-full refusal, 10,000 keys", s)
		}
	})
}

// stubTransport answers every request with the same response, at once.
type stubTransport struct{ resp *http.Response }

func (s stubTransport) RoundTrip(*http.Request) (*http.Response, error) { return s.resp, nil }

func newStubTransport() stubTransport {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=1000000000;w=1`)
	h.Set("RateLimit", `"default";r=999999999;t=1`)
	return stubTransport{&http.Response{StatusCode: 200, Header: h, Body: http.NoBody}}
}

func TestTransportAllocs(t *testing.T) {
	tr := &httplimit.Transport{Base: newStubTransport(), Pace: pace.Config{Rate: limits.Limit{Events: 1e9, Period: time.Second}}}
	req := httptest.NewRequest("GET", "http://api.test/", nil)
	tr.RoundTrip(req)
	if n := testing.AllocsPerRun(1000, func() { tr.RoundTrip(req) }); n != 0 {
		t.Errorf("RoundTrip allocates %v times beyond its base, want 0", n)
	}
}

func TestTransportRejectsBadConfig(t *testing.T) {
	tr := &httplimit.Transport{Base: newStubTransport(), Pace: pace.Config{Throttle: 0.5}}
	body := &bodyCloseCounter{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", "http://api.test/", body)
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "Throttle") {
		t.Errorf("err = %v, want one naming Throttle", err)
	}
	if body.closed != 1 {
		t.Errorf("the body was closed %d times, want 1", body.closed)
	}
}

type bodyCloseCounter struct {
	io.Reader
	closed int
}

func (c *bodyCloseCounter) Close() error {
	c.closed++
	return nil
}
