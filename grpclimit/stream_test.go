package grpclimit

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestStreamGivesBackGate checks each way a stream becomes established and
// gives its place in the gate back, while a unary call probes the gate:
// refused while the stream is set up, served once it is established.
func TestStreamGivesBackGate(t *testing.T) {
	for _, tt := range []struct {
		name string
		// establish runs in the handler after its set-up, and makes the
		// stream established; blocks says it does so by waiting on the
		// client, and does not return.
		establish func(ss grpc.ServerStream) error
		blocks    bool
	}{
		{"first send", func(ss grpc.ServerStream) error { return ss.SendMsg(wrapperspb.String("hello")) }, false},
		{"header sent", func(ss grpc.ServerStream) error { return ss.SendHeader(nil) }, false},
		{"waiting for a second message", func(ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return err
			}
			return ss.RecvMsg(new(wrapperspb.StringValue)) // blocks until the client sends again
		}, true},
		{"ReleaseCapacity", func(ss grpc.ServerStream) error { ReleaseCapacity(ss.Context()); return nil }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			started, setup, established, end := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1}})
			srv := newServer(t, it, &echo{chat: func(ss grpc.ServerStream) error {
				close(started)
				<-setup // the costly set-up
				if tt.blocks {
					go tt.establish(ss)
				} else if err := tt.establish(ss); err != nil {
					return err
				}
				close(established)
				<-end
				return nil
			}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			conn := srv.dial("192.0.2.1:1")
			cs, err := openChat(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(wrapperspb.String("first")); err != nil {
				t.Fatal(err)
			}
			<-started
			if _, _, err := say(conn, "x"); ReasonOf(err) != admit.ServerBusy {
				t.Errorf("a call while the stream is set up: %v, want server_busy", err)
			}
			close(setup)
			<-established
			waitFor(t, "out of the gate", func() bool { return inFlight(it) == 0 })
			mustSay(t, conn, "while the stream is open")
			close(end)
			cs.CloseSend()
			for cs.RecvMsg(new(wrapperspb.StringValue)) == nil {
			}
		})
	}
}

// TestStreamTimeoutGivesBackGate checks the last way a stream gives its
// place in the gate back: not established within Timeout, it leaves the
// gate then, while its handler goes on.
func TestStreamTimeoutGivesBackGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, Timeout: 300 * time.Millisecond}})
		ctxs := peers(2)
		started, end := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- it.Stream(nil, &sendStream{ctx: ctxs[0]}, &grpc.StreamServerInfo{FullMethod: methodChat}, func(any, grpc.ServerStream) error {
				close(started)
				<-end // a set-up that never ends
				return nil
			})
		}()
		<-started
		time.Sleep(299 * time.Millisecond)
		if _, err := it.Unary(ctxs[1], nil, benchInfo, noop); ReasonOf(err) != admit.ServerBusy {
			t.Errorf("a call while the stream is set up, before Timeout: %v, want server_busy", err)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := inFlight(it); n != 0 {
			t.Errorf("%d places taken in the gate once Timeout passed, want 0", n)
		}
		if _, err := it.Unary(ctxs[1], nil, benchInfo, noop); err != nil {
			t.Errorf("a call once Timeout passed: %v", err)
		}
		close(end)
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// TestMaxStreamsPerClient opens streams up to the cap, checks that one
// more is refused, and that a stream the client cancels gives its place
// back.
func TestMaxStreamsPerClient(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{MaxStreamsPerClient: 2, BusyRetryAfter: 2 * time.Second, MaxInFlight: 10}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	var cancels []context.CancelFunc
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels = append(cancels, cancel)
		cs, err := openChat(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := chatOnce(cs, "hi"); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := openChat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = chatOnce(cs, "third")
	if err == io.EOF {
		err = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	if got, want := describe(err, cs.Trailer()), (refusalOf{codes.ResourceExhausted, admit.ConcurrencyLimited, 2 * time.Second, "", false, "2000"}); got != want {
		t.Errorf("a third stream: %v, want %v", got, want)
	}
	// Another client, and unary calls, are not counted against it.
	mustSay(t, conn, "unary")
	other, err := openChat(ctx, srv.dial("192.0.2.2:1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chatOnce(other, "hi"); err != nil {
		t.Errorf("another client's stream: %v", err)
	}

	// The cancelled stream's place is given back once its handler returns.
	cancels[0]()
	refused := 0
	waitFor(t, "the cancelled stream's place given back", func() bool {
		cs, err := openChat(ctx, conn)
		if err == nil {
			_, err = chatOnce(cs, "again")
		}
		if ReasonOf(err) == admit.ConcurrencyLimited {
			refused++
			return false
		}
		if err != nil {
			t.Fatalf("a stream after one was cancelled: %v", err)
		}
		return true
	})
	// And only one was: the client is at its cap again.
	cs, err = openChat(ctx, conn)
	if err == nil {
		_, err = chatOnce(cs, "one too many")
	}
	if ReasonOf(err) != admit.ConcurrencyLimited {
		t.Errorf("a third stream again: %v, want concurrency_limited", err)
	}
	if s := it.Stats(); s.Requests[admit.ConcurrencyLimited] != uint64(2+refused) || s.Gate.InFlight != 0 {
		t.Errorf("Stats %v, gate %+v: want %d concurrency_limited, the gate empty", s.Requests, s.Gate, 2+refused)
	}
}

// TestLimitMessages charges a bidirectional stream's messages after the
// first to the client's bucket, and checks that the refused message ends
// the stream with the refusal.
func TestLimitMessages(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 3, Period: time.Hour}}, LimitMessages: true})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := openChat(ctx, conn) // 1 of 3
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"first, paid by the stream", "second", "third"} {
		if _, err := chatOnce(cs, m); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	_, err = chatOnce(cs, "fourth")
	got := describe(err, cs.Trailer())
	if got.code != codes.ResourceExhausted || got.reason != limits.ReasonRateLimited || got.policy != "default" ||
		got.retry <= 0 || got.pushback != pushbackOf(got.retry) {
		t.Errorf("the fourth message: %v", got)
	}
	if s := it.Stats(); s.Requests[admit.Allowed] != 1 || s.Requests[limits.ReasonRateLimited] != 1 ||
		s.Policies[0].Requests[admit.Allowed] != 3 || s.Policies[0].Requests[limits.ReasonRateLimited] != 1 {
		t.Errorf("Stats %v, policies %+v", s.Requests, s.Policies)
	}

	// A server-streaming call costs one, as a unary call does.
	it = mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}, LimitMessages: true})
	srv = newServer(t, it, &echo{})
	conn = srv.dial("192.0.2.1:1")
	ws, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodWatch)
	if err != nil {
		t.Fatal(err)
	}
	ws.SendMsg(wrapperspb.String("watch"))
	ws.CloseSend()
	if err := ws.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Errorf("a server stream of 1 an hour: %v", err)
	}

	// Without LimitMessages, a stream's messages are free.
	it = mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}})
	conn = newServer(t, it, &echo{}).dial("192.0.2.1:1")
	cs, err = openChat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := chatOnce(cs, "free"); err != nil {
			t.Fatalf("message %d of a stream of 1 an hour, messages not limited: %v", i+1, err)
		}
	}
}
