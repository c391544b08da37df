// Package wstest tests httplimit with real WebSocket servers and clients
// over loopback, with github.com/coder/websocket and
// github.com/gorilla/websocket: a module of its own, with tests alone, so
// that no released module's graph holds a WebSocket library.
package wstest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	gorilla "github.com/gorilla/websocket"

	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// library is a WebSocket library, server and client side, reduced to
// what the test needs: an echoing server handler and a client that sends
// a message and reads the echo.
type library struct {
	name string
	// serve upgrades the request and echoes every message until the
	// client closes.
	serve func(w http.ResponseWriter, r *http.Request) error
	// dial opens a socket to url, returning the status of a refused
	// handshake when it fails.
	dial func(ctx context.Context, url string) (client, int, error)
}

type client interface {
	echo(ctx context.Context, msg string) (string, error)
	close()
}

type coderClient struct{ c *coder.Conn }

func (c coderClient) echo(ctx context.Context, msg string) (string, error) {
	if err := c.c.Write(ctx, coder.MessageText, []byte(msg)); err != nil {
		return "", err
	}
	_, b, err := c.c.Read(ctx)
	return string(b), err
}

func (c coderClient) close() { c.c.Close(coder.StatusNormalClosure, "") }

type gorillaClient struct{ c *gorilla.Conn }

func (c gorillaClient) echo(_ context.Context, msg string) (string, error) {
	if err := c.c.WriteMessage(gorilla.TextMessage, []byte(msg)); err != nil {
		return "", err
	}
	_, b, err := c.c.ReadMessage()
	return string(b), err
}

func (c gorillaClient) close() {
	c.c.WriteMessage(gorilla.CloseMessage, gorilla.FormatCloseMessage(gorilla.CloseNormalClosure, ""))
	c.c.Close()
}

var libraries = []library{
	{
		name: "coder",
		serve: func(w http.ResponseWriter, r *http.Request) error {
			c, err := coder.Accept(w, r, nil)
			if err != nil {
				return err
			}
			defer c.CloseNow()
			for {
				typ, b, err := c.Read(r.Context())
				if err != nil {
					if coder.CloseStatus(err) == coder.StatusNormalClosure {
						return nil
					}
					return err
				}
				if err := c.Write(r.Context(), typ, b); err != nil {
					return err
				}
			}
		},
		dial: func(ctx context.Context, url string) (client, int, error) {
			c, resp, err := coder.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), nil)
			if err != nil {
				code := 0
				if resp != nil {
					code = resp.StatusCode
				}
				return nil, code, err
			}
			return coderClient{c}, 0, nil
		},
	},
	{
		name: "gorilla",
		serve: func(w http.ResponseWriter, r *http.Request) error {
			c, err := (&gorilla.Upgrader{}).Upgrade(w, r, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			for {
				typ, b, err := c.ReadMessage()
				if err != nil {
					if gorilla.IsCloseError(err, gorilla.CloseNormalClosure) {
						return nil
					}
					return err
				}
				if err := c.WriteMessage(typ, b); err != nil {
					return err
				}
			}
		},
		dial: func(ctx context.Context, url string) (client, int, error) {
			c, resp, err := gorilla.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(url, "http"), nil)
			if err != nil {
				code := 0
				if resp != nil {
					code = resp.StatusCode
				}
				return nil, code, err
			}
			return gorillaClient{c}, 0, nil
		},
	},
}

// TestWebSocketGivesPlaceBack serves WebSockets of each library over
// loopback behind a gate of 2 places. The upgrade counts: while two
// upgrades are held before their handshake (an auth step, say), a third
// is refused with 503 server_busy. Once upgraded, with no call from the
// handler, each socket gives its place back: ten sockets stay open and
// echo through a gate of two, which plain requests still get into; when
// they close, every handler returns and the gate is empty.
func TestWebSocketGivesPlaceBack(t *testing.T) {
	for _, lib := range libraries {
		t.Run(lib.name, func(t *testing.T) {
			m, err := httplimit.New(httplimit.Config{Limits: admit.Config{MaxInFlight: 2}})
			if err != nil {
				t.Fatal(err)
			}
			authorized := make(chan struct{}) // until closed, upgrades wait before their handshake
			var handlers sync.WaitGroup
			srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/ws" {
					w.Write([]byte("ok"))
					return
				}
				handlers.Add(1)
				defer handlers.Done()
				<-authorized
				if err := lib.serve(w, r); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("server: %v", err)
				}
			})))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// Two upgrades held before their handshake fill the gate.
			type dialed struct {
				c    client
				code int
				err  error
			}
			held := make(chan dialed, 2)
			for range 2 {
				go func() {
					c, code, err := lib.dial(ctx, srv.URL+"/ws")
					held <- dialed{c, code, err}
				}()
			}
			for m.Stats().Gate.InFlight != 2 {
				time.Sleep(time.Millisecond)
			}
			if _, code, err := lib.dial(ctx, srv.URL+"/ws"); err == nil || code != http.StatusServiceUnavailable {
				t.Fatalf("a third upgrade while two are in progress: status %d, %v; want 503", code, err)
			}
			close(authorized)
			var clients []client
			for range 2 {
				d := <-held
				if d.err != nil {
					t.Fatalf("a held upgrade: %v", d.err)
				}
				clients = append(clients, d.c)
			}
			for len(clients) < 10 {
				c, code, err := lib.dial(ctx, srv.URL+"/ws")
				if err != nil {
					t.Fatalf("socket %d: status %d, %v", len(clients)+1, code, err)
				}
				clients = append(clients, c)
			}
			if s := m.Stats().Gate; s.InFlight != 0 {
				t.Errorf("%d places held by 10 open sockets, want 0", s.InFlight)
			}
			resp, err := srv.Client().Get(srv.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("a plain request while 10 sockets are open: %d", resp.StatusCode)
			}
			for i, c := range clients {
				if got, err := c.echo(ctx, "hello"); err != nil || got != "hello" {
					t.Errorf("socket %d echoed %q, %v", i+1, got, err)
				}
				c.close()
			}
			handlers.Wait()
			s := m.Stats()
			if s.Gate.InFlight != 0 || s.Requests[admit.Allowed] != 11 || s.Requests[admit.ServerBusy] != 1 || s.Gate.Peak != 2 {
				t.Errorf("Stats after the sockets closed: %+v, gate %+v", s, *s.Gate)
			}
		})
	}
}
