package ratelimit

// The examples of envoyproxy/ratelimit's README, each configuration as it
// gives it (testdata/readme), with the requests it describes.

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitsgo/limits"
)

// TestExample1 checks two values of one key, each its own limit of 500 a
// second: a burst of 500 at once, then one every 2ms, exactly.
func TestExample1(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example1.yaml")
		users := rlreq("mongo_cps", desc("database=users"))
		if n := allowedOf(t, s, users, 600); n != 500 {
			t.Fatalf("users: %d of 600 at once allowed, want 500", n)
		}
		if n := allowedOf(t, s, rlreq("mongo_cps", desc("database=default")), 10); n != 10 {
			t.Fatalf("default: %d of 10 allowed, want 10 (a limit of its own)", n)
		}
		resp := decide(t, s, users)
		st := resp.Statuses[0]
		if st.Code != pb.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetRequestsPerUnit() != 500 ||
			st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND || st.DurationUntilReset.AsDuration() != 2*time.Millisecond {
			t.Fatalf("over the limit: %v, want OVER_LIMIT, 500 a SECOND, retry in 2ms", st)
		}
		time.Sleep(2*time.Millisecond - time.Nanosecond)
		if decide(t, s, users).OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatal("allowed a nanosecond before the next emission")
		}
		time.Sleep(time.Nanosecond)
		if decide(t, s, users).OverallCode != pb.RateLimitResponse_OK {
			t.Fatal("refused at the next emission, 2ms later")
		}
	})
}

// TestExample2 checks a request of two descriptors, each matching a limit
// of its own: marketing messages to a number 5 a day, any message to it
// 100 a day; the answer is OVER_LIMIT once either is, and a refused
// request charges neither.
func TestExample2(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example2.yaml")
		both := rlreq("messaging", desc("message_type=marketing", "to_number=2061111111"), desc("to_number=2061111111"))
		for i := range 5 {
			if got := codesOf(decide(t, s, both)); got != "OK OK" {
				t.Fatalf("message %d: %s, want OK OK", i+1, got)
			}
		}
		resp := decide(t, s, both)
		if got := codesOf(resp); got != "OVER_LIMIT OK" || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("sixth marketing message: %s (overall %v), want OVER_LIMIT OK, overall OVER_LIMIT", got, resp.OverallCode)
		}
		if l := resp.Statuses[1].CurrentLimit; l.GetRequestsPerUnit() != 100 || l.GetUnit() != pb.RateLimitResponse_RateLimit_DAY {
			t.Fatalf("the other descriptor's limit: %v, want 100 a DAY", l)
		}
		// The refused message charged the number's limit nothing: 5 used.
		resp = decide(t, s, rlreq("messaging", desc("to_number=2061111111")))
		if st := resp.Statuses[0]; st.Code != pb.RateLimitResponse_OK || st.LimitRemaining != 94 {
			t.Fatalf("a plain message: %v, want OK with 94 left (5 before it, then this one)", st)
		}
		// Another number has limits of its own.
		if got := codesOf(decide(t, s, rlreq("messaging", desc("message_type=marketing", "to_number=2062222222")))); got != "OK" {
			t.Fatalf("marketing to another number: %s, want OK", got)
		}
	})
}

// TestExample3 checks that key and value match before the key alone: one
// address refused always (requests_per_unit 0), the others 10 a second.
func TestExample3(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example3.yaml")
		if n := allowedOf(t, s, rlreq("edge_proxy_per_ip", desc("remote_address=50.0.0.5")), 5); n != 0 {
			t.Fatalf("the blocked address: %d allowed, want 0", n)
		}
		resp := decide(t, s, rlreq("edge_proxy_per_ip", desc("remote_address=50.0.0.5")))
		if l := resp.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != 0 || l.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("the blocked address's limit: %v, want 0 a SECOND", l)
		}
		if n := allowedOf(t, s, rlreq("edge_proxy_per_ip", desc("remote_address=50.0.0.1")), 20); n != 10 {
			t.Fatalf("another address: %d of 20 allowed, want 10", n)
		}
		time.Sleep(time.Second)
		if n := allowedOf(t, s, rlreq("edge_proxy_per_ip", desc("remote_address=50.0.0.5")), 5); n != 0 {
			t.Fatalf("the blocked address a second later: %d allowed, want 0", n)
		}
	})
}

