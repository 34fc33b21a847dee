package model

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
)

// Restrict is what a gateway whose configuration has become invalid keeps serving: the last
// good model, reduced to what the current input still grants. A gateway that cannot be built
// (an exposure's target refused, say) keeps its tunnels, but a revocation made meanwhile must
// land at once:
//   - a peer deleted (or recreated: another UID), or whose tunnel settings changed (identity,
//     address, key, proposals), is gone; a peer that was not in the last model is not added;
//   - a peer's tunnel carries only what it carried and its spec still declares (a subnet
//     withdrawn or narrowed is withdrawn or narrowed), and it is still subject to every
//     check on subnets the model makes (Authorize, against the current peers);
//   - a peer keeps only the grants its current authorization still gives (none when it is
//     dark now: no block on a multi-peer gateway, an empty block, an unknown name, a conflict);
//   - an exposure or reverse exposure is kept only while the spec still has it with the same
//     target, only with the ports the spec still lists;
//   - internal sources, ClusterLink routes and reverse clients only while still current.
//
// Nothing is ever added or widened. revoked says what was taken away, one line each (empty:
// the last model stands as it was). The result verifies (Verify); should it not, every peer
// is taken out instead.
func Restrict(last *Gateway, in Input) (restricted *Gateway, revoked []string) {
	out := cloneGateway(last)
	gw := in.Gateway
	if gw == nil {
		out.Peers = nil
		clearGrants(out)
		return out, []string{"the gateway is gone: every peer"}
	}
	cur := &Gateway{ServiceCIDR: last.ServiceCIDR}
	var ignored errList
	buildExposures(gw, in.Services, cur, &ignored)
	scope := Scope{ServiceCIDR: last.ServiceCIDR, LocalID: GatewayLocalID(gw, in.PublicAddress), Config: in.Config,
		RefusedSecrets: in.RefusedSecrets, Links: in.Links}
	verdicts, _ := authorize(gw, in.Peers, scope)
	buildPeers(gw, in.Peers, verdicts, cur, &ignored)

	// Exposures.
	specVIP := map[string]string{}
	for _, e := range gw.Spec.Exposures {
		specVIP[e.Name] = e.VirtualIP
	}
	for _, r := range gw.Spec.ReverseExposures {
		specVIP[r.Name] = r.VirtualIP
	}
	vipChanged := func(name string, vip netip.Addr) bool {
		s := specVIP[name]
		return s != "" && s != vip.String()
	}
	out.Exposures = slices.DeleteFunc(out.Exposures, func(x Exposure) bool {
		i := slices.IndexFunc(cur.Exposures, func(c Exposure) bool { return c.Name == x.Name })
		switch {
		case i < 0:
			revoked = append(revoked, fmt.Sprintf("exposure %q: no longer in the spec", x.Name))
			return true
		case cur.Exposures[i].TargetService != x.TargetService || x.TargetService == "" && cur.Exposures[i].Target != x.Target:
			revoked = append(revoked, fmt.Sprintf("exposure %q: its target changed", x.Name))
			return true
		case vipChanged(x.Name, x.VirtualIP):
			revoked = append(revoked, fmt.Sprintf("exposure %q: its virtual IP changed", x.Name))
			return true
		}
		return false
	})
	for i := range out.Exposures {
		c := cur.Exposures[slices.IndexFunc(cur.Exposures, func(c Exposure) bool { return c.Name == out.Exposures[i].Name })]
		kept := keepPorts(out.Exposures[i].Ports, c.Ports, out.Exposures[i].TargetService != "")
		if len(kept) < len(out.Exposures[i].Ports) {
			revoked = append(revoked, fmt.Sprintf("exposure %q: ports no longer in the spec", out.Exposures[i].Name))
		}
		out.Exposures[i].Ports = kept
	}
	out.Exposures = slices.DeleteFunc(out.Exposures, func(x Exposure) bool { return len(x.Ports) == 0 })

	out.ReverseExposures = slices.DeleteFunc(out.ReverseExposures, func(x ReverseExposure) bool {
		i := slices.IndexFunc(cur.ReverseExposures, func(c ReverseExposure) bool { return c.Name == x.Name })
		switch {
		case i < 0:
			revoked = append(revoked, fmt.Sprintf("reverse exposure %q: no longer in the spec", x.Name))
			return true
		case cur.ReverseExposures[i].Target != x.Target:
			revoked = append(revoked, fmt.Sprintf("reverse exposure %q: its target changed", x.Name))
			return true
		case vipChanged(x.Name, x.VirtualIP):
			revoked = append(revoked, fmt.Sprintf("reverse exposure %q: its virtual IP changed", x.Name))
			return true
		}
		return false
	})
	for i := range out.ReverseExposures {
		x := &out.ReverseExposures[i]
		c := cur.ReverseExposures[slices.IndexFunc(cur.ReverseExposures, func(c ReverseExposure) bool { return c.Name == x.Name })]
		kept := keepPorts(x.Ports, c.Ports, false)
		if len(kept) < len(x.Ports) {
			revoked = append(revoked, fmt.Sprintf("reverse exposure %q: ports no longer in the spec", x.Name))
		}
		x.Ports = kept
	}
	out.ReverseExposures = slices.DeleteFunc(out.ReverseExposures, func(x ReverseExposure) bool { return len(x.Ports) == 0 })

	// Peers.
	expNames := make([]string, 0, len(out.Exposures))
	for _, x := range out.Exposures {
		expNames = append(expNames, x.Name)
	}
	revNames := make([]string, 0, len(out.ReverseExposures))
	for _, x := range out.ReverseExposures {
		revNames = append(revNames, x.Name)
	}
	out.Peers = slices.DeleteFunc(out.Peers, func(p Peer) bool {
		i := slices.IndexFunc(cur.Peers, func(c Peer) bool { return c.Name == p.Name })
		switch {
		case i < 0:
			revoked = append(revoked, fmt.Sprintf("peer %q: deleted", p.Name))
			return true
		case cur.Peers[i].UID != p.UID:
			revoked = append(revoked, fmt.Sprintf("peer %q: replaced by another object", p.Name))
			return true
		case !sameTunnel(p, cur.Peers[i]):
			revoked = append(revoked, fmt.Sprintf("peer %q: its tunnel settings changed (applied once the gateway is valid)", p.Name))
			return true
		}
		return false
	})
	for i := range out.Peers {
		p := &out.Peers[i]
		c := cur.Peers[slices.IndexFunc(cur.Peers, func(c Peer) bool { return c.Name == p.Name })]
		if src := intersectPrefixes(p.SourceCIDRs, c.SourceCIDRs); !slices.Equal(src, p.SourceCIDRs) {
			revoked = append(revoked, fmt.Sprintf("peer %q: its tunnel carries only %s now (was %s)", p.Name, joinPrefixes(src), joinPrefixes(p.SourceCIDRs)))
			p.SourceCIDRs = src
			if p.IPsec != nil && p.IPsec.SubnetReqids != nil {
				// one child for the subnets left, under the peer's own reqid
				ip := *p.IPsec
				ip.SubnetReqids = nil
				p.IPsec = &ip
			}
		}
		if !c.Authorization.Authorized {
			if p.Authorization.Authorized {
				revoked = append(revoked, fmt.Sprintf("peer %q: every grant (%s: %s)", p.Name, c.Authorization.Reason, c.Authorization.Message))
			}
			p.Authorization = c.Authorization
			p.Exposures, p.ReverseExposures = nil, nil
			continue
		}
		exp := intersectNames(intersectNames(p.Exposures, c.Exposures), expNames)
		rev := intersectNames(intersectNames(p.ReverseExposures, c.ReverseExposures), revNames)
		for _, n := range p.Exposures {
			if !slices.Contains(exp, n) {
				revoked = append(revoked, fmt.Sprintf("peer %q: exposure %q", p.Name, n))
			}
		}
		for _, n := range p.ReverseExposures {
			if !slices.Contains(rev, n) {
				revoked = append(revoked, fmt.Sprintf("peer %q: reverse exposure %q", p.Name, n))
			}
		}
		p.Exposures, p.ReverseExposures = exp, rev
	}

	// The cluster side.
	routes := linkRoutes(in.Links)
	internal := slices.Clone(in.Config.InternalSourceCIDRs)
	for _, r := range routes {
		internal = append(internal, r.CIDR)
	}
	out.Routes = slices.DeleteFunc(out.Routes, func(r Route) bool {
		gone := !slices.ContainsFunc(routes, func(c Route) bool { return c.CIDR == r.CIDR && c.Via == r.Via })
		if gone {
			revoked = append(revoked, fmt.Sprintf("route %s via %s: its ClusterLink is no longer ready", r.CIDR, r.Via))
		}
		return gone
	})
	out.InternalSourceCIDRs = slices.DeleteFunc(out.InternalSourceCIDRs, func(c netip.Prefix) bool {
		gone := !slices.Contains(internal, c)
		if gone {
			revoked = append(revoked, fmt.Sprintf("internal source %s", c))
		}
		return gone
	})
	clients := reverseClients(in.ReverseClients, out.InternalSourceCIDRs)
	out.ReverseClients = slices.DeleteFunc(out.ReverseClients, func(a netip.Addr) bool {
		gone := !slices.Contains(clients, a)
		if gone {
			revoked = append(revoked, fmt.Sprintf("reverse client %s", a))
		}
		return gone
	})

	clearGrants(out)
	fillGrantees(out)
	out.Problems = nil
	if err := Verify(out); err != nil {
		out.Peers = nil
		clearGrants(out)
		revoked = append(revoked, fmt.Sprintf("every peer: the reduced configuration does not verify (%v)", err))
	}
	return out, revoked
}

