package agent

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// ensureLocalAddress puts the gateway's own address on lo for IPsec, with the service CIDR's
// prefix length so the whole service CIDR is local: charon only installs the routes toward a
// peer's subnets when the gateway holds an address inside its local traffic selector, and a
// packet to a virtual IP the peer was not granted (so never translated) is then delivered to
// the input chain, where it is dropped and counted against the peer, instead of being lost to
// "network unreachable". WireGuard gateways carry the address on their device instead.
func ensureLocalAddress(m *model.Gateway) error {
	if m.Protocol != model.ProtocolIPsec || !m.LocalAddress.IsValid() || !m.ServiceCIDR.IsValid() {
		return nil
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	a := netip.PrefixFrom(m.LocalAddress, m.ServiceCIDR.Bits())
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), 32)}}
	if err := netlink.AddrReplace(lo, addr); err != nil {
		return fmt.Errorf("adding the gateway's address %s to lo: %w", a, err)
	}
	return nil
}
