package grpclimit

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits/pace"
)

// ClientInterceptor is a pair of gRPC client interceptors that keep a
// client under the limits of the servers it calls, as
// httplimit.Transport does for HTTP (docs/CLIENT.md): they pace calls
// per key (the ClientConn's target, by default), pause a key for the
// delay a refusal gives, and retry refusals within a budget.
//
//	ci := &grpclimit.ClientInterceptor{Pace: pace.Config{Rate: limits.Limit{Events: 10, Period: time.Second}}}
//	conn, err := grpc.NewClient(target, append(ci.DialOptions(), creds)...)
//
// A key's calls, and its streams as they open, leave in the order they
// came, one every Period/Events of Rate, never two closer; without Rate
// they are not paced. A call refused with ResourceExhausted or
// Unavailable pauses its key for the delay of its RetryInfo detail or of
// its PushbackTrailer, whichever is longer; the calls queued meanwhile
// then leave one at the pace after the other. A refusal that gives no
// delay does not pause. A call whose turn would come after its context's
// deadline fails at once with codes.DeadlineExceeded, and an error that
// wraps context.DeadlineExceeded and says whether the pause or the pace
// holds it.
//
// A unary call so refused is retried, in its key's turn, only if the
// refusal gave a delay (a negative pushback forbids it), within
// MaxRetries, MaxRetryWait, the deadline and the key's retry budget; and
// never when the ClientConn's service config gives the method a retry
// policy, as gRPC then retries it itself: the interceptor only learns the
// pause from the final answer, so that no call is retried twice over.
// Streams are not retried.
//
// The zero ClientInterceptor is usable, with the defaults of
// httplimit.Transport. Its fields must not change after its first call.
// It is safe for concurrent use and starts no goroutine.
type ClientInterceptor struct {
	// Key returns the key a call is paced under; nil means the target of
	// its ClientConn.
	Key func(ctx context.Context, method string) string
	// Pace configures the pacing, the retries and client-side
	// throttling, as for an httplimit.Transport (see pace.Config); its
	// zero value is usable. There is no pace learnt from answers: the
	// pace is Pace.Rate, and the zero Limit paces nothing. A call refused
	// locally by throttling fails with codes.Unavailable and an error
	// wrapping pace.ErrThrottled.
	Pace pace.Config

	once      sync.Once
	pacer     *pace.Pacer
	err       error
	throttled error
}

// throttledError is the error of a call refused locally: it wraps
// pace.ErrThrottled and has the status Unavailable, with an ErrorInfo of
// reason CLIENT_THROTTLED.
type throttledError struct{ st *status.Status }

func (e throttledError) Error() string              { return e.st.Message() }
func (e throttledError) Unwrap() error              { return pace.ErrThrottled }
func (e throttledError) GRPCStatus() *status.Status { return e.st }

func (c *ClientInterceptor) init() (*pace.Pacer, error) {
	c.once.Do(func() {
		st, err := status.New(codes.Unavailable, "client_throttled: call refused locally: the server refuses more than it accepts").
			WithDetails(&errdetails.ErrorInfo{Reason: "CLIENT_THROTTLED", Domain: ErrorDomain})
		if err != nil {
			c.err = err
			return
		}
		c.throttled = throttledError{st}
		cfg := c.Pace
		cfg.Prefix, cfg.Throttled = "grpclimit: ClientInterceptor", c.throttled
		c.pacer, c.err = pace.New(cfg)
		if c.err != nil {
			c.err = status.Error(codes.Internal, c.err.Error())
		}
	})
	return c.pacer, c.err
}

// DialOptions returns the options that install both interceptors in a
// ClientConn, chained ahead of any installed by later options.
func (c *ClientInterceptor) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.Unary), grpc.WithChainStreamInterceptor(c.Stream)}
}

func (c *ClientInterceptor) key(ctx context.Context, method string, cc *grpc.ClientConn) string {
	if c.Key != nil {
		return c.Key(ctx, method)
	}
	if cc != nil {
		return cc.Target()
	}
	return ""
}

