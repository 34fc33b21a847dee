package wireguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// convergeLink sets the MTU and the one address of the device, brings it up, and makes the
// driver's routes through the device exactly routes, except where the main table already holds
// a route for exactly that prefix that is not the driver's (planRoutes): those prefixes are
// returned with the route holding them and left alone. The driver removes only its own routes.
func (d *Driver) convergeLink(iface rwg.Interface, routes []netip.Prefix) (map[netip.Prefix]string, error) {
	link, err := netlink.LinkByName(d.name)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", d.name, err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("device %s: listing addresses: %w", d.name, err)
	}
	lp := planLink(iface, link.Attrs().MTU, link.Attrs().Flags&net.FlagUp != 0, addrs, routes)
	if err := d.changeLink(link, iface.Address, lp); err != nil {
		return nil, err
	}

	// Routes: ours are marked with RouteProtocol. The connected route of the device's own
	// address is the kernel's; an allowed IP equal to it needs no route of ours (planLink).
	wanted := lp.routes
	current, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("device %s: listing routes: %w", d.name, err)
	}
	names := map[int]string{}
	if links, err := netlink.LinkList(); err == nil {
		for _, l := range links {
			names[l.Attrs().Index] = l.Attrs().Name
		}
	}
	existing := make([]route, 0, len(current))
	for _, r := range current {
		existing = append(existing, routeOf(r, names))
	}
	plan := planRoutes(wanted, existing, link.Attrs().Index)
	var errs []error
	for _, r := range plan.Remove {
		nr := &netlink.Route{LinkIndex: r.LinkIndex, Dst: ipNet(r.Dst), Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN, Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteDel(nr); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("removing route %s: %w", r.Dst, err))
			continue
		}
		d.log.Info("route removed", "destination", r.Dst.String())
	}
	for _, p := range plan.Add {
		r := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       ipNet(p),
			Scope:     netlink.SCOPE_LINK,
			Protocol:  RouteProtocol,
			Table:     unix.RT_TABLE_MAIN,
		}
		// RouteAdd, never RouteReplace: a route someone added since the listing stays theirs.
		if err := netlink.RouteAdd(r); err != nil {
			if errors.Is(err, unix.EEXIST) {
				if plan.Conflicts == nil {
					plan.Conflicts = map[netip.Prefix]string{}
				}
				plan.Conflicts[p] = "a route added meanwhile"
				continue
			}
			errs = append(errs, fmt.Errorf("adding route %s: %w", p, err))
			continue
		}
		d.log.V(1).Info("route added", "destination", p.String())
	}
	for p, desc := range plan.Conflicts {
		if d.conflicts[p] != desc {
			d.log.Info("not routing a peer's subnet: this network namespace already has its own route for it, which stays", "destination", p.String(), "existing", desc)
		}
	}
	d.conflicts = plan.Conflicts
	if len(errs) > 0 {
		return plan.Conflicts, fmt.Errorf("device %s: %w", d.name, errors.Join(errs...))
	}
	return plan.Conflicts, nil
}

// changeLink carries out a link plan: the MTU, the stale addresses removed, the device's own
// address (want) added, the link up.
func (d *Driver) changeLink(link netlink.Link, want netip.Prefix, lp linkPlan) error {
	if lp.mtu > 0 {
		if err := netlink.LinkSetMTU(link, lp.mtu); err != nil {
			return fmt.Errorf("device %s: setting MTU %d: %w", d.name, lp.mtu, err)
		}
	}
	for _, a := range lp.removeAddrs {
		p, _ := prefixOf(*a.IPNet)
		addr, _ := netip.AddrFromSlice(a.IP)
		addr = addr.Unmap()
		if err := netlink.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("device %s: removing stale address %s: %w", d.name, addr, err)
		}
		d.log.Info("stale address removed", "address", p.String())
	}
	if lp.addAddress {
		if err := netlink.AddrReplace(link, &netlink.Addr{IPNet: ipNet(want)}); err != nil {
			return fmt.Errorf("device %s: setting address %s: %w", d.name, want, err)
		}
	}
	if lp.up {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("device %s: setting link up: %w", d.name, err)
		}
	}
	return nil
}

// routeOf is how planRoutes sees a netlink route (a route without a destination is the
// default route); names are the links' names by index.
func routeOf(r netlink.Route, names map[int]string) route {
	out := route{LinkIndex: r.LinkIndex, Protocol: int(r.Protocol)}
	if r.Dst != nil {
		out.Dst, _ = prefixOf(*r.Dst)
	} else if r.Family == unix.AF_INET6 {
		out.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	} else {
		out.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	var desc []string
	if r.LinkIndex > 0 {
		if name, ok := names[r.LinkIndex]; ok {
			desc = append(desc, "dev "+name)
		} else {
			desc = append(desc, fmt.Sprintf("ifindex %d", r.LinkIndex))
		}
	}
	if r.Gw != nil {
		desc = append(desc, "via "+r.Gw.String())
	}
	if len(r.MultiPath) > 0 {
		desc = append(desc, "multipath")
	}
	if r.Type != 0 && r.Type != unix.RTN_UNICAST {
		desc = append(desc, fmt.Sprintf("type %d", r.Type))
	}
	desc = append(desc, "proto "+r.Protocol.String())
	return route{Dst: out.Dst, LinkIndex: out.LinkIndex, Protocol: out.Protocol, Desc: strings.Join(desc, " ")}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
