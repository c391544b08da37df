package redistest

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("after Start: %v", err)
	}
	s.Pause()
	c, err := net.Dial("tcp", s.Addr()) // the kernel still accepts connections
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	c.Write([]byte("PING\r\n"))
	if _, err := c.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("paused server: read %v, want a timeout", err)
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("killed server still answers")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}
