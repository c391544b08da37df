package limits

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
)

// Limit is a number of events allowed per period, such as 100 per minute,
// as configuration gives it (see ParseLimit). The zero Limit is not valid,
// and means "no limit set" to the front ends' configurations.
type Limit struct {
	// Events is how many events the limit allows per Period.
	Events int
	// Period is the span of time Events are counted over.
	Period time.Duration
}

// ErrInvalidLimit is returned, wrapped with the offending text, by
// ParseLimit and Limit.Validate.
var ErrInvalidLimit = errors.New("limits: invalid limit")

// periodUnits are the period names ParseLimit accepts after the slash.
var periodUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "ms": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
}

// ParseLimit parses a limit written as events, a slash and a period: the
// period is a unit ("10/s", "100/min", "5000/day"; also ms, sec, second,
// m, minute, h, hour, d and plurals) or a Go duration ("100/30s",
// "20/1m30s"). Spaces around the parts are ignored. The events must be a
// positive integer and the period positive. Errors wrap ErrInvalidLimit.
func ParseLimit(s string) (Limit, error) {
	events, period, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("%w %q: want events/period, such as 100/min", ErrInvalidLimit, s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(events))
	if err != nil {
		return Limit{}, fmt.Errorf("%w %q: events must be an integer", ErrInvalidLimit, s)
	}
	period = strings.TrimSpace(period)
	d, ok := periodUnits[strings.ToLower(period)]
	if !ok {
		if d, err = time.ParseDuration(period); err != nil {
			return Limit{}, fmt.Errorf("%w %q: period must be a unit (s, min, h, day) or a duration (30s)", ErrInvalidLimit, s)
		}
	}
	l := Limit{Events: n, Period: d}
	if p := l.problem(); p != "" {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrInvalidLimit, s, p)
	}
	return l, nil
}

// Validate returns an error wrapping ErrInvalidLimit unless l has at least
// one event and a positive period, and a GCRA with the default burst can
// keep it (its period is at most about 73 years).
func (l Limit) Validate() error {
	if p := l.problem(); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidLimit, p)
	}
	return nil
}

// problem says what is wrong with l, or returns "".
func (l Limit) problem() string {
	if l.Events < 1 {
		return fmt.Sprintf("events must be >= 1, got %d", l.Events)
	}
	if l.Period <= 0 {
		return fmt.Sprintf("period must be > 0, got %v", l.Period)
	}
	if _, err := gcra.New(l.Events, l.Period, l.Events); err != nil {
		return fmt.Sprintf("period %v is too long", l.Period)
	}
	return ""
}

// String formats l as ParseLimit reads it: "100/min", or "100/1m30s" when
// the period is not one of second, minute, hour or day.
func (l Limit) String() string {
	unit := l.Period.String()
	switch l.Period {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "min"
	case time.Hour:
		unit = "hour"
	case 24 * time.Hour:
		unit = "day"
	}
	return strconv.Itoa(l.Events) + "/" + unit
}
