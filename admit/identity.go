package admit

// This file tells clients apart by address: the connection's peer, or,
// when the peer is a trusted proxy, the address that proxy forwarded,
// grouped by prefix.

import (
	"net/netip"
	"strings"
)

// identity is how an engine tells clients apart. The zero identity trusts
// no proxy and groups nothing.
type identity struct {
	proxies []netip.Prefix // the trusted proxies' networks, masked
	v4, v6  int            // the prefix lengths clients are grouped by
	// header names the field trusted proxies write the client's address
	// in, and rfc7239 says it is Forwarded, whose elements hold the
	// address in their for= parameter.
	header  string
	rfc7239 bool
}

// keyBytes is the longest key of an address bucket: "a:" and an IPv6
// prefix of 39 characters and "/128".
const keyBytes = 2 + 39 + 4

// appendKey appends the key of a client's address bucket to b: "a:" and
// its prefix, or "a:invalid" for a peer whose address cannot be parsed.
// peer is the connection's remote address, with or without a port, or
// addr, if valid, the same already parsed; fields, read only if the peer
// is a trusted proxy, hold the forwarding field. It appends at most
// keyBytes bytes.
func (id *identity) appendKey(b []byte, peer string, addr netip.Addr, fields Fields) []byte {
	if !addr.IsValid() {
		if id.v4 == 32 {
			// A peer in dotted decimal that is not a trusted proxy is the
			// client, and its prefix is its address, whose text is the
			// one given: copied, it costs neither parsing nor formatting.
			if host, ip, ok := dottedQuad(peer); ok && !id.trusted(netip.AddrFrom4(ip)) {
				b = append(b, "a:"...)
				b = append(b, host...)
				return append(b, "/32"...)
			}
		}
		addr = parseHost(peer)
	}
	b = append(b, "a:"...)
	if p := id.clientOf(addr, fields); p.IsValid() {
		b, _ = p.AppendText(b)
	} else {
		b = append(b, "invalid"...)
	}
	return b
}

// dottedQuad parses peer as an IPv4 address in dotted decimal with an
// optional port, and returns its host part and address: four decimal
// octets up to 255 with no leading zero (the address's own text, as
// net/netip prints it), then, if there is a colon, a port of one to five
// digits up to 65535. It reports false for anything else, which may still
// be an address that parseHost accepts.
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

// trusted reports whether a is inside one of the trusted proxies' networks.
func (id *identity) trusted(a netip.Addr) bool {
	for _, p := range id.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientOf returns the client's address as its group prefix: the IPv4 or
// IPv6 prefix of the configured length holding it (an IPv4-mapped IPv6
// address counts as IPv4, and a zone is dropped). Only when the peer is a
// trusted proxy is the forwarding field read, from the right: the client
// is the right-most address that is not a trusted proxy, since everything
// left of it was written by parties not trusted. Where the forwarded
// chain breaks (an entry that is no address, or none at all), the nearest
// trusted hop stands for the client: the proxy that wrote the entry
// answers for it, in a bucket of its own. Only a peer whose own address
// cannot be parsed gets the invalid Prefix, one bucket for all such peers.
func (id *identity) clientOf(peer netip.Addr, fields Fields) netip.Prefix {
	a := peer.Unmap().WithZone("")
	if a.IsValid() && fields != nil && id.trusted(a) {
		if hop, ok := id.forwardedClient(fields.FieldValues(id.header)); ok {
			a = hop
		}
	}
	if !a.IsValid() {
		return netip.Prefix{}
	}
	bits := id.v6
	if a.Is4() {
		bits = id.v4
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// forwardedClient walks the forwarding values from the right and returns
// the first address that is not a trusted proxy. It reports false if they
// name no address; if the first hop that is not trusted cannot be parsed,
// the nearest trusted hop stands for the client.
func (id *identity) forwardedClient(lines []string) (netip.Addr, bool) {
	var hops []string
	for _, line := range lines {
		for hop := range strings.SplitSeq(line, ",") {
			if id.rfc7239 {
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
		if !id.trusted(a) {
			return a, true
		}
		last = a
	}
	return last, last.IsValid()
}

// forwardedFor returns the value of the for= parameter of one element of a
// Forwarded field, without quotes, or "".
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

// parsePrefix parses a network prefix, or a single address as the prefix
// holding only it, masked.
func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}
