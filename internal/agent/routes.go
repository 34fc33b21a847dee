package agent

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// LinkRouteProtocol marks the routes the agent installs toward ready ClusterLinks' ranges
// (rtnetlink protocol number; `ip route show proto 191`), so it only ever removes its own.
const LinkRouteProtocol netlink.RouteProtocol = 191

// ensureLinkRoutes installs, in the gateway pod's network namespace, a route to each ready
// ClusterLink range via the link's next hop, and removes the agent's routes no link asks for.
//
// Only where the next hop is on a network the pod is directly attached to (the transit fabric,
// e.g. a second interface): otherwise the pod's own default route already carries the range to
// the node, whose routing decides, and the route is left out (returned in skipped). A
// host-network gateway shares the node's namespace, whose routing table is the admin's: the
// agent adds nothing there and removes nothing. h nil: the agent's namespace.
func ensureLinkRoutes(h *netlink.Handle, m *model.Gateway) (skipped []string, err error) {
	if m.Endpoint.Kind == model.EndpointHostNetwork {
		return nil, nil
	}
	if h == nil {
		h = &netlink.Handle{}
	}
	want := map[netip.Prefix]bool{}
	for _, r := range m.Routes {
		if !r.CIDR.IsValid() || !r.Via.Is4() {
			continue
		}
		link, onLink := directlyReachable(h, r.Via)
		if !onLink {
			skipped = append(skipped, fmt.Sprintf("%s via %s (ClusterLink %s): the next hop is not on a network of the gateway pod; its default route carries the range",
				r.CIDR, r.Via, r.Link))
			continue
		}
		route := &netlink.Route{
			Dst: prefixNet(r.CIDR), Gw: r.Via.AsSlice(), LinkIndex: link,
			Protocol: LinkRouteProtocol, Table: unix.RT_TABLE_MAIN,
		}
		if err := h.RouteReplace(route); err != nil {
			return skipped, fmt.Errorf("route %s via %s (ClusterLink %s): %w", r.CIDR, r.Via, r.Link, err)
		}
		want[r.CIDR.Masked()] = true
	}
	ours, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: LinkRouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return skipped, fmt.Errorf("listing the ClusterLink routes: %w", err)
	}
	for _, rt := range ours {
		if rt.Dst == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(rt.Dst.IP)
		ones, _ := rt.Dst.Mask.Size()
		if want[netip.PrefixFrom(ip.Unmap(), ones)] {
			continue
		}
		if err := h.RouteDel(&rt); err != nil {
			return skipped, fmt.Errorf("removing the stale ClusterLink route %s: %w", rt.Dst, err)
		}
	}
	return skipped, nil
}

// directlyReachable reports whether a lies on a network the namespace is attached to (the
// kernel's route to it has no gateway), with the interface.
func directlyReachable(h *netlink.Handle, a netip.Addr) (linkIndex int, ok bool) {
	routes, err := h.RouteGet(a.AsSlice())
	if err != nil || len(routes) == 0 {
		return 0, false
	}
	r := routes[0]
	if r.Gw != nil || r.Type == unix.RTN_LOCAL {
		return 0, false
	}
	return r.LinkIndex, true
}
