package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// unsafeRanges are what no peer subnet may cover or lie in: 0.0.0.0/8, loopback, link-local,
// multicast and the reserved 240.0.0.0/4 (the API server refuses them at admission).
var unsafeRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Verify checks a model that arrives from elsewhere — the gateway agent reads it from a
// ConfigMap anyone with edit rights in the namespace may change — against the invariants Build
// guarantees and the security model relies on: addresses inside the service CIDR, no peer
// subnet that is unsafe or the gateway's own, tunnels pairwise disjoint, one identity per
// IPsec peer, grants only to authorized peers and consistent in both directions, reverse
// exposures into their grantee's subnets, IPsec reqids in range and unique. The renderers check the rest (syntax, ports, names).
// Every problem is reported, joined.
func Verify(g *Gateway) error {
	if g == nil {
		return errors.New("no gateway")
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if g.Namespace == "" || g.Name == "" {
		bad("gateway has no namespace or name")
	}
	switch g.Protocol {
	case ProtocolIPsec, ProtocolWireGuard:
	default:
		bad("protocol %q is not ipsec or wireguard", g.Protocol)
	}
	if g.Kind != "" && (g.Kind != KindIPsecGateway || g.Protocol != ProtocolIPsec) {
		bad("kind %q with protocol %q: only an ipsec gateway may come from an %s", g.Kind, g.Protocol, KindIPsecGateway)
	}
	if g.IPsec != nil && g.IPsec.TunnelMTU != 0 && (g.IPsec.TunnelMTU < 1280 || g.IPsec.TunnelMTU > 9000) {
		bad("IPsec tunnel MTU %d is not between 1280 and 9000", g.IPsec.TunnelMTU)
	}
	sc := g.ServiceCIDR
	if !sc.IsValid() || !sc.Addr().Is4() || sc.Masked() != sc || !CGNATRange.Contains(sc.Addr()) || sc.Bits() < 16 || sc.Bits() > 28 {
		bad("service CIDR %s is not a /16../28 network inside %s", sc, CGNATRange)
	} else if g.LocalAddress != sc.Addr().Next() {
		bad("local address %s is not the first address of the service CIDR %s", g.LocalAddress, sc)
	}
	if u := g.Uplink; u != nil {
		if u.Interface == "" || len(u.Interface) > 15 || strings.ContainsAny(u.Interface, "/ \t\n\"") {
			bad("uplink interface %q is not an interface name", u.Interface)
		}
		if !u.Address.IsValid() || !u.Address.Addr().Is4() || u.Address.Bits() == 0 || sc.IsValid() && u.Address.Overlaps(sc) {
			bad("uplink address %s is not an IPv4 address with its subnet outside the service CIDR", u.Address)
		} else if u.Gateway.IsValid() && (!u.Address.Contains(u.Gateway) || u.Gateway == u.Address.Addr()) {
			bad("uplink gateway %s is not another address in %s", u.Gateway, u.Address.Masked())
		}
	}
	for i, c := range g.InternalSourceCIDRs {
		if !c.IsValid() || !c.Addr().Is4() || c.Masked() != c || c.Bits() == 0 {
			bad("internal source CIDR %d (%s) is not an IPv4 network", i, c)
		}
	}

	// Routes (ready ClusterLinks): the agent installs them, so a tampered model must not route
	// anything but a service cluster's range: no default route, nothing unsafe or of the gateway's
	// own, every range an internal source, the next hop a unicast address outside it.
	for i, r := range g.Routes {
		switch c := r.CIDR; {
		case !c.IsValid() || !c.Addr().Is4() || c.Masked() != c || c.Bits() == 0:
			bad("route %d (%s) is not an IPv4 network", i, c)
		case !slices.Contains(g.InternalSourceCIDRs, c):
			bad("route %d (%s) is not an internal source CIDR", i, c)
		case !r.Via.Is4() || !r.Via.IsGlobalUnicast() || c.Contains(r.Via):
			bad("route %d (%s): next hop %s is not a unicast IPv4 address outside it", i, c, r.Via)
		default:
			if reason := unsafeSubnet(c, sc, nil); reason != "" {
				bad("route %d: %s %s", i, c, reason)
			}
		}
	}

	for _, a := range g.ReverseClients {
		if !a.Is4() || !slices.ContainsFunc(g.InternalSourceCIDRs, func(c netip.Prefix) bool { return c.Contains(a) }) {
			bad("reverse client %s is not inside the internal source CIDRs", a)
		}
	}

	peers := make(map[string]*Peer, len(g.Peers))
	var tunnels []PeerPrefix
	ids := map[string]string{}
	for i := range g.Peers {
		p := &g.Peers[i]
		if p.Name == "" {
			bad("peer %d has no name", i)
			continue
		}
		if _, dup := peers[p.Name]; dup {
			bad("peer %q is listed twice", p.Name)
		}
		peers[p.Name] = p
		for _, c := range p.SourceCIDRs { // withheld subnets are carried by no tunnel
			if reason := unsafeSubnet(c, sc, g.InternalSourceCIDRs); reason != "" {
				bad("peer %q: subnet %s %s", p.Name, c, reason)
			}
		}
		for _, c := range p.SourceCIDRs {
			if slices.Contains(p.WithheldCIDRs, c) {
				bad("peer %q: %s is both carried and withheld", p.Name, c)
			}
			tunnels = append(tunnels, PeerPrefix{Peer: p.Name, Prefix: c})
		}
		d := p.Authorization
		if d.Authorized && len(p.WithheldCIDRs) > 0 {
			bad("peer %q is authorized with withheld subnets %v", p.Name, p.WithheldCIDRs)
		}
		if !d.Authorized && (len(p.Exposures) > 0 || len(p.ReverseExposures) > 0) {
			bad("peer %q is not authorized (%s) but holds grants", p.Name, d.Reason)
		}
		if p.IPsec != nil && p.HasTunnel() {
			id := p.IPsec.RemoteID
			key, err := CanonicalID(id)
			switch other, taken := ids[key]; {
			case err != nil:
				bad("peer %q: remote ID does not name one identity: %v", p.Name, err)
			case taken:
				bad("peers %q and %q have the same remote ID %q", other, p.Name, id)
			default:
				ids[key] = p.Name
			}
		}
	}
	if a, b, overlap := FirstOverlap(tunnels); overlap {
		bad("tunnels overlap: %s of peer %q and %s of peer %q", a.Prefix, a.Peer, b.Prefix, b.Peer)
	}

	vips := map[netip.Addr]string{}
	useVIP := func(what string, a netip.Addr) {
		switch other, taken := vips[a]; {
		case !sc.IsValid() || !sc.Contains(a) || a == g.LocalAddress || a == sc.Addr():
			bad("%s: virtual IP %s is not a host address of the service CIDR %s", what, a, sc)
		case taken:
			bad("%s: virtual IP %s is also that of %s", what, a, other)
		default:
			vips[a] = what
		}
	}
	exposures := map[string]bool{}
	for _, e := range g.Exposures {
		what := fmt.Sprintf("exposure %q", e.Name)
		exposures[e.Name] = true
		useVIP(what, e.VirtualIP)
		if reservedTarget(e.Target) || (sc.IsValid() && sc.Contains(e.Target)) {
			bad("%s: target %s is not one the cluster may offer", what, e.Target)
		}
		for _, n := range e.GrantedTo {
			if p, ok := peers[n]; !ok || !p.Authorization.Authorized || !slices.Contains(p.Exposures, e.Name) {
				bad("%s is granted to %q, which is not an authorized peer holding the grant", what, n)
			}
		}
	}
	reverse := map[string]bool{}
	for _, r := range g.ReverseExposures {
		what := fmt.Sprintf("reverse exposure %q", r.Name)
		reverse[r.Name] = true
		useVIP(what, r.VirtualIP)
		if r.Grantee == "" {
			continue
		}
		p, ok := peers[r.Grantee]
		switch {
		case !ok || !p.Authorization.Authorized || !slices.Contains(p.ReverseExposures, r.Name):
			bad("%s is granted to %q, which is not an authorized peer holding the grant", what, r.Grantee)
		case !slices.ContainsFunc(p.SourceCIDRs, func(c netip.Prefix) bool { return c.Contains(r.Target) }):
			bad("%s: target %s is outside its grantee %q's subnets", what, r.Target, r.Grantee)
		}
	}
	for _, p := range g.Peers {
		for _, n := range p.Exposures {
			if !exposures[n] {
				bad("peer %q is granted exposure %q, which the gateway does not have", p.Name, n)
			}
		}
		for _, n := range p.ReverseExposures {
			if !reverse[n] {
				bad("peer %q is granted reverse exposure %q, which the gateway does not have", p.Name, n)
			}
		}
	}
	verifyReqids(g, bad)
	return errors.Join(errs...)
}

// unsafeSubnet says why a peer subnet may not be carried by a tunnel, or "".
func unsafeSubnet(c, serviceCIDR netip.Prefix, internal []netip.Prefix) string {
	switch {
	case !c.IsValid() || !c.Addr().Is4() || c.Masked() != c:
		return "is not an IPv4 network"
	case c.Bits() == 0:
		return "is the whole Internet"
	case slices.ContainsFunc(unsafeRanges, c.Overlaps):
		return "covers loopback, link-local, multicast or reserved addresses"
	case serviceCIDR.IsValid() && c.Overlaps(serviceCIDR):
		return "overlaps the gateway's service CIDR"
	case slices.ContainsFunc(internal, c.Overlaps):
		return "overlaps the internal source CIDRs"
	}
	return ""
}

// reservedTarget: an address no exposure may send to (loopback, link-local, multicast,
// unspecified, broadcast), as Build refuses it (TargetReserved).
func reservedTarget(a netip.Addr) bool {
	return !a.IsValid() || !a.Is4() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() ||
		a.IsUnspecified() || a.IsLinkLocalMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}
