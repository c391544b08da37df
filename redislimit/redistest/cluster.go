package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds the wait for a new cluster to agree on its slots.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of redis-server processes owned by one test:
// primaries only, no replicas, the 16,384 hash slots split evenly between
// them in order.
type Cluster struct {
	// Nodes are the cluster's servers; node i serves the i-th range of
	// slots.
	Nodes []*Server
}

// StartCluster starts n servers as in Start, with cluster mode on, gives
// each an equal range of the hash slots, joins them and waits until every
// node reports the cluster ready. It needs Redis 7.0 or later
// (CLUSTER ADDSLOTSRANGE), and skips or fails tb as Start does without a
// redis-server binary.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	c := &Cluster{}
	for range n {
		c.Nodes = append(c.Nodes, start(tb,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"))
	}
	for i, s := range c.Nodes {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if _, err := Command(s.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr(), err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if _, err := Command(c.Nodes[0].Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port)); err != nil {
			tb.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr(), err)
		}
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, s := range c.Nodes {
		for {
			info, err := Command(s.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r\n", n)) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: the cluster was not ready within %v; %s says %q, %v", clusterTimeout, s.Addr(), info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the addresses of the cluster's nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Command sends one command to the server at addr on a new connection and
// returns its reply as text: a status, an integer or a bulk string ("" for
// a nil one). An error reply is returned as an error; arrays are not
// supported. It is meant for administration in
// tests, not for speed.
func Command(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unsupported reply %q", line)
}
