package grpclimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// ErrorDomain is the Domain of the ErrorInfo detail that refusals carry.
const ErrorDomain = "github.com/limitsgo/limits"

// PushbackTrailer is the trailer metadata key whose value, in
// milliseconds, tells gRPC's retry policy how long to wait before it tries
// a call again; a negative value tells it not to.
const PushbackTrailer = "grpc-retry-pushback-ms"

// answer is how a refusal of one reason is answered: its code, its
// status message after the reason, and whether it carries a retry delay
// (RetryInfo and pushback) and a pushback at all.
type answer struct {
	code     codes.Code
	message  string
	retry    bool // a RetryInfo and a pushback of the delay, or a pushback of -1
	pushback bool
}

// answers holds the answer to each reason.
var answers = map[limits.Reason]answer{
	limits.ReasonRateLimited:    {codes.ResourceExhausted, "too many calls from this client; retry after the delay given", true, true},
	admit.ServerBusy:            {codes.Unavailable, "the server is at capacity; retry after the delay given", true, true},
	admit.RequestTimeout:        {codes.DeadlineExceeded, "the call took longer than the server allows", false, false},
	admit.LimiterError:          {codes.Unavailable, "the rate limiter could not decide; retry after the delay given", true, true},
	limits.ReasonTableFull:      {codes.Unavailable, "the server is tracking as many clients as it can; retry after the delay given", true, true},
	limits.ReasonCostAboveBurst: {codes.ResourceExhausted, "the call costs more than this client may ever spend at once; retrying will not help", false, true},
	limits.ReasonInvalidCost:    {codes.Internal, "the server gave the call an invalid cost", false, true},
	admit.ConcurrencyLimited:    {codes.ResourceExhausted, "too many calls or streams from this client in progress at once", true, true},
	admit.ConcurrencyTableFull:  {codes.Unavailable, "too many clients have calls or streams in progress; retry after the delay given", true, true},
}

// refusal is a refusal's status error and its trailer.
type refusal struct {
	err     error
	trailer metadata.MD
	retry   time.Duration // the delay it was made with, for busyCache
}

// newRefusal builds the status error and trailer of ref. A refusal that
// waiting cures carries a RetryInfo detail and the pushback trailer, with
// ref's RetryAfter (the limiter's exact answer for rate_limited); one it
// cannot carries a pushback of -1, so that gRPC does not retry, and no
// RetryInfo.
func newRefusal(ref *admit.Refusal) refusal {
	a := answers[ref.Reason]
	reason := ref.Reason.String()
	info := &errdetails.ErrorInfo{Reason: strings.ToUpper(reason), Domain: ErrorDomain}
	details := []protoadapt.MessageV1{info}
	if ref.Policy != "" {
		info.Metadata = map[string]string{"policy": ref.Policy}
	}
	if a.retry {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(ref.RetryAfter)})
	}
	if ref.Policy != "" && (ref.Reason == limits.ReasonRateLimited || ref.Reason == limits.ReasonCostAboveBurst) {
		d := ref.Decision
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "policy:" + ref.Policy,
			QuotaId:     ref.Policy,
			Description: fmt.Sprintf("%d calls per %v, burst %d; this call costs %d", d.Limit, d.Period, d.Burst, d.Cost),
		}}})
	}
	st, err := status.New(a.code, reason+": "+a.message).WithDetails(details...)
	if err != nil {
		// Cannot happen (the details are well-formed messages); keep the
		// code and reason rather than fail the refusal.
		st = status.New(a.code, reason+": "+a.message)
	}
	r := refusal{err: st.Err(), retry: ref.RetryAfter}
	if a.pushback {
		ms := int64(-1)
		if a.retry {
			ms = millis(ref.RetryAfter)
		}
		r.trailer = metadata.Pairs(PushbackTrailer, strconv.FormatInt(ms, 10))
	}
	return r
}

// busyCache keeps the refusals that depend on nothing but their reason and
// delay, such as server_busy, so that a flood of them costs no new status
// each.
type busyCache [16]atomic.Pointer[refusal]

// get returns the refusal of ref, from the cache if ref names no policy.
func (c *busyCache) get(ref *admit.Refusal) refusal {
	if ref.Policy != "" || int(ref.Reason) >= len(c) {
		return newRefusal(ref)
	}
	p := &c[ref.Reason]
	if r := p.Load(); r != nil && r.retry == ref.RetryAfter {
		return *r
	}
	r := newRefusal(ref)
	p.Store(&r)
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

// refusal returns the status error answering err, Admit's error: a
// refusal's, with its trailer set, or the client's own reason for a call
// it gave up.
func (it *Interceptor) refusal(ctx context.Context, tr trailerSetter, err error) error {
	ref, ok := err.(*admit.Refusal)
	if !ok {
		return status.FromContextError(err).Err()
	}
	r := it.busy.get(ref)
	if r.trailer != nil {
		tr.SetTrailer(r.trailer)
	}
	return r.err
}

// ReasonOf returns the reason of a refusal by an Interceptor, such as
// limits.ReasonRateLimited, read from the ErrorInfo detail of err, the
// error of a call as its client sees it; admit.Allowed if err is
// not such a refusal.
func ReasonOf(err error) limits.Reason {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return admit.Allowed
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			var r limits.Reason
			if r.UnmarshalText([]byte(strings.ToLower(info.Reason))) == nil {
				return r
			}
		}
	}
	return admit.Allowed
}
