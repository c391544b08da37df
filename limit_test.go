package limits

import (
	"errors"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want Limit
	}{
		{"100/min", Limit{100, time.Minute}},
		{"10/s", Limit{10, time.Second}},
		{"5000/day", Limit{5000, 24 * time.Hour}},
		{" 7 / Hour ", Limit{7, time.Hour}},
		{"3/minutes", Limit{3, time.Minute}},
		{"100/30s", Limit{100, 30 * time.Second}},
		{"20/1m30s", Limit{20, 90 * time.Second}},
		{"1/500ms", Limit{1, 500 * time.Millisecond}},
	}
	for _, tt := range tests {
		got, err := parseLimit(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseLimit(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "100", "/min", "ten/min", "100/", "100/fortnight", "0/min", "-5/s", "5/-1s", "5/0s", "1.5/s", "100/min/s", "99999999999999999999/s", "1/2562047h", "3/700000h"} {
		if l, err := parseLimit(in); !errors.Is(err, errInvalidLimit) {
			t.Errorf("parseLimit(%q) = %v, %v; want errInvalidLimit", in, l, err)
		}
	}
}

func TestLimitString(t *testing.T) {
	for _, tt := range []struct {
		l    Limit
		want string
	}{
		{Limit{100, time.Minute}, "100/min"},
		{Limit{10, time.Second}, "10/s"},
		{Limit{5, time.Hour}, "5/hour"},
		{Limit{5000, 24 * time.Hour}, "5000/day"},
		{Limit{20, 90 * time.Second}, "20/1m30s"},
	} {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.l, got, tt.want)
		}
		if back, err := parseLimit(tt.want); err != nil || back != tt.l {
			t.Errorf("parseLimit(%q) = %v, %v; want %v", tt.want, back, err, tt.l)
		}
	}
}

func TestLimitValidate(t *testing.T) {
	if err := (Limit{1, time.Second}).Validate(); err != nil {
		t.Errorf("valid limit: %v", err)
	}
	for _, l := range []Limit{{0, time.Second}, {1, 0}, {-1, -time.Second}} {
		if err := l.Validate(); !errors.Is(err, errInvalidLimit) {
			t.Errorf("%#v.Validate() = %v, want errInvalidLimit", l, err)
		}
	}
}

// FuzzParseLimit checks that ParseLimit never panics, that what it accepts
// is valid, and that it reads back what String writes.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"100/min", "10/s", "5000/day", "100/30s", "0/s", "1/", "/", "9223372036854775807/ns", "1/2562047h47m16.854775807s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLimit(s)
		if err != nil {
			if !errors.Is(err, errInvalidLimit) {
				t.Fatalf("parseLimit(%q): error %v does not wrap errInvalidLimit", s, err)
			}
			return
		}
		if l.Validate() != nil {
			t.Fatalf("parseLimit(%q) accepted the invalid %#v", s, l)
		}
		if back, err := parseLimit(l.String()); err != nil || back != l {
			t.Fatalf("parseLimit(%q) = %#v, but %q reads back as %#v, %v", s, l, l.String(), back, err)
		}
		NewGCRA(l.Events, l.Period) // must not panic for any accepted limit
	})
}
