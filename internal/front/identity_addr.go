package front

// This file is the client identity for a transport that hands over the
// peer's address already parsed (gRPC's net.TCPAddr), which spares
// formatting it to a string only to parse it back: three allocations per
// call. Key and Client are these for a peer given as text.

import "net/netip"

// KeyOf is Key for a peer address already parsed.
func (id *Identity) KeyOf(peer netip.Addr, forwarded func() []string) string {
	var buf [64]byte
	b := append(buf[:0], "a:"...)
	if p := id.ClientOf(peer, forwarded); p.IsValid() {
		b, _ = p.AppendText(b)
	} else {
		b = append(b, "invalid"...)
	}
	return string(b)
}

// ClientOf is Client for a peer address already parsed; an IPv4-mapped
// IPv6 address counts as IPv4, and a zone is dropped.
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
