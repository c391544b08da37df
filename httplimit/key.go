package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// clientKey returns the key of the client's address bucket: "a:" and its
// prefix, or "a:invalid" for requests whose address cannot be parsed.
func (c *core) clientKey(r *http.Request) string {
	var buf [64]byte
	b := append(buf[:0], "a:"...)
	if p := c.clientIP(r); p.IsValid() {
		b, _ = p.AppendText(b)
	} else {
		b = append(b, "invalid"...)
	}
	return string(b)
}

// clientIP returns the address of the client that sent r, as its group
// prefix: the IPv4 or IPv6 prefix of the configured length holding it. The
// peer is r.RemoteAddr. Only when the peer is a trusted proxy is the
// forwarding header read, from the right: the client is the right-most
// address that is not a trusted proxy, since everything left of it was
// written by parties not trusted. A request whose addresses cannot be
// parsed is grouped under an invalid prefix, one bucket for all such
// requests.
func (c *core) clientIP(r *http.Request) netip.Prefix {
	peer := parseHost(r.RemoteAddr)
	if peer.IsValid() && c.trusted(peer) {
		if hop, ok := c.forwardedClient(r.Header); ok {
			peer = hop
		}
	}
	if !peer.IsValid() {
		return netip.Prefix{}
	}
	bits := c.ipv6Bits
	if peer.Is4() {
		bits = c.ipv4Bits
	}
	p, err := peer.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// trusted reports whether a is inside one of the trusted proxy prefixes.
func (c *core) trusted(a netip.Addr) bool {
	for _, p := range c.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient walks the configured forwarding header from the right
// and returns the first address that is not a trusted proxy. It reports
// false if the header names no address; if the first hop that is not
// trusted cannot be parsed, the nearest trusted hop stands for the client.
func (c *core) forwardedClient(h http.Header) (netip.Addr, bool) {
	var hops []string
	for _, line := range h.Values(c.forwarded) {
		for hop := range strings.SplitSeq(line, ",") {
			if c.forwarded == "Forwarded" {
				hop = forwardedFor(hop)
			}
			hops = append(hops, hop)
		}
	}
	var last netip.Addr // the nearest trusted hop seen so far
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseHost(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			break
		}
		if !c.trusted(a) {
			return a, true
		}
		last = a
	}
	return last, last.IsValid()
}

// forwardedFor returns the value of the for= parameter of one element of a
// Forwarded header, without quotes, or "".
func forwardedFor(elem string) string {
	for pair := range strings.SplitSeq(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// parseHost parses an address with or without a port, IPv6 with or
// without brackets ("192.0.2.1", "192.0.2.1:80", "[2001:db8::1]:80",
// "2001:db8::1"), dropping any zone and unmapping IPv4-mapped IPv6. It
// returns the zero Addr if s is none of these.
func parseHost(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

// CookieKey returns a CallerKey function that reads the named cookie; a
// request without it has no caller key.
func CookieKey(name string) func(*http.Request) string {
	return func(r *http.Request) string {
		c, err := r.Cookie(name)
		if err != nil {
			return ""
		}
		return c.Value
	}
}

// HeaderKey returns a CallerKey function that reads the named header, such
// as an API key; a request without it has no caller key.
func HeaderKey(name string) func(*http.Request) string {
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// ExemptPaths returns an Exempt function for requests whose path is one of
// paths exactly, such as "/healthz" and "/readyz".
func ExemptPaths(paths ...string) func(*http.Request) bool {
	set := make(map[string]bool, len(paths))
	for _, p := range paths {
		set[p] = true
	}
	return func(r *http.Request) bool { return set[r.URL.Path] }
}

// ExemptPrefixes returns an Exempt function for requests whose path starts
// with one of prefixes, such as "/static/".
func ExemptPrefixes(prefixes ...string) func(*http.Request) bool {
	prefixes = append([]string(nil), prefixes...)
	return func(r *http.Request) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(r.URL.Path, p) {
				return true
			}
		}
		return false
	}
}

// ExemptAny returns an Exempt function for requests that any of fs exempts.
func ExemptAny(fs ...func(*http.Request) bool) func(*http.Request) bool {
	fs = append([]func(*http.Request) bool(nil), fs...)
	return func(r *http.Request) bool {
		for _, f := range fs {
			if f(r) {
				return true
			}
		}
		return false
	}
}