// cloneGateway is a deep copy of g (through its JSON form, which is the whole model).
func cloneGateway(g *Gateway) *Gateway {
	raw, err := json.Marshal(g)
	if err != nil {
		panic(fmt.Sprintf("model: encoding a gateway: %v", err))
	}
	out := &Gateway{}
	if err := json.Unmarshal(raw, out); err != nil {
		panic(fmt.Sprintf("model: decoding a gateway: %v", err))
	}
	return out
}

func clearGrants(g *Gateway) {
	for i := range g.Exposures {
		g.Exposures[i].GrantedTo = nil
	}
	for i := range g.ReverseExposures {
		g.ReverseExposures[i].Grantee = ""
	}
}

// sameTunnel reports whether the peer's tunnel settings are the current ones (the reqids are
// the gateway's to assign and are compared by neither).
func sameTunnel(last, cur Peer) bool {
	if (last.IPsec == nil) != (cur.IPsec == nil) || (last.WireGuard == nil) != (cur.WireGuard == nil) {
		return false
	}
	if last.IPsec != nil {
		a, b := *last.IPsec, *cur.IPsec
		a.Reqid, b.Reqid = 0, 0
		a.SubnetReqids, b.SubnetReqids = nil, nil
		if !reflect.DeepEqual(a, b) {
			return false
		}
	}
	return last.WireGuard == nil || reflect.DeepEqual(*last.WireGuard, *cur.WireGuard)
}

