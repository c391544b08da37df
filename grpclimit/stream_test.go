package grpclimit

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
)

// TestStreamGivesBackGate checks each way a stream becomes established and
// gives its place in the gate back, while a unary call probes the gate:
// refused while the stream is set up, served once it is established.
func TestStreamGivesBackGate(t *testing.T) {
	for _, tt := range []struct {
		name string
		// establish runs in the handler after its set-up, and makes the
		// stream established.
		establish func(ss grpc.ServerStream) error
		timeout   time.Duration
	}{
		{"first send", func(ss grpc.ServerStream) error { return ss.SendMsg(wrapperspb.String("hello")) }, 0},
		{"header sent", func(ss grpc.ServerStream) error { return ss.SendHeader(nil) }, 0},
		{"waiting for a second message", func(ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return err
			}
			return ss.RecvMsg(new(wrapperspb.StringValue)) // blocks until the client sends again
		}, 0},
		{"ReleaseCapacity", func(ss grpc.ServerStream) error { ReleaseCapacity(ss.Context()); return nil }, 0},
		{"Timeout", nil, 300 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			started, setup, established, end := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			it := mustNew(t, Config{MaxInFlight: 1, Timeout: tt.timeout})
			srv := newServer(t, it, &echo{chat: func(ss grpc.ServerStream) error {
				close(started)
				<-setup // the costly set-up
				if tt.establish != nil {
					errc := make(chan error, 1)
					go func() { errc <- tt.establish(ss) }()
					select {
					case err := <-errc:
						if err != nil {
							return err
						}
					case <-time.After(100 * time.Millisecond): // blocked waiting on the client
					}
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
			if tt.timeout == 0 {
				if _, _, err := say(conn, "x"); ReasonOf(err) != ReasonServerBusy {
					t.Errorf("a call while the stream is set up: %v, want server_busy", err)
				}
			} else if n := it.capacity.Gate.Stats().InFlight; n != 1 {
				t.Errorf("%d in the gate while the stream is set up, want 1", n)
			}
			close(setup)
			<-established
			waitFor(t, "out of the gate", func() bool { return it.capacity.Gate.Stats().InFlight == 0 })
			mustSay(t, conn, "while the stream is open")
			close(end)
			cs.CloseSend()
			for cs.RecvMsg(new(wrapperspb.StringValue)) == nil {
			}
		})
	}
}

// TestMaxStreamsPerClient opens streams up to the cap, checks that one
// more is refused, and that a stream the client cancels gives its place
// back.
func TestMaxStreamsPerClient(t *testing.T) {
	it := mustNew(t, Config{MaxStreamsPerClient: 2, BusyRetryAfter: 300 * time.Millisecond, MaxInFlight: 10})
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := openChat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = chatOnce(cs, "third")
	if err == io.EOF {
		err = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	if got, want := describe(err, cs.Trailer()), (refusalOf{codes.ResourceExhausted, ReasonConcurrencyLimited, 300 * time.Millisecond, "", false, "300"}); got != want {
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

	cancels[0]()
	waitFor(t, "the cancelled stream's place given back", func() bool { return it.streams.Len() == 2 && streamsOf(it, "a:192.0.2.1/32") == 1 })
	cs, err = openChat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chatOnce(cs, "again"); err != nil {
		t.Errorf("a stream after one was cancelled: %v", err)
	}
	if s := it.Stats(); s.ConcurrencyLimited != 1 || s.Gate.InFlight != 0 {
		t.Errorf("Stats %+v, gate %+v", s, s.Gate)
	}
}

// streamsOf returns how many streams the client key has open: the places
// Acquire still grants it, counted by taking them.
func streamsOf(it *Interceptor, key string) int {
	var took int
	for it.streams.Acquire(key) == "" {
		took++
	}
	for range took {
		it.streams.Release(key)
	}
	return 2 - took
}

// TestLimitMessages charges a bidirectional stream's messages after the
// first to the client's bucket, and checks that the refused message ends
// the stream with the refusal.
func TestLimitMessages(t *testing.T) {
	it := mustNew(t, Config{Rate: limits.Limit{Events: 3, Period: time.Hour}, LimitMessages: true})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	if got.code != codes.ResourceExhausted || got.reason != ReasonRateLimited || got.retry <= 0 || got.pushback != pushbackOf(got.retry) {
		t.Errorf("the fourth message: %v", got)
	}
	if s := it.Stats(); s.Allowed != 1 || s.RateLimited != 1 || s.Policies[0].Allowed != 3 {
		t.Errorf("Stats %+v", s)
	}

	// A server-streaming call costs one, as a unary call does.
	it = mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, LimitMessages: true})
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
}
