package admit

import "github.com/limitsgo/limits"

// The reasons of the layers other than the limiters', and of a limiter
// that failed: with Allowed and the limiters' own
// (limits.ReasonRateLimited, limits.ReasonTableFull,
// limits.ReasonCostAboveBurst, limits.ReasonInvalidCost), every outcome
// of a request. Their String is the code responses, logs and metric
// labels carry, such as "server_busy".
const (
	// Allowed is the reason of a request every layer let through.
	Allowed limits.Reason = 0
	// LimiterError: a limiter failed or did not answer in time, and the
	// policy fails closed ("limiter_error").
	LimiterError = limits.ReasonUnavailable
)

// The values follow limits.ReasonUnavailable, whose codes package limits
// knows.
const (
	// Exempt: the request matched Config.Exempt and bypassed every layer.
	Exempt limits.Reason = iota + limits.ReasonUnavailable + 1
	// ServerBusy: the gate was full ("server_busy").
	ServerBusy
	// RequestTimeout: the request ran past Config.Timeout
	// ("request_timeout").
	RequestTimeout
	// ConcurrencyLimited: the client had as many requests in progress as
	// Config.MaxInFlightPerClient allows ("concurrency_limited").
	ConcurrencyLimited
	// ConcurrencyTableFull: too many clients had requests in progress
	// ("concurrency_table_full").
	ConcurrencyTableFull

	numReasons = int(ConcurrencyTableFull) + 1
)

// Class sorts refusals by what a client can do about them: Busy, the
// server lacks capacity (a full gate or table, a deadline passed); Limited,
// the client used up its own allowance (its rate, its concurrency, a cost
// above its burst); Failed, the server could not decide (a limiter
// failed, a cost was invalid). Front ends answer each class with a status
// of their own (HTTP 503, 429 and 500 or 503; gRPC Unavailable,
// ResourceExhausted and Internal or Unavailable).
type Class uint8

// The classes of refusals; the zero Class is that of no refusal.
const (
	Busy Class = iota + 1
	Limited
	Failed
)

// classOf returns the class of a refusal's reason.
func classOf(r limits.Reason) Class {
	switch r {
	case limits.ReasonRateLimited, limits.ReasonCostAboveBurst, ConcurrencyLimited:
		return Limited
	case LimiterError, limits.ReasonInvalidCost:
		return Failed
	}
	return Busy
}

// String returns "busy", "limited" or "failed".
func (c Class) String() string {
	switch c {
	case Busy:
		return "busy"
	case Limited:
		return "limited"
	case Failed:
		return "failed"
	}
	return "none"
}
