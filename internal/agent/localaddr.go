package agent

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// ensureLocalAddress puts the gateway's own service-CIDR address on lo for IPsec: charon only
// installs the routes toward a peer's subnets (and reverse exposures need a source in the
// service CIDR) when the gateway holds an address inside its local traffic selector.
// WireGuard gateways carry it on their device instead.
func ensureLocalAddress(m *model.Gateway) error {
	if m.Protocol != model.ProtocolIPsec || !m.LocalAddress.IsValid() {
		return nil
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	a := netip.PrefixFrom(m.LocalAddress, 32)
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrReplace(lo, addr); err != nil {
		return fmt.Errorf("adding the gateway's address %s to lo: %w", a, err)
	}
	return nil
}
