package front

import (
	"net/netip"
	"strings"
)

// Identity tells clients apart by address, as every front end does: the
// peer of the connection, or, when the peer is a trusted proxy, the
// address that proxy forwarded; grouped by prefix (IPv6 by /64 by
// default). The zero Identity trusts no proxy and groups nothing.
type Identity struct {
	// Proxies are the trusted proxies' networks, masked.
	Proxies []netip.Prefix
	// IPv4Bits and IPv6Bits are the prefix lengths clients are grouped by.
	IPv4Bits, IPv6Bits int
	// Forwarded says the forwarding values are elements of a Forwarded
	// header (RFC 7239), whose for= parameter holds the address, rather
	// than bare addresses (X-Forwarded-For, X-Real-IP).
	Forwarded bool
}

// Key returns the key of a client's address bucket: "a:" and its prefix,
// or "a:invalid" for a peer whose address cannot be parsed (a forwarded
// entry that cannot be parsed is answered for by the nearest trusted hop;
// see ClientOf). peer is the
// connection's remote address, with or without a port; forwarded, read
// only if the peer is a trusted proxy, the values of the one forwarding
// header the proxies write, each a comma-separated list of hops.
func (id *Identity) Key(peer string, forwarded func() []string) string {
	var buf [KeyBytes]byte
	return string(id.AppendKey(buf[:0], peer, forwarded))
}

// AppendKey appends to b the key Key returns (at most KeyBytes bytes).
func (id *Identity) AppendKey(b []byte, peer string, forwarded func() []string) []byte {
	if id.IPv4Bits == 32 {
		// A peer in dotted decimal that is not a trusted proxy is the
		// client, and its prefix is its address, whose text is the one
		// given: copied, it costs neither parsing by net/netip nor
		// formatting.
		if host, ip, ok := dottedQuad(peer); ok && !id.Trusted(netip.AddrFrom4(ip)) {
			b = append(b, "a:"...)
			b = append(b, host...)
			return append(b, "/32"...)
		}
	}
	return id.AppendKeyOf(b, ParseHost(peer), forwarded)
}

// dottedQuad parses peer as an IPv4 address in dotted decimal with an
// optional port, and returns its host part and address: four decimal
// octets up to 255 with no leading zero (the address's own text, as
// net/netip prints it), then, if there is a colon, a port of one to five
// digits up to 65535. It reports false for anything else, which may still
// be an address that ParseHost accepts (IPv6, an IPv4-mapped one, a port
// with more leading zeros): the caller then takes the general way.
func dottedQuad(peer string) (host string, ip [4]byte, ok bool) {
	i := 0
	for k := range 4 {
		if k > 0 {
			if i >= len(peer) || peer[i] != '.' {
				return "", ip, false
			}
			i++
		}
		start, v := i, 0
		for i < len(peer) && i-start < 3 && peer[i] >= '0' && peer[i] <= '9' {
			v = v*10 + int(peer[i]-'0')
			i++
		}
		if i == start || v > 255 || (peer[start] == '0' && i-start > 1) {
			return "", ip, false
		}
		ip[k] = byte(v)
	}
	host = peer[:i]
	if i == len(peer) {
		return host, ip, true
	}
	if peer[i] != ':' {
		return "", ip, false
	}
	port := peer[i+1:]
	if len(port) == 0 || len(port) > 5 {
		return "", ip, false
	}
	v := 0
	for j := 0; j < len(port); j++ {
		if port[j] < '0' || port[j] > '9' {
			return "", ip, false
		}
		v = v*10 + int(port[j]-'0')
	}
	return host, ip, v <= 65535
}

// Trusted reports whether a is inside one of the trusted proxy prefixes.
func (id *Identity) Trusted(a netip.Addr) bool {
	for _, p := range id.Proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient walks the forwarding values from the right and returns
// the first address that is not a trusted proxy. It reports false if they
// name no address; if the first hop that is not trusted cannot be parsed,
// the nearest trusted hop stands for the client.
func (id *Identity) forwardedClient(lines []string) (netip.Addr, bool) {
	var hops []string
	for _, line := range lines {
		for hop := range strings.SplitSeq(line, ",") {
			if id.Forwarded {
				hop = forwardedFor(hop)
			}
			hops = append(hops, hop)
		}
	}
	var last netip.Addr // the nearest trusted hop seen so far
	for i := len(hops) - 1; i >= 0; i-- {
		a := ParseHost(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			break
		}
		if !id.Trusted(a) {
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

// ParseHost parses an address with or without a port, IPv6 with or
// without brackets ("192.0.2.1", "192.0.2.1:80", "[2001:db8::1]:80",
// "2001:db8::1"), dropping any zone and unmapping IPv4-mapped IPv6. It
// returns the zero Addr if s is none of these.
func ParseHost(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

// ParsePrefix parses a network prefix, or a single address as the prefix
// holding only it, masked.
func ParsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}