// TestExample4 checks that a descriptor matches an entry at its own depth
// only.
func TestExample4(t *testing.T) {
	s := readmeService(t, Options{}, "example4.yaml")
	resp := decide(t, s, rlreq("example4", desc("key=value", "subkey=subvalue")))
	if st := resp.Statuses[0]; st.Code != pb.RateLimitResponse_OK || st.CurrentLimit != nil {
		t.Fatalf("two entries against a limit at depth one: %v, want OK with no limit", st)
	}
	resp = decide(t, s, rlreq("example4", desc("other=value", "subkey=subvalue")))
	if l := resp.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != 300 {
		t.Fatalf("two entries against a limit at depth two: %v, want 300 a second", l)
	}
	resp = decide(t, s, rlreq("example4", desc("other=value")))
	if st := resp.Statuses[0]; st.CurrentLimit != nil {
		t.Fatalf("one entry against an entry with no limit: %v, want no limit", st)
	}
}

// TestExample5 checks an unlimited descriptor: OK with LimitRemaining at
// its maximum, and no limit.
func TestExample5(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example5.yaml")
		for range 1000 {
			resp := decide(t, s, rlreq("internal", desc("ldap=x")))
			if st := resp.Statuses[0]; st.Code != pb.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
				t.Fatalf("unlimited: %v, want OK, LimitRemaining %d, no limit", st, uint32(math.MaxUint32))
			}
		}
		if n := allowedOf(t, s, rlreq("internal", desc("azure=x")), 150); n != 100 {
			t.Fatalf("azure: %d of 150 allowed, want 100", n)
		}
	})
}

// TestExample6 checks shadow mode: user-a, in shadow mode, is never
// refused, and what its limit would refuse is counted; user-b is limited.
func TestExample6(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example6.yaml")
		if n := allowedOf(t, s, rlreq("example6", desc("service=auth-service", "user=user-a")), 100); n != 100 {
			t.Fatalf("user-a: %d of 100 allowed, want all", n)
		}
		if n := allowedOf(t, s, rlreq("example6", desc("service=auth-service", "user=user-b")), 100); n != 20 {
			t.Fatalf("user-b: %d of 100 allowed, want 20", n)
		}
		for _, p := range s.Stats().Policies {
			if p.Name == "example6.service.user_user-a" {
				if got := p.Shadow[limits.ReasonRateLimited]; got != 90 {
					t.Fatalf("user-a's shadow refusals: %v, want 90 rate_limited", p.Shadow)
				}
				return
			}
		}
		t.Fatal("no policy example6.service.user_user-a in Stats")
	})
}

// TestExample7 checks replaces: with both limits matched, only the
// replacing one applies, and the replaced one's counter is left alone.
func TestExample7(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example7.yaml")
		both := rlreq("example7", desc("key_1=value_1", "user=bkthomps"), desc("key_2=value_2", "user=bkthomps"))
		ok := 0
		for range 20 {
			resp := decide(t, s, both)
			if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[0].Code != pb.RateLimitResponse_OK {
				t.Fatalf("the replaced descriptor: %v, want OK with no limit", resp.Statuses[0])
			}
			if resp.OverallCode == pb.RateLimitResponse_OK {
				ok++
			}
		}
		if ok != 10 {
			t.Fatalf("both descriptors: %d of 20 allowed, want 10 (the replacing limit)", ok)
		}
		if n := allowedOf(t, s, rlreq("example7", desc("key_1=value_1", "user=bkthomps")), 10); n != 5 {
			t.Fatalf("the replaced limit alone: %d of 10 allowed, want its 5 untouched", n)
		}
	})
}

// TestExample8 checks a key without a value against the same key with a
// value: each unlisted value its own 10 a minute, value1 20.
func TestExample8(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example8.yaml")
		for _, c := range []struct {
			value string
			want  int
		}{{"unspecified_value", 10}, {"unspecified_value2", 10}, {"value1", 20}} {
			if n := allowedOf(t, s, rlreq("example8", desc("key1="+c.value)), 30); n != c.want {
				t.Fatalf("key1=%s: %d of 30 allowed, want %d", c.value, n, c.want)
			}
		}
	})
}