// keepPorts are the ports of last that cur still has (by protocol, port and, unless the
// target is a Service whose port mapping the operator resolves, target port).
func keepPorts(last, cur []Port, service bool) []Port {
	return slices.DeleteFunc(slices.Clone(last), func(p Port) bool {
		return !slices.ContainsFunc(cur, func(c Port) bool {
			return c.Protocol == p.Protocol && c.Port == p.Port && (service || c.TargetPort == p.TargetPort)
		})
	})
}

// intersectPrefixes is the part of a that b covers too: each prefix of a that lies in one of
// b, and each prefix of b that lies in one of a. Sorted, unique.
func intersectPrefixes(a, b []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range a {
		for _, y := range b {
			switch {
			case !x.Overlaps(y):
			case x.Bits() >= y.Bits():
				out = append(out, x)
			default:
				out = append(out, y)
			}
		}
	}
	out = sortPrefixes(out)
	return slices.Compact(out)
}

// intersectNames are the names in both a and b, sorted.
func intersectNames(a, b []string) []string {
	var out []string
	for _, n := range a {
		if slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// RevokedSummary joins Restrict's lines for a condition message.
func RevokedSummary(revoked []string, limit int) string {
	if len(revoked) <= limit {
		return strings.Join(revoked, "; ")
	}
	return strings.Join(revoked[:limit], "; ") + fmt.Sprintf("; and %d more", len(revoked)-limit)
}
