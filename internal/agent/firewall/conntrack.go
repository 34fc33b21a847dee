package firewall

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// CutRevokedFlows deletes the conntrack entries (in the agent's network namespace) of the
// flows the ruleset translated that the model no longer grants (nft.GrantedFlows): a revoked
// peer's established connection through an exposure stops at its next packet instead of
// living on under "ct state established accept". Returns how many were cut.
func (f *Firewall) CutRevokedFlows(_ context.Context, m *model.Gateway) (int, error) {
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, revoked(nft.GrantedFlows(m)))
	if err != nil {
		return int(n), fmt.Errorf("deleting revoked flows from conntrack: %w", err)
	}
	return int(n), nil
}

// revoked matches the ruleset's flows that keep does not admit.
type revoked func(nft.Flow) bool

func (keep revoked) MatchConntrackFlow(c *netlink.ConntrackFlow) bool {
	if c.Mark != nft.MarkForward && c.Mark != nft.MarkReverse {
		return false
	}
	var proto string
	switch c.Forward.Protocol {
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_UDP:
		proto = "udp"
	default:
		return false
	}
	src, ok1 := netip.AddrFromSlice(c.Forward.SrcIP)
	dst, ok2 := netip.AddrFromSlice(c.Forward.DstIP)
	if !ok1 || !ok2 {
		return false
	}
	return !keep(nft.Flow{Mark: c.Mark, Protocol: proto, Src: src.Unmap(), Dst: dst.Unmap(), DstPort: c.Forward.DstPort})
}

// CutUnruledFlows deletes the conntrack entries of the flows a drifted table may have let
// start, once the ruleset is back: every flow CutRevokedFlows cuts, and every TCP or UDP flow
// from or to a peer's subnets that the ruleset did not mark — it admits none (a peer reaches
// only what it translates, and nothing new enters or leaves a tunnel otherwise), so such a
// flow began while the table was missing or changed and would live on under "ct state
// established accept". Returns how many were cut.
func (f *Firewall) CutUnruledFlows(_ context.Context, m *model.Gateway) (int, error) {
	var peers []netip.Prefix
	for _, p := range m.Peers {
		peers = append(peers, p.SourceCIDRs...)
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, unruled{keep: revoked(nft.GrantedFlows(m)), peers: peers})
	if err != nil {
		return int(n), fmt.Errorf("deleting flows the ruleset did not admit from conntrack: %w", err)
	}
	return int(n), nil
}

// unruled matches the flows revoked by keep, and the unmarked ones with an end in peers.
type unruled struct {
	keep  revoked
	peers []netip.Prefix
}

func (u unruled) MatchConntrackFlow(c *netlink.ConntrackFlow) bool {
	if c.Mark == nft.MarkForward || c.Mark == nft.MarkReverse {
		return u.keep.MatchConntrackFlow(c)
	}
	if c.Forward.Protocol != unix.IPPROTO_TCP && c.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	for _, ip := range [][]byte{c.Forward.SrcIP, c.Forward.DstIP, c.Reverse.SrcIP, c.Reverse.DstIP} {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		for _, p := range u.peers {
			if p.Contains(a.Unmap()) {
				return true
			}
		}
	}
	return false
}
