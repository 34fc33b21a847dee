package model

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Link is one ready ClusterLink as the gateways use it: a service cluster's ranges, reached
// through Via on the transit fabric.
type Link struct {
	Name  string         `json:"name"`
	CIDRs []netip.Prefix `json:"cidrs"`
	Via   netip.Addr     `json:"via"`
}

// Route is a gateway's route toward a ready ClusterLink's range: next hop Via.
type Route struct {
	CIDR netip.Prefix `json:"cidr"`
	Via  netip.Addr   `json:"via"`
	// Link is the ClusterLink the route comes from.
	Link string `json:"link"`
}

// Reasons of a ClusterLink's Ready condition.
const (
	ReasonLinkReady = "Ready"
	// ReasonLinkInvalid: a CIDR or the next hop does not parse (admission refuses these; kept for
	// objects admitted before the rule).
	ReasonLinkInvalid = "InvalidSpec"
	// ReasonLinkOverlapsPeerSubnet: a range overlaps the subnets of a peer older than the link.
	ReasonLinkOverlapsPeerSubnet = "OverlapsPeerSubnet"
	// ReasonLinkOverlapsServiceCIDR: a range overlaps a gateway's service CIDR or the pool they
	// are allocated from.
	ReasonLinkOverlapsServiceCIDR = "OverlapsServiceCIDR"
	// ReasonLinkOverlapsClusterRange: a range overlaps the cluster's own pod, service or node CIDRs.
	ReasonLinkOverlapsClusterRange = "OverlapsClusterRange"
	// ReasonLinkOverlapsLink: a range overlaps an older ready ClusterLink's.
	ReasonLinkOverlapsLink = "OverlapsClusterLink"
)

// LinkSpec is one ClusterLink as declared.
type LinkSpec struct {
	Name    string
	CIDRs   []string
	Via     string
	Created time.Time
}

// PeerSubnet is one subnet a peer (or a legacy tunnel) declares, with when the peer was created.
type PeerSubnet struct {
	// Peer is namespace/name (a legacy tunnel: namespace/gateway/tunnel).
	Peer    string
	Subnet  netip.Prefix
	Created time.Time
}

// LinkInput is everything DecideLinks needs, fetched by the caller.
type LinkInput struct {
	Links       []LinkSpec
	PeerSubnets []PeerSubnet
	// ServiceCIDRs of every gateway (namespace/name).
	ServiceCIDRs []GatewayCIDR
	Config       Config
}

// LinkDecision is a ClusterLink's Ready condition and, when ready, what gateways use of it.
type LinkDecision struct {
	Ready   bool
	Reason  string
	Message string
	// Link is the parsed link when Ready.
	Link Link
}

// DecideLinks decides every ClusterLink's Ready condition, keyed by name. Links are taken oldest
// first (then by name). A link is refused, naming both sides, when one of its ranges overlaps:
//   - a gateway's service CIDR, or the pool service CIDRs come from;
//   - the cluster's own pod, service or node CIDRs;
//   - a subnet of a peer created no later than the link (the peer was there first);
//   - a range of an older link that is ready.
//
// A peer created after a ready link that overlaps it does not take the link down (a tenant
// cannot cut a service cluster off for everybody): the gateway model withholds that subnet of
// the peer instead (SubnetOverlapsClusterRange, naming the link). Older wins, as between peers.
func DecideLinks(in LinkInput) map[string]LinkDecision {
	links := slices.Clone(in.Links)
	slices.SortStableFunc(links, func(a, b LinkSpec) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Name, b.Name))
	})
	out := make(map[string]LinkDecision, len(links))
	type held struct {
		link   string
		prefix netip.Prefix
	}
	var ready []held
	for _, l := range links {
		d := decideLink(l, in)
		if d.Ready {
		check:
			for _, c := range d.Link.CIDRs {
				for _, h := range ready {
					if c.Overlaps(h.prefix) {
						d = LinkDecision{Reason: ReasonLinkOverlapsLink,
							Message: fmt.Sprintf("cidr %s overlaps ClusterLink %s cidr %s", c, h.link, h.prefix)}
						break check
					}
				}
			}
		}
		if d.Ready {
			for _, c := range d.Link.CIDRs {
				ready = append(ready, held{l.Name, c})
			}
		}
		out[l.Name] = d
	}
	return out
}

