package agent

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// LocalAddressLabel marks the addresses the agent puts on lo. A node holds one host-network
// gateway, so an address with this label that is not the current gateway's was left by an
// earlier one (a deleted gateway's pod cannot clean up the node's lo) and is removed.
const LocalAddressLabel = "lo:bnerd-vpn"

// ensureLocalAddress puts the gateway's own address on lo for IPsec, with the service CIDR's
// prefix length so the whole service CIDR is local: charon only installs the routes toward a
// peer's subnets when the gateway holds an address inside its local traffic selector, and a
// packet to a virtual IP the peer was not granted (so never translated) is then delivered to
// the input chain, where it is dropped and counted against the peer, instead of being lost to
// "network unreachable". WireGuard gateways carry the address on their device instead. Other
// labelled addresses on lo (an earlier gateway's) are removed. h nil: the agent's namespace.
func ensureLocalAddress(h *netlink.Handle, m *model.Gateway) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	var want netip.Prefix
	if m.Protocol == model.ProtocolIPsec && m.LocalAddress.IsValid() && m.ServiceCIDR.IsValid() {
		want = netip.PrefixFrom(m.LocalAddress, m.ServiceCIDR.Bits())
		addr := &netlink.Addr{IPNet: prefixNet(want), Label: LocalAddressLabel}
		if err := h.AddrReplace(lo, addr); err != nil {
			return fmt.Errorf("adding the gateway's address %s to lo: %w", want, err)
		}
	}
	addrs, err := h.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing lo's addresses: %w", err)
	}
	for _, a := range addrs {
		if a.Label != LocalAddressLabel {
			continue
		}
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		if p := netip.PrefixFrom(ip.Unmap(), ones); p == want {
			continue
		}
		if err := h.AddrDel(lo, &a); err != nil {
			return fmt.Errorf("removing the stale gateway address %s from lo: %w", a.IPNet, err)
		}
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
