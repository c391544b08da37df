package front

// This file is the client identity for a transport that hands over the
// peer's address already parsed (gRPC's net.TCPAddr), which spares
// formatting it to a string only to parse it back: three allocations per
// call. Key is KeyOf for a peer given as text.

import "net/netip"

// KeyOf is Key for a peer address already parsed.
func (id *Identity) KeyOf(peer netip.Addr, forwarded func() []string) string {
	var buf [64]byte
	return string(id.AppendKeyOf(buf[:0], peer, forwarded))
}

// AppendKeyOf appends to b the key KeyOf returns, for a caller that
// keeps it in memory of its own; KeyBytes bytes always suffice.
func (id *Identity) AppendKeyOf(b []byte, peer netip.Addr, forwarded func() []string) []byte {
	b = append(b, "a:"...)
	if p := id.ClientOf(peer, forwarded); p.IsValid() {
		b, _ = p.AppendText(b)
	} else {
		b = append(b, "invalid"...)
	}
	return b
}

// KeyBytes is the longest key of an address bucket: "a:" and an IPv6
// prefix of 39 characters and "/128".
const KeyBytes = 2 + 39 + 4

// ClientOf returns the client's address as its group prefix: the IPv4 or
// IPv6 prefix of the configured length holding it, for a peer address
// already parsed (an IPv4-mapped IPv6 address counts as IPv4, and a zone
// is dropped). Only when the peer is a trusted proxy is the forwarding
// header read, from the right: the client is the right-most address that
// is not a trusted proxy, since everything left of it was written by
// parties not trusted. Where the forwarded chain breaks (an entry that is
// no address, or none at all), the nearest trusted hop stands for the
// client: the proxy that wrote the entry answers for it, in a bucket of
// its own. Only a peer whose own address cannot be parsed gets the invalid
// Prefix, one bucket for all such peers.
func (id *Identity) ClientOf(peer netip.Addr, forwarded func() []string) netip.Prefix {
	a := peer.Unmap().WithZone("")
	if a.IsValid() && id.Trusted(a) && forwarded != nil {
		if hop, ok := id.forwardedClient(forwarded()); ok {
			a = hop
		}
	}
	if !a.IsValid() {
		return netip.Prefix{}
	}
	bits := id.IPv6Bits
	if a.Is4() {
		bits = id.IPv4Bits
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}
