package pace

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseHTTP(t *testing.T) {
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	skewed := now.Add(time.Hour) // the server's clock, an hour ahead
	date := func(t time.Time) string { return t.UTC().Format(http.TimeFormat) }
	tests := []struct {
		name   string
		status int
		header []string
		want   Answer
	}{
		{"ok", 200, nil, Answer{Outcome: OutcomeAccepted}},
		{"429 seconds", 429, []string{"Retry-After", "3"},
			Answer{Outcome: OutcomeRefused, Pause: 3 * time.Second}},
		{"503 seconds", 503, []string{"Retry-After", " 7 "},
			Answer{Outcome: OutcomeRefused, Pause: 7 * time.Second}},
		{"retry-after zero is an answer", 429, []string{"Retry-After", "0"},
			Answer{Outcome: OutcomeRefused}},
		{"date against a skewed Date", 503, []string{"Retry-After", date(skewed.Add(5 * time.Second)), "Date", date(skewed)},
			Answer{Outcome: OutcomeRefused, Pause: 5 * time.Second}},
		{"date without Date", 429, []string{"Retry-After", date(now.Add(4 * time.Second))},
			Answer{Outcome: OutcomeRefused, Pause: 4 * time.Second}},
		{"date in the past", 429, []string{"Retry-After", date(skewed.Add(-time.Minute)), "Date", date(skewed)},
			Answer{Outcome: OutcomeRefused}},
		{"retry-after too long", 429, []string{"Retry-After", "99999999999"},
			Answer{Outcome: OutcomeRefused, Pause: MaxPause}},
		{"retry-after on 200 ignored", 200, []string{"Retry-After", "3"}, Answer{Outcome: OutcomeAccepted}},
		{"429 saying nothing", 429, nil, Answer{Outcome: OutcomeRefused, Backoff: true}},
		{"garbage retry-after", 503, []string{"Retry-After", "soon"}, Answer{Outcome: OutcomeRefused, Backoff: true}},
		{"negative retry-after", 503, []string{"Retry-After", "-5"}, Answer{Outcome: OutcomeRefused, Backoff: true}},
		{"policy", 200, []string{"RateLimit-Policy", `"default";q=100;w=60`},
			Answer{Outcome: OutcomeAccepted, Quota: 100, Window: time.Minute}},
		{"slowest policy", 200, []string{"RateLimit-Policy", `"burst";q=100;w=1, "daily";q=1000;w=86400`},
			Answer{Outcome: OutcomeAccepted, Quota: 1000, Window: 24 * time.Hour}},
		{"policies over two lines", 200, []string{"RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", `"b";q=5;w=1`},
			Answer{Outcome: OutcomeAccepted, Quota: 5, Window: time.Second}},
		{"policy with other parameters", 200, []string{"RateLimit-Policy", `"p";qu="requests";q=10;pk=:AAE=:;w=2`},
			Answer{Outcome: OutcomeAccepted, Quota: 10, Window: 2 * time.Second}},
		{"quoted name holding separators", 200, []string{"RateLimit-Policy", `"a;q=1,w=1";q=10;w=2`},
			Answer{Outcome: OutcomeAccepted, Quota: 10, Window: 2 * time.Second}},
		{"token name, spaces", 200, []string{"RateLimit-Policy", `  default; q=4; w=2 `},
			Answer{Outcome: OutcomeAccepted, Quota: 4, Window: 2 * time.Second}},
		{"policy without w", 200, []string{"RateLimit-Policy", `"p";q=10`}, Answer{Outcome: OutcomeAccepted}},
		{"policy with q=0", 200, []string{"RateLimit-Policy", `"p";q=0;w=1`}, Answer{Outcome: OutcomeAccepted}},
		{"left", 200, []string{"RateLimit", `"default";r=5;t=30`},
			Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 5, Reset: 30 * time.Second}},
		{"fewest left", 200, []string{"RateLimit", `"a";r=5;t=1, "b";r=2;t=60, "c";r=2;t=3`},
			Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 2, Reset: time.Minute}},
		{"r=0 pauses, no backoff", 429, []string{"RateLimit", `"default";r=0;t=5`},
			Answer{Outcome: OutcomeRefused, HasLeft: true, Reset: 5 * time.Second}},
		{"r=0;t=0 says nothing", 429, []string{"RateLimit", `"default";r=0;t=0`},
			Answer{Outcome: OutcomeRefused, HasLeft: true, Backoff: true}},
		{"r without t", 200, []string{"RateLimit", `"default";r=5`}, Answer{Outcome: OutcomeAccepted}},
		{"httplimit's refusal", 429, []string{
			"Retry-After", "1",
			"RateLimit-Policy", `"default";q=10;w=1`,
			"RateLimit", `"default";r=0;t=1`,
		}, Answer{Outcome: OutcomeRefused, Pause: time.Second, Quota: 10, Window: time.Second, HasLeft: true, Reset: time.Second}},
		{"legacy, seconds", 200, []string{"X-RateLimit-Limit", "60", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "30"},
			Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 3, Reset: 30 * time.Second}},
		{"legacy, Unix time against Date", 200, []string{
			"X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", "4102444860", // 2100-01-01 00:01:00 UTC
			"Date", date(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)),
		}, Answer{Outcome: OutcomeAccepted, HasLeft: true, Reset: time.Minute}},
		{"legacy without reset", 200, []string{"X-RateLimit-Remaining", "0"}, Answer{Outcome: OutcomeAccepted}},
		{"legacy and draft: the fewer left", 200, []string{
			"RateLimit", `"default";r=7;t=10`,
			"X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "20",
		}, Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 4, Reset: 20 * time.Second}},
		{"malformed", 200, []string{"RateLimit-Policy", `"unterminated;q=1;w=1`, "RateLimit", `;;,,;r=;t=x,"a";r=-1;t=5`},
			Answer{Outcome: OutcomeAccepted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i+1 < len(tt.header); i += 2 {
				h.Add(tt.header[i], tt.header[i+1])
			}
			if got := ParseHTTP(tt.status, h, func() time.Time { return now }); got != tt.want {
				t.Errorf("ParseHTTP(%d, %v)\n got %+v\nwant %+v", tt.status, tt.header, got, tt.want)
			}
		})
	}
}

