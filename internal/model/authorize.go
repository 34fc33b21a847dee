package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// authorize implements Authorize; see its doc comment and DESIGN.md "Authorization semantics".
//
// The decision is taken in five steps, in this order:
//  1. a peer whose protocol section does not match the gateway's is dark (ProtocolMismatch);
//  2. exactly one peer without an authorization block reaches everything (DefaultAllow);
//  3. otherwise the peer's own block decides (NoGrants, UnknownGrant or Authorized);
//  4. a peer that would be allowed and whose subnets overlap an older peer's is dark
//     (SubnetConflict); every overlapping pair is a gateway problem;
//  5. a peer that would be allowed and holds a reverse exposure whose target is outside its
//     subnets is dark (ReverseExposureOutsideSubnets); each such grant is a gateway problem
//     naming the peers that do hold a valid grant.
//
// Nothing here iterates a map into an output, so decisions and messages are stable.
func authorize(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer) (map[string]Decision, []Problem) {
	out := make(map[string]Decision, len(peers))
	if gw == nil {
		for i := range peers {
			p := &peers[i]
			out[p.Name] = Decision{
				Reason:  ReasonGatewayNotFound,
				Message: fmt.Sprintf("gateway %q not found", p.Spec.GatewayRef),
			}
		}
		return out, nil
	}

	exposures := uniqueSorted(exposureNames(gw))
	reverse := uniqueSorted(reverseExposureNames(gw))
	reverseTarget := make(map[string]string, len(gw.Spec.ReverseExposures))
	for _, r := range gw.Spec.ReverseExposures {
		if _, seen := reverseTarget[r.Name]; !seen {
			reverseTarget[r.Name] = r.Target.Address
		}
	}

	// Oldest first (creation time, then name): the order of step 4 and of its problems.
	ordered := make([]*vpnv1.VPNPeer, len(peers))
	for i := range peers {
		ordered[i] = &peers[i]
	}
	slices.SortStableFunc(ordered, compareAge)

	type state struct {
		peer     *vpnv1.VPNPeer
		subnets  []netip.Prefix
		decision Decision
		// rev is the peer's reverse-exposure grant while it would be allowed (steps 2-3).
		rev []string
	}
	states := make([]*state, len(ordered))
	byName := make(map[string]*state, len(ordered))
	for i, p := range ordered {
		st := &state{peer: p, subnets: parsedSubnets(peerSubnets(gw, p))}
		st.decision, st.rev = decideGrant(gw, p, len(peers), exposures, reverse)
		states[i] = st
		byName[p.Name] = st
	}

	var problems []Problem

	// Step 4: subnet conflicts, pairwise over every peer (a dark peer still has a tunnel).
	for j, young := range states {
		var conflicts []string
		for i := 0; i < j; i++ {
			old := states[i]
			pairs := overlappingPairs(young.subnets, old.subnets)
			if len(pairs) == 0 {
				continue
			}
			list := strings.Join(pairs, ", ")
			conflicts = append(conflicts, fmt.Sprintf("%q: %s", old.peer.Name, list))
			problems = append(problems, Problem{
				Reason: ReasonSubnetOverlap,
				Message: fmt.Sprintf("subnets of peer %q overlap those of older peer %q: %s; only the older one can be authorized",
					young.peer.Name, old.peer.Name, list),
			})
		}
		if len(conflicts) > 0 && young.decision.Authorized {
			young.decision = Decision{
				Reason:  ReasonSubnetConflict,
				Message: "subnets overlap those of older peer " + strings.Join(conflicts, "; "),
			}
			young.rev = nil
		}
	}

	// Step 5: reverse exposures are single-grantee; the target must be inside the peer's subnets.
	type violation struct{ rev, peer string }
	var violations []violation
	for _, st := range states {
		if !st.decision.Authorized {
			continue
		}
		var msgs []string
		for _, r := range st.rev {
			target := reverseTarget[r]
			if addrInPrefixes(target, st.subnets) {
				continue
			}
			violations = append(violations, violation{rev: r, peer: st.peer.Name})
			msgs = append(msgs, fmt.Sprintf("reverse exposure %q targets %s, which is not inside this peer's subnets (%s)",
				r, target, joinPrefixes(st.subnets)))
		}
		if len(msgs) > 0 {
			st.decision = Decision{
				Reason: ReasonReverseExposureOutsideSubnets,
				Message: strings.Join(msgs, "; ") +
					"; a reverse exposure may only be granted to the peer whose subnets contain its target",
			}
			st.rev = nil
		}
	}
	slices.SortFunc(violations, func(a, b violation) int {
		if c := strings.Compare(a.rev, b.rev); c != 0 {
			return c
		}
		return strings.Compare(a.peer, b.peer)
	})
	for _, v := range violations {
		// Valid grantees: peers still allowed after every step that hold the grant (their
		// subnets necessarily contain the target).
		var valid []string
		for _, st := range states {
			if st.decision.Authorized && slices.Contains(st.rev, v.rev) {
				valid = append(valid, st.peer.Name)
			}
		}
		slices.Sort(valid)
		msg := fmt.Sprintf("reverse exposure %q (%s) is granted to peer %q, whose subnets do not contain it; ",
			v.rev, reverseTarget[v.rev], v.peer)
		switch len(valid) {
		case 0:
			msg += "no authorized peer holding the grant contains it"
		case 1:
			msg += fmt.Sprintf("its valid grantee is %q", valid[0])
		default:
			msg += "its valid grantees are " + quoteJoin(valid)
		}
		problems = append(problems, Problem{Reason: ReasonReverseExposureConflict, Message: msg})
	}

	for _, st := range states {
		out[st.peer.Name] = st.decision
	}
	return out, problems
}

