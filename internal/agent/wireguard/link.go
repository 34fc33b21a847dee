package wireguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// convergeLink sets the MTU and the one address of the device, brings it up, and makes the
// driver's routes through the device exactly routes (other routes on the device, such as the
// address's connected route, are left alone).
func (d *Driver) convergeLink(iface rwg.Interface, routes []netip.Prefix) error {
	link, err := netlink.LinkByName(d.name)
	if err != nil {
		return fmt.Errorf("device %s: %w", d.name, err)
	}
	if iface.MTU > 0 && link.Attrs().MTU != int(iface.MTU) {
		if err := netlink.LinkSetMTU(link, int(iface.MTU)); err != nil {
			return fmt.Errorf("device %s: setting MTU %d: %w", d.name, iface.MTU, err)
		}
	}

	want := iface.Address
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("device %s: listing addresses: %w", d.name, err)
	}
	have := false
	for _, a := range addrs {
		p, ok := prefixOf(*a.IPNet)
		if !ok {
			continue
		}
		addr, _ := netip.AddrFromSlice(a.IP)
		addr = addr.Unmap()
		if addr == want.Addr() && p.Bits() == want.Bits() {
			have = true
			continue
		}
		if addr.IsLinkLocalUnicast() {
			continue
		}
		if err := netlink.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("device %s: removing stale address %s: %w", d.name, addr, err)
		}
		d.log.Info("stale address removed", "address", p.String())
	}
	if !have {
		if err := netlink.AddrReplace(link, &netlink.Addr{IPNet: ipNet(want)}); err != nil {
			return fmt.Errorf("device %s: setting address %s: %w", d.name, want, err)
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("device %s: setting link up: %w", d.name, err)
		}
	}

	// Routes: ours are marked with RouteProtocol. The connected route of the device's own
	// address is the kernel's; an allowed IP equal to it needs no route of ours.
	wanted := map[netip.Prefix]bool{}
	for _, r := range routes {
		r = r.Masked()
		if r == want.Masked() {
			continue
		}
		wanted[r] = true
	}
	current, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("device %s: listing routes: %w", d.name, err)
	}
	present := map[netip.Prefix]bool{}
	var errs []error
	for _, r := range current {
		if r.Protocol != RouteProtocol || r.Dst == nil {
			continue
		}
		p, ok := prefixOf(*r.Dst)
		if !ok {
			continue
		}
		if wanted[p] {
			present[p] = true
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("removing route %s: %w", p, err))
			continue
		}
		d.log.Info("route removed", "destination", p.String())
	}
	for p := range wanted {
		if present[p] {
			continue
		}
		r := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       ipNet(p),
			Scope:     netlink.SCOPE_LINK,
			Protocol:  RouteProtocol,
			Table:     unix.RT_TABLE_MAIN,
		}
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("adding route %s: %w", p, err))
			continue
		}
		d.log.V(1).Info("route added", "destination", p.String())
	}
	if len(errs) > 0 {
		return fmt.Errorf("device %s: %w", d.name, errors.Join(errs...))
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