// decideLink checks one link against everything but the other links.
func decideLink(l LinkSpec, in LinkInput) LinkDecision {
	refuse := func(reason, format string, args ...any) LinkDecision {
		return LinkDecision{Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if len(l.CIDRs) == 0 {
		return refuse(ReasonLinkInvalid, "no cidrs")
	}
	via, err := netip.ParseAddr(l.Via)
	if err != nil || !via.Is4() || !via.IsGlobalUnicast() {
		return refuse(ReasonLinkInvalid, "via %q is not a unicast IPv4 address", l.Via)
	}
	link := Link{Name: l.Name, Via: via}
	for _, s := range l.CIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() || p.Masked() != p || p.Bits() == 0 {
			return refuse(ReasonLinkInvalid, "cidr %q is not an IPv4 network address in CIDR notation", s)
		}
		link.CIDRs = append(link.CIDRs, p)
	}
	slices.SortFunc(link.CIDRs, comparePrefix)
	link.CIDRs = slices.Compact(link.CIDRs)
	for _, c := range link.CIDRs {
		if c.Contains(via) {
			return refuse(ReasonLinkInvalid, "via %s lies inside the link's own cidr %s: the next hop must be on the fabric", via, c)
		}
		for _, g := range sortedGatewayCIDRs(in.ServiceCIDRs) {
			if g.CIDR.IsValid() && c.Overlaps(g.CIDR) {
				return refuse(ReasonLinkOverlapsServiceCIDR, "cidr %s overlaps gateway %s service CIDR %s", c, g.Gateway, g.CIDR)
			}
		}
		if pool := in.Config.PoolCIDR; pool.IsValid() && c.Overlaps(pool) {
			return refuse(ReasonLinkOverlapsServiceCIDR, "cidr %s overlaps the service CIDR pool %s", c, pool)
		}
		for _, r := range []struct {
			what string
			ps   []netip.Prefix
		}{
			{"the cluster's pod CIDR", in.Config.ClusterPodCIDRs},
			{"the cluster's service CIDR", in.Config.ClusterServiceCIDRs},
			{"the node network", in.Config.NodeCIDRs},
		} {
			for _, p := range r.ps {
				if p.IsValid() && c.Overlaps(p) {
					return refuse(ReasonLinkOverlapsClusterRange, "cidr %s overlaps %s %s", c, r.what, p)
				}
			}
		}
		for _, s := range sortedPeerSubnets(in.PeerSubnets) {
			if s.Subnet.IsValid() && c.Overlaps(s.Subnet) && !s.Created.After(l.Created) {
				return refuse(ReasonLinkOverlapsPeerSubnet, "cidr %s overlaps peer %s subnet %s", c, s.Peer, s.Subnet)
			}
		}
	}
	return LinkDecision{Ready: true, Reason: ReasonLinkReady, Link: link,
		Message: fmt.Sprintf("gateways route %s via %s and admit it as an internal source", joinPrefixes(link.CIDRs), via)}
}

func sortedGatewayCIDRs(gs []GatewayCIDR) []GatewayCIDR {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b GatewayCIDR) int { return strings.Compare(a.Gateway, b.Gateway) })
	return out
}

func sortedPeerSubnets(ps []PeerSubnet) []PeerSubnet {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b PeerSubnet) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Peer, b.Peer), comparePrefix(a.Subnet, b.Subnet))
	})
	return out
}

// linkRoutes are the routes and internal source ranges the ready links give a gateway, sorted
// by range; links with an invalid next hop or range are skipped (DecideLinks never makes them ready).
func linkRoutes(links []Link) []Route {
	var out []Route
	for _, l := range links {
		if !l.Via.Is4() {
			continue
		}
		for _, c := range l.CIDRs {
			if c.IsValid() && c.Addr().Is4() {
				out = append(out, Route{CIDR: c.Masked(), Via: l.Via, Link: l.Name})
			}
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		return cmp.Or(comparePrefix(a.CIDR, b.CIDR), strings.Compare(a.Link, b.Link))
	})
	return out
}

// DeclaredSubnets are the subnets a peer declares in either protocol section, parsed, masked,
// sorted and unique (unparsable ones skipped): what a ClusterLink may not overlap.
func DeclaredSubnets(p *vpnv1.VPNPeer) []netip.Prefix {
	var raw []string
	if p.Spec.IPsec != nil {
		raw = append(raw, p.Spec.IPsec.RemoteSubnets...)
	}
	if p.Spec.WireGuard != nil {
		raw = append(raw, p.Spec.WireGuard.Subnets...)
	}
	return parsedSubnets(raw)
}

// ParseReadyLink is the Link of a ClusterLink whose Ready condition the link reconciler set
// for its current spec, or false. The gateways use exactly these.
func ParseReadyLink(name string, cidrs []string, via string) (Link, bool) {
	d := decideLink(LinkSpec{Name: name, CIDRs: cidrs, Via: via}, LinkInput{})
	return d.Link, d.Ready
}

// ServiceCIDRRefusal says why a gateway may not claim the service CIDR it asks for: it overlaps
// one of the cluster's own ranges (pods, Services, nodes, internal sources), which the admin's
// configuration names. A tenant's spec.serviceCIDR must never take the cluster's addresses:
// the gateway would answer for them, and other gateways' targets there would be refused.
func ServiceCIDRRefusal(p netip.Prefix, c Config) (message string, refused bool) {
	for _, r := range []struct {
		what   string
		ranges []netip.Prefix
	}{
		{"pod CIDR", c.ClusterPodCIDRs},
		{"Service CIDR", c.ClusterServiceCIDRs},
		{"node network", c.NodeCIDRs},
		{"internal source range", c.InternalSourceCIDRs},
	} {
		for _, q := range r.ranges {
			if q.Overlaps(p) {
				return fmt.Sprintf("spec.serviceCIDR %s overlaps the cluster's %s %s (operator settings): a gateway's service CIDR may not take the cluster's addresses; leave it empty to get one from the pool %s", p, r.what, q, c.PoolCIDR), true
			}
		}
	}
	return "", false
}