// decideGrant takes steps 1-3 for one peer: the decision and, when allowed, the reverse
// exposures it is granted.
func decideGrant(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer, peerCount int, exposures, reverse []string) (Decision, []string) {
	if msg, ok := protocolMismatch(gw, p); !ok {
		return Decision{Reason: ReasonProtocolMismatch, Message: msg}, nil
	}
	auth := p.Spec.Authorization
	if peerCount == 1 && auth == nil {
		return Decision{
			Authorized: true,
			Reason:     ReasonDefaultAllow,
			Message:    "single-peer gateway: reaches every exposure and reverse exposure",
		}, reverse
	}
	if auth == nil {
		return Decision{Reason: ReasonNoGrants, Message: MessageNoBlockMultiPeer}, nil
	}
	if len(auth.Exposures) == 0 && len(auth.ReverseExposures) == 0 {
		return Decision{Reason: ReasonNoGrants, Message: MessageEmptyBlock}, nil
	}
	exp := uniqueSorted(auth.Exposures)
	rev := uniqueSorted(auth.ReverseExposures)
	var unknown []string
	for _, n := range exp {
		if _, found := slices.BinarySearch(exposures, n); !found {
			unknown = append(unknown, fmt.Sprintf("exposure %q", n))
		}
	}
	for _, n := range rev {
		if _, found := slices.BinarySearch(reverse, n); !found {
			unknown = append(unknown, fmt.Sprintf("reverse exposure %q", n))
		}
	}
	if len(unknown) > 0 {
		return Decision{
			Reason:  ReasonUnknownGrant,
			Message: fmt.Sprintf("authorization names what gateway %q does not have: %s", gw.Name, strings.Join(unknown, ", ")),
		}, nil
	}
	return Decision{
		Authorized: true,
		Reason:     ReasonAuthorized,
		Message:    fmt.Sprintf("granted exposures: %s; reverse exposures: %s", listOrNone(exp), listOrNone(rev)),
	}, rev
}

// protocolMismatch reports whether the peer's protocol section matches the gateway's
// protocol, and a message naming both when it does not.
func protocolMismatch(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer) (string, bool) {
	var has string
	switch {
	case p.Spec.IPsec != nil && p.Spec.WireGuard != nil:
		has = "both ipsec and wireguard settings"
	case p.Spec.IPsec != nil:
		if gw.Spec.Protocol == vpnv1.ProtocolIPsec {
			return "", true
		}
		has = "protocol ipsec"
	case p.Spec.WireGuard != nil:
		if gw.Spec.Protocol == vpnv1.ProtocolWireGuard {
			return "", true
		}
		has = "protocol wireguard"
	default:
		has = "neither ipsec nor wireguard settings"
	}
	return fmt.Sprintf("peer has %s but gateway %q uses protocol %s", has, gw.Name, gw.Spec.Protocol), false
}

// peerSubnets returns the raw subnets of a peer as written in its spec: the section matching
// the gateway's protocol (ipsec.remoteSubnets or wireguard.subnets), else whichever is set.
func peerSubnets(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer) []string {
	ipsec := func() []string {
		if p.Spec.IPsec == nil {
			return nil
		}
		return p.Spec.IPsec.RemoteSubnets
	}
	wg := func() []string {
		if p.Spec.WireGuard == nil {
			return nil
		}
		return p.Spec.WireGuard.Subnets
	}
	if gw != nil && gw.Spec.Protocol == vpnv1.ProtocolWireGuard && p.Spec.WireGuard != nil {
		return wg()
	}
	if p.Spec.IPsec != nil {
		return ipsec()
	}
	return wg()
}

// compareAge orders peers oldest first: creation time, then name.
func compareAge(a, b *vpnv1.VPNPeer) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// parsedSubnets parses, masks, sorts and de-duplicates subnets, skipping unparsable ones
// (Build reports those).
func parsedSubnets(raw []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range raw {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		out = append(out, p.Masked())
	}
	return sortPrefixes(out)
}

// sortPrefixes sorts by address then length and removes duplicates.
func sortPrefixes(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, comparePrefix)
	return slices.Compact(ps)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// overlappingPairs lists "x overlaps y" for every x in young overlapping some y in old.
func overlappingPairs(young, old []netip.Prefix) []string {
	var out []string
	for _, x := range young {
		for _, y := range old {
			if x.Overlaps(y) {
				out = append(out, x.String()+" overlaps "+y.String())
			}
		}
	}
	return out
}

// addrInPrefixes reports whether the address parses and lies inside one of ps.
func addrInPrefixes(addr string, ps []netip.Prefix) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func exposureNames(gw *vpnv1.VPNGateway) []string {
	out := make([]string, 0, len(gw.Spec.Exposures))
	for _, e := range gw.Spec.Exposures {
		out = append(out, e.Name)
	}
	return out
}

func reverseExposureNames(gw *vpnv1.VPNGateway) []string {
	out := make([]string, 0, len(gw.Spec.ReverseExposures))
	for _, r := range gw.Spec.ReverseExposures {
		out = append(out, r.Name)
	}
	return out
}

// uniqueSorted returns a sorted copy without duplicates; nil when empty.
func uniqueSorted(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return quoteJoin(names)
}

func joinPrefixes(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