func FuzzItems(f *testing.F) {
	f.Add(`"default";q=100;w=60`)
	f.Add(`"a";r=5;t=1, "b";r=2;t=60`)
	f.Add(`"a\";q=1";q=2;w=3,`)
	f.Add(`;;,,"`)
	f.Fuzz(func(t *testing.T, v string) {
		n := 0
		items(v, func(p params) {
			n++
			if p.has&hasQ == 0 && p.q != 0 || p.has&hasW == 0 && p.w != 0 {
				t.Fatalf("%q: a parameter not found has a value: %+v", v, p)
			}
		})
		if n > len(v)+1 {
			t.Fatalf("%q: %d members from %d bytes", v, n, len(v))
		}
		ParseHTTP(429, http.Header{"Ratelimit": {v}, "Ratelimit-Policy": {v}, "Retry-After": {v}}, time.Now)
	})
}

func TestParseHTTPAllocs(t *testing.T) {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=10;w=1`)
	h.Set("RateLimit", `"default";r=9;t=1`)
	if n := testing.AllocsPerRun(100, func() { ParseHTTP(200, h, time.Now) }); n != 0 {
		t.Errorf("ParseHTTP of an allowed answer allocates %v times, want 0", n)
	}
}

// TestParseHTTPBeyondMaxPause checks that a reset or a delay beyond
// MaxPause counts as MaxPause in every form a server may write it: as
// seconds, as a Unix time, as an HTTP date, and as a number too large for
// an int64.
func TestParseHTTPBeyondMaxPause(t *testing.T) {
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	const huge = "99999999999999999999" // past the largest int64
	spent := Answer{Outcome: OutcomeAccepted, HasLeft: true, Reset: MaxPause}
	paused := Answer{Outcome: OutcomeRefused, Pause: MaxPause}
	tests := []struct {
		name   string
		status int
		header []string
		want   Answer
	}{
		{"RateLimit t at the largest int64", 200, []string{"RateLimit", `"d";r=0;t=9223372036854775807`}, spent},
		{"RateLimit t past the largest int64", 200, []string{"RateLimit", `"d";r=0;t=` + huge}, spent},
		{"X-RateLimit-Reset in seconds, over a day", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "99999999"}, spent},
		{"X-RateLimit-Reset, a Unix time in a year", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(now.AddDate(1, 0, 0).Unix(), 10)}, spent},
		{"X-RateLimit-Reset at the largest int64", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "9223372036854775807"}, spent},
		{"X-RateLimit-Reset past the largest int64", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", huge}, spent},
		{"X-RateLimit-Reset against a Date long past", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "9223372036854775807",
			"Date", "Mon, 01 Jan 0001 00:00:00 GMT"}, spent},
		{"Retry-After at the largest int64", 429, []string{"Retry-After", "9223372036854775807"}, paused},
		{"Retry-After past the largest int64", 429, []string{"Retry-After", huge}, paused},
		{"Retry-After, a date in the year 9999", 429, []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}, paused},
		{"Retry-After, a date in 9999 against a Date long past", 429, []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT",
			"Date", "Mon, 01 Jan 0001 00:00:00 GMT"}, paused},
		{"RateLimit-Policy w past the largest int64", 200, []string{"RateLimit-Policy", `"d";q=1;w=` + huge},
			Answer{Outcome: OutcomeAccepted, Quota: 1, Window: MaxPause}},
		{"Retry-After below the smallest int64", 429, []string{"Retry-After", "-" + huge}, Answer{Outcome: OutcomeRefused, Backoff: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i+1 < len(tt.header); i += 2 {
				h.Add(tt.header[i], tt.header[i+1])
			}
			if got := ParseHTTP(tt.status, h, func() time.Time { return now }); got != tt.want {
				t.Errorf("ParseHTTP(%d, %v)\n got %+v\nwant %+v", tt.status, tt.header, got, tt.want)
			}
		})
	}
}
