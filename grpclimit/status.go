package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/front"
)

// ErrorDomain is the Domain of the ErrorInfo detail that refusals carry.
const ErrorDomain = "github.com/limitsgo/limits"

// PushbackTrailer is the trailer metadata key whose value, in
// milliseconds, tells gRPC's retry policy how long to wait before it tries
// a call again; a negative value tells it not to.
const PushbackTrailer = "grpc-retry-pushback-ms"

// refusal is a refusal's status error and its trailer.
type refusal struct {
	reason  string
	err     error
	trailer metadata.MD
}

// messages are the status messages of refusals, after the reason code.
var messages = map[string]string{
	ReasonRateLimited:          "too many calls from this client; retry after the delay given",
	ReasonServerBusy:           "the server is at capacity; retry after the delay given",
	ReasonRequestTimeout:       "the call took longer than the server allows",
	ReasonLimiterError:         "the rate limiter could not decide; retry after the delay given",
	ReasonTableFull:            "the server is tracking as many clients as it can; retry after the delay given",
	ReasonCostAboveBurst:       "the call costs more than this client may ever spend at once; retrying will not help",
	ReasonInvalidCost:          "the server gave the call an invalid cost",
	ReasonConcurrencyLimited:   "too many calls or streams from this client in progress at once",
	ReasonConcurrencyTableFull: "too many clients have calls or streams in progress; retry after the delay given",
}

// newRefusal builds the refusal of a call for reason; rate and d are the
// deciding policy and its Decision, for refusals a rate policy made.
//
// The code is ResourceExhausted for what the client itself used up (its
// rate, its concurrency, a cost above its burst), Unavailable for what
// the server lacks (capacity, room in a table, a working limiter),
// DeadlineExceeded for the deadline, and Internal for a negative cost. A
// refusal that waiting cures carries a RetryInfo detail and the pushback
// trailer, with the limiter's exact RetryAfter for rate_limited and
// BusyRetryAfter otherwise; one it cannot carries a pushback of -1, so
// that gRPC does not retry, and no RetryInfo.
func (it *Interceptor) newRefusal(reason string, rate *front.Rate, d limits.Decision) refusal {
	code, retry, pushback := codes.Unavailable, it.busyRetry, true
	switch reason {
	case ReasonRateLimited:
		code, retry = codes.ResourceExhausted, max(d.RetryAfter, 0)
	case ReasonConcurrencyLimited:
		code = codes.ResourceExhausted
	case ReasonCostAboveBurst:
		code, retry = codes.ResourceExhausted, -1
	case ReasonInvalidCost:
		code, retry = codes.Internal, -1
	case ReasonRequestTimeout:
		code, retry, pushback = codes.DeadlineExceeded, -1, false
	}
	info := &errdetails.ErrorInfo{Reason: strings.ToUpper(reason), Domain: ErrorDomain}
	details := []protoadapt.MessageV1{info}
	if rate != nil {
		info.Metadata = map[string]string{"policy": rate.Name}
	}
	if retry >= 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	if rate != nil && (reason == ReasonRateLimited || reason == ReasonCostAboveBurst) {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "policy:" + rate.Name,
			QuotaId:     rate.Name,
			Description: fmt.Sprintf("%d calls per %v, burst %d; this call costs %d", d.Limit, d.Period, d.Burst, d.Cost),
		}}})
	}
	st, err := status.New(code, reason+": "+messages[reason]).WithDetails(details...)
	if err != nil {
		// Cannot happen (the details are well-formed messages); keep the
		// code and reason rather than fail the refusal.
		st = status.New(code, reason+": "+messages[reason])
	}
	r := refusal{reason: reason, err: st.Err()}
	if pushback {
		ms := int64(-1)
		if retry >= 0 {
			ms = millis(retry)
		}
		r.trailer = metadata.Pairs(PushbackTrailer, strconv.FormatInt(ms, 10))
	}
	return r
}

// millis returns d in whole milliseconds, rounded up, so that a client
// obeying it never comes back early.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// trailerSetter sets a call's trailer: a grpc.ServerStream, or
// unaryTrailer.
type trailerSetter interface{ SetTrailer(metadata.MD) }

// unaryTrailer sets the trailer of the unary call of its context.
type unaryTrailer struct{ ctx context.Context }

func (t unaryTrailer) SetTrailer(md metadata.MD) { grpc.SetTrailer(t.ctx, md) }

// refuse sends r's trailer, logs the refusal and returns its error. It
// counts the refusal in its method's counters only (see countMethod).
func (it *Interceptor) refuse(ctx context.Context, tr trailerSetter, method, key string, r refusal) error {
	it.countMethod(method, r.reason)
	if r.trailer != nil {
		tr.SetTrailer(r.trailer)
	}
	it.log(ctx, "grpclimit: call refused", r.reason, method, key, nil)
	return r.err
}

// refuseRate refuses a call or message for a rate layer's refusal.
func (it *Interceptor) refuseRate(ctx context.Context, tr trailerSetter, method string, ref *front.Refusal) error {
	r := it.newRefusal(ref.Reason, ref.Rate, ref.Dec)
	it.countMethod(method, r.reason)
	if r.trailer != nil {
		tr.SetTrailer(r.trailer)
	}
	it.log(ctx, "grpclimit: call refused", r.reason, method, ref.Key, ref.Err)
	return r.err
}

// ReasonOf returns the reason code of a refusal by an Interceptor, such as
// "rate_limited", read from the ErrorInfo detail of err, the error of a
// call as its client sees it; "" if err is not such a refusal.
func ReasonOf(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return strings.ToLower(info.Reason)
		}
	}
	return ""
}

// countMethod counts a refusal of a call of method, once Method has been
// called, in the counters of its route; the Interceptor's own counters
// are counted where the refusal is decided.
func (it *Interceptor) countMethod(method, reason string) {
	if it.routes.Load() == nil {
		return
	}
	it.counters(it.route(method)).Count(reason)
}
