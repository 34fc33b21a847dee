package nft

import (
	"net/netip"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Flow is a connection's original direction as conntrack records it, with the mark the ruleset
// gave it.
type Flow struct {
	Mark     uint32
	Protocol string // "tcp" or "udp"
	Src, Dst netip.Addr
	DstPort  uint16
}

// GrantedFlows returns whether the ruleset rendered from g would translate a flow it marked
// again. A flow it would not (its peer's grant revoked, its exposure or port gone, its internal
// source no longer allowed) is one a change left established — conntrack would carry it on
// past the new rules — so the agent deletes its conntrack entry. Flows without the ruleset's
// marks are not the ruleset's business: true.
func GrantedFlows(g *model.Gateway) func(Flow) bool {
	sources := make(map[string][]netip.Prefix, len(g.Peers)) // authorized peers' subnets
	for _, p := range g.Peers {
		if p.Authorization.Authorized {
			sources[p.Name] = p.SourceCIDRs
		}
	}
	type fwdKey struct {
		vip   netip.Addr
		proto string
		port  uint16
	}
	forward := map[fwdKey][]netip.Prefix{}
	for _, e := range g.Exposures {
		for _, port := range e.Ports {
			k := fwdKey{e.VirtualIP, port.Protocol, port.Port}
			for _, peer := range e.GrantedTo {
				forward[k] = append(forward[k], sources[peer]...)
			}
		}
	}
	type revKey struct {
		proto string
		port  uint16
	}
	reverse := map[revKey]bool{}
	for _, r := range g.ReverseExposures {
		if _, ok := sources[r.Grantee]; !ok || r.Grantee == "" {
			continue
		}
		for _, port := range r.Ports {
			reverse[revKey{port.Protocol, port.GatewayPort}] = true
		}
	}
	within := func(ps []netip.Prefix, a netip.Addr) bool {
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(f Flow) bool {
		switch f.Mark {
		case MarkForward:
			return within(forward[fwdKey{f.Dst, f.Protocol, f.DstPort}], f.Src)
		case MarkReverse:
			return reverse[revKey{f.Protocol, f.DstPort}] && within(g.InternalSourceCIDRs, f.Src)
		default:
			return true
		}
	}
}