// TestExample9 checks a wildcard value: every value it prefixes, each its
// own 20 a minute.
func TestExample9(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example9.yaml")
		for _, v := range []string{"value_1", "value_2", "value"} {
			if n := allowedOf(t, s, rlreq("example9", desc("key1="+v)), 30); n != 20 {
				t.Fatalf("key1=%s: %d of 30 allowed, want 20", v, n)
			}
		}
		resp := decide(t, s, rlreq("example9", desc("key1=other")))
		if resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("a value the wildcard does not prefix: %v, want no limit", resp.Statuses[0])
		}
	})
}

// TestExample10 checks nested keys without values: 60 a minute for each
// route, method and subject.
func TestExample10(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example10.yaml")
		api := rlreq("example10", desc("route=api", "http_method=GET", "subject_id=123"))
		web := rlreq("example10", desc("route=web", "http_method=POST", "subject_id=456"))
		if n := allowedOf(t, s, api, 70); n != 60 {
			t.Fatalf("api: %d of 70 allowed, want 60", n)
		}
		if n := allowedOf(t, s, web, 70); n != 60 {
			t.Fatalf("web: %d of 70 allowed, want 60", n)
		}
	})
}

// TestExample11 checks share_threshold: every value of a shared wildcard
// shares one counter; without it, each value has its own.
func TestExample11(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "example11.yaml")
		if n := allowedOf(t, s, rlreq("example11", desc("files=files/a.pdf")), 5); n != 5 {
			t.Fatalf("files/a.pdf: %d of 5 allowed", n)
		}
		if n := allowedOf(t, s, rlreq("example11", desc("files=files/b.csv")), 5); n != 5 {
			t.Fatalf("files/b.csv: %d of 5 allowed", n)
		}
		if got := codesOf(decide(t, s, rlreq("example11", desc("files=files/c.txt")))); got != "OVER_LIMIT" {
			t.Fatalf("files/c.txt after 10 shared: %s, want OVER_LIMIT", got)
		}
		if n := allowedOf(t, s, rlreq("example11", desc("files_no_share=files_no_share/a.pdf")), 12); n != 10 {
			t.Fatalf("files_no_share/a.pdf: %d of 12 allowed, want 10", n)
		}
		if n := allowedOf(t, s, rlreq("example11", desc("files_no_share=files_no_share/b.csv")), 12); n != 10 {
			t.Fatalf("files_no_share/b.csv: %d of 12 allowed, want its own 10", n)
		}
	})
}

// TestJSONExample checks the response of the README's /json example: one
// descriptor over its limit of 1 a minute, reported with that limit; the
// other OK with its limit of 2 a minute. Its requests left are not
// reported: the refusal gave back its charge (all or nothing), as a
// request of it alone then shows.
func TestJSONExample(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := readmeService(t, Options{}, "json.yaml")
		decide(t, s, rlreq("dummy", desc("one_per_minute=something")))
		resp := decide(t, s, rlreq("dummy", desc("one_per_minute=something"), desc("two_per_minute=something")))
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("overall %v, want OVER_LIMIT", resp.OverallCode)
		}
		st := resp.Statuses
		if st[0].Code != pb.RateLimitResponse_OVER_LIMIT || st[0].CurrentLimit.GetRequestsPerUnit() != 1 || st[0].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("first status %v, want OVER_LIMIT, 1 a MINUTE", st[0])
		}
		if st[1].Code != pb.RateLimitResponse_OK || st[1].CurrentLimit.GetRequestsPerUnit() != 2 || st[1].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("second status %v, want OK, 2 a MINUTE", st[1])
		}
		resp = decide(t, s, rlreq("dummy", desc("two_per_minute=something")))
		if r := resp.Statuses[0].LimitRemaining; r != 1 {
			t.Fatalf("two_per_minute alone then: %d left, want 1 (the refused request charged nothing)", r)
		}
	})
}
