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
// as configuration gives it (see UnmarshalText). The zero Limit is not valid,
// and means "no limit set" to the front ends' configurations.
type Limit struct {
	// Events is how many events the limit allows per Period.
	Events int
	// Period is the span of time Events are counted over.
	Period time.Duration
}

// errInvalidLimit is what the errors of an invalid limit wrap: those of
// UnmarshalText and Validate, NewGate and a GCRA's options.
var errInvalidLimit = errors.New("limits: invalid limit")

// periodUnits are the period names UnmarshalText accepts after the slash.
var periodUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "ms": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
}

// UnmarshalText sets l to the limit text writes as events, a slash and a
// period, as configuration files and environment variables give it: the
// period is a unit ("10/s", "100/min", "5000/day"; also ms, sec, second,
// m, minute, h, hour, d and plurals) or a Go duration ("100/30s",
// "20/1m30s"). Spaces around the parts are ignored. The events must be a
// positive integer and the period positive. An error, naming what is
// wrong, leaves l as it was.
func (l *Limit) UnmarshalText(text []byte) error {
	v, err := parseLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// MarshalText returns l as String writes it.
func (l Limit) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// parseLimit parses a limit as UnmarshalText does.
func parseLimit(s string) (Limit, error) {
	events, period, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, fmt.Errorf("%w %q: want events/period, such as 100/min", errInvalidLimit, s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(events))
	if err != nil {
		return Limit{}, fmt.Errorf("%w %q: events must be an integer", errInvalidLimit, s)
	}
	period = strings.TrimSpace(period)
	d, ok := periodUnits[strings.ToLower(period)]
	if !ok {
		if d, err = time.ParseDuration(period); err != nil {
			return Limit{}, fmt.Errorf("%w %q: period must be a unit (s, min, h, day) or a duration (30s)", errInvalidLimit, s)
		}
	}
	l := Limit{Events: n, Period: d}
	if p := l.problem(); p != "" {
		return Limit{}, fmt.Errorf("%w %q: %s", errInvalidLimit, s, p)
	}
	return l, nil
}

// Validate returns an error unless l has at least
// one event and a positive period, and a GCRA with the default burst can
// keep it (its period is at most about 73 years).
func (l Limit) Validate() error {
	if p := l.problem(); p != "" {
		return fmt.Errorf("%w: %s", errInvalidLimit, p)
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

// String formats l as UnmarshalText reads it: "100/min", or "100/1m30s" when
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