// Unary is a grpc.UnaryClientInterceptor: it sends the call in its key's
// turn, learns from the answer and retries it as the ClientInterceptor
// allows. It returns an error without sending the call when its turn
// would come after its context's deadline, when throttling refuses it, or
// when its key is new and the table is full.
func (c *ClientInterceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p, err := c.init()
	if err != nil {
		return err
	}
	key := c.key(ctx, method, cc)
	var last error
	for attempt := 0; ; attempt++ {
		tk, err := p.Acquire(ctx, key, attempt == 0)
		if err != nil {
			if attempt > 0 {
				return last
			}
			return c.acquireErr(err)
		}
		var trailer metadata.MD
		err = invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
		a, told := answerOf(ctx, err, trailer)
		// The service config is read after the call, which is when an
		// idle ClientConn has one.
		retry := told && attempt < p.MaxRetries() && (cc == nil || cc.GetMethodConfig(method).RetryPolicy == nil)
		if !p.Done(ctx, tk, a, retry) {
			return err
		}
		last = err
	}
}

// Stream is a grpc.StreamClientInterceptor: it opens the stream in its
// key's turn, and learns from the stream's status when RecvMsg returns
// it. It does not retry.
func (c *ClientInterceptor) Stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	p, err := c.init()
	if err != nil {
		return nil, err
	}
	key := c.key(ctx, method, cc)
	tk, err := p.Acquire(ctx, key, true)
	if err != nil {
		return nil, c.acquireErr(err)
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		a, _ := answerOf(ctx, err, nil)
		p.Done(ctx, tk, a, false)
		return nil, err
	}
	p.Done(ctx, tk, pace.Answer{}, false) // counted at its end
	return &pacedStream{ClientStream: cs, ctx: ctx, p: p, key: key}, nil
}

// pacedStream reports its stream's status to the pacer, once.
type pacedStream struct {
	grpc.ClientStream
	ctx  context.Context
	p    *pace.Pacer
	key  string
	done bool // RecvMsg is not called concurrently with itself
}

func (s *pacedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && !s.done {
		s.done = true
		var a pace.Answer
		if err == io.EOF {
			a.Outcome = pace.OutcomeAccepted
		} else {
			a, _ = answerOf(s.ctx, err, s.Trailer())
		}
		s.p.Note(s.key, a)
	}
	return err
}

// answerOf reads what the result err of a call, with trailer, says, and
// whether it gave a delay after which the call may be retried.
func answerOf(ctx context.Context, err error, trailer metadata.MD) (a pace.Answer, told bool) {
	if err == nil {
		a.Outcome = pace.OutcomeAccepted
		return a, false
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.ResourceExhausted, codes.Unavailable:
		a.Outcome = pace.OutcomeRefused
	case codes.Canceled, codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return a, false // the caller's own end
		}
		a.Outcome = pace.OutcomeFailed
		return a, false
	default:
		a.Outcome = pace.OutcomeAccepted // served, with an error of its own
		return a, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			told = true
			a.Pause = max(a.Pause, ri.GetRetryDelay().AsDuration())
		}
	}
	if v := trailer.Get(PushbackTrailer); len(v) > 0 {
		// A value out of range counts as the largest or smallest there is.
		if ms, err := strconv.ParseInt(v[0], 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			if ms < 0 {
				a.NoRetry = true
			} else {
				told = true
				a.Pause = max(a.Pause, time.Duration(min(ms, int64(pace.MaxPause/time.Millisecond)))*time.Millisecond)
			}
		}
	}
	return a, told && !a.NoRetry
}

// deadlineError is a *pace.WaitError with the status
// DeadlineExceeded.
type deadlineError struct{ err error }

func (e deadlineError) Error() string { return e.err.Error() }
func (e deadlineError) Unwrap() error { return e.err }
func (e deadlineError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.err.Error())
}

// acquireErr returns the error of a call Acquire refused.
func (c *ClientInterceptor) acquireErr(err error) error {
	switch {
	case err == c.throttled:
		return err
	case pace.IsWaitError(err):
		return deadlineError{err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.ResourceExhausted, err.Error()) // the table is full
}

// Stats returns the ClientInterceptor's counters; it is safe to call at
// any time.
func (c *ClientInterceptor) Stats() pace.Stats {
	p, err := c.init()
	if err != nil {
		return pace.Stats{Protocol: "grpc"}
	}
	s := p.Stats()
	s.Protocol = "grpc"
	return s
}
