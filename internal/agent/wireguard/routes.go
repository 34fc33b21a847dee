package wireguard

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// route is a route of the main table as the route plan sees it.
type route struct {
	Dst       netip.Prefix
	LinkIndex int    // outgoing interface (0: none, e.g. a blackhole or a multipath route)
	Protocol  int    // rtm_protocol: RouteProtocol marks the driver's own
	Desc      string // how it is reported: "dev eth0 via 10.0.0.1 proto kernel"
}

// ours is a route the driver installed through its device.
func (r route) ours(link int) bool { return r.Protocol == RouteProtocol && r.LinkIndex == link }

// routePlan is what convergeLink does with the routes through the device.
type routePlan struct {
	// Add are wanted prefixes no route exists for: the driver adds them (marked RouteProtocol).
	Add []netip.Prefix
	// Remove are the driver's own routes no longer wanted.
	Remove []route
	// Conflicts are wanted prefixes another route already covers exactly (the node's, another
	// program's, or one of ours through another device), with that route's description: they
	// are left alone and reported, never replaced.
	Conflicts map[netip.Prefix]string
}

// planRoutes decides, from the routes of the main table, which of the wanted prefixes the
// driver routes through its device (link): a prefix gets a route only where no route for
// exactly that prefix exists that the driver did not create; its own routes no longer wanted
// (or, added before, now beside another route for the same prefix) are removed, and nobody
// else's route is ever touched. Routes for other prefixes (a shorter
// or longer one overlapping a wanted prefix) are not conflicts: the kernel picks the longest
// match, so the node's more specific routes keep winning and its less specific ones are only
// narrowed for the peer's range, exactly as on any router with a VPN.
func planRoutes(wanted []netip.Prefix, existing []route, link int) routePlan {
	want := map[netip.Prefix]bool{}
	for _, p := range wanted {
		want[p.Masked()] = true
	}
	others := map[netip.Prefix][]string{}
	for _, r := range existing {
		if !r.ours(link) {
			others[r.Dst.Masked()] = append(others[r.Dst.Masked()], r.Desc)
		}
	}
	// Our own routes stay while wanted and alone; beside another route for the same prefix
	// (one added after ours with another metric) ours gives way.
	have := map[netip.Prefix]bool{}
	var plan routePlan
	for _, r := range existing {
		dst := r.Dst.Masked()
		switch {
		case !r.ours(link):
		case want[dst] && len(others[dst]) == 0:
			have[dst] = true
		default:
			plan.Remove = append(plan.Remove, r)
		}
	}
	for p := range want {
		switch {
		case len(others[p]) > 0:
			if plan.Conflicts == nil {
				plan.Conflicts = map[netip.Prefix]string{}
			}
			descs := others[p]
			slices.Sort(descs)
			plan.Conflicts[p] = strings.Join(slices.Compact(descs), "; ")
		case !have[p]:
			plan.Add = append(plan.Add, p)
		}
	}
	slices.SortFunc(plan.Add, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	return plan
}

// conflictNote is the peer status message for its subnets another route holds.
func conflictNote(conflicts map[netip.Prefix]string, nets []netip.Prefix) string {
	var parts []string
	for _, n := range nets {
		if desc, ok := conflicts[n.Masked()]; ok {
			parts = append(parts, fmt.Sprintf("%s (%s)", n.Masked(), desc))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Sort(parts)
	return "not routed into the tunnel, this network namespace already has its own route for " + strings.Join(parts, ", ")
}
