package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Scope is what a gateway's peers are checked against besides each other: the gateway's own
// service CIDR and identity, and the cluster's ranges from the operator's configuration.
type Scope struct {
	// ServiceCIDR of the gateway; invalid (zero) while none is assigned yet.
	ServiceCIDR netip.Prefix
	// LocalID is the gateway's own IKE identity (spec.ipsec.localID, else its public address;
	// see GatewayLocalID); empty when not known yet.
	LocalID string
	Config  Config
	// RefusedSecrets are the Secrets (by name, with their type) that may not hold tunnel
	// credentials (CredentialSecretAllowed); a peer naming one gets no tunnel.
	RefusedSecrets map[string]string
	// Links are the ready ClusterLinks: their ranges belong to a service cluster, so no peer
	// subnet may overlap them (the link was there first; see DecideLinks).
	Links []Link
}

// GatewayLocalID is the gateway's IKE identity: spec.ipsec.localID, else its public address.
func GatewayLocalID(gw *vpnv1.VPNGateway, publicAddress string) string {
	if gw != nil && gw.Spec.IPsec != nil && gw.Spec.IPsec.LocalID != "" {
		return gw.Spec.IPsec.LocalID
	}
	return publicAddress
}

// reservedRange is a range no peer subnet may overlap, with the reason and what it is.
type reservedRange struct {
	prefix netip.Prefix
	reason string
	what   string
}

// reservedRanges lists the ranges of the scope, the gateway's service CIDR first.
func (s Scope) reservedRanges() []reservedRange {
	var out []reservedRange
	if s.ServiceCIDR.IsValid() {
		out = append(out, reservedRange{s.ServiceCIDR.Masked(), ReasonSubnetOverlapsServiceCIDR, "the gateway's service CIDR"})
	}
	add := func(what string, ps []netip.Prefix) {
		for _, p := range ps {
			if p.IsValid() {
				out = append(out, reservedRange{p.Masked(), ReasonSubnetOverlapsClusterRange, what})
			}
		}
	}
	add("the cluster's pod CIDR", s.Config.ClusterPodCIDRs)
	add("the cluster's service CIDR", s.Config.ClusterServiceCIDRs)
	add("the node network", s.Config.NodeCIDRs)
	add("the internal source CIDRs", s.Config.InternalSourceCIDRs)
	for _, l := range s.Links {
		add("ClusterLink "+l.Name, l.CIDRs)
	}
	return out
}

// verdict is one peer's decision and the subnets its tunnel carries or is denied.
type verdict struct {
	Decision
	tunnel, withheld []netip.Prefix
}

// authorize implements Authorize; see its doc comment and docs/design.md "Authorization"
// and "Security model".
//
// The decision is taken in these steps, in this order:
//  1. a peer whose protocol section does not match the gateway's is dark and has no tunnel
//     (ProtocolMismatch);
//  2. exactly one peer without an authorization block reaches everything (DefaultAllow);
//     otherwise the peer's own block decides (NoGrants, UnknownGrant or Authorized);
//  3. oldest first, a peer whose identity (IKE remote ID, WireGuard public key) is an older
//     peer's or the gateway's own is dark and has no tunnel (DuplicateIdentity): a PSK proves
//     one identity; then a peer whose credentials are in a Secret unfit for them is dark and
//     has no tunnel (CredentialsRefused);
//  4. a peer's subnets overlapping the gateway's service CIDR or the cluster's ranges are
//     withheld from its tunnel and the peer is dark (SubnetOverlapsServiceCIDR,
//     SubnetOverlapsClusterRange);
//  5. a peer's subnets overlapping any older peer's (authorized, dark or conflicting) are
//     withheld from its tunnel and the peer is dark (SubnetConflict); every overlapping pair is
//     a gateway problem. Tunnels are thereby pairwise disjoint (one source, one tunnel);
//  6. a peer still allowed that holds a reverse exposure whose target is outside its subnets
//     is dark (ReverseExposureOutsideSubnets); each such grant is a gateway problem naming the
//     peers that do hold a valid grant.
//
// Nothing here iterates a map into an output, so decisions and messages are stable.
func authorize(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, scope Scope) (map[string]verdict, []Problem) {
	out := make(map[string]verdict, len(peers))
	if gw == nil {
		for i := range peers {
			p := &peers[i]
			out[p.Name] = verdict{Decision: Decision{
				Reason:  ReasonGatewayNotFound,
				Message: fmt.Sprintf("gateway %q not found", p.Spec.GatewayRef),
			}, withheld: parsedSubnets(peerSubnets(gw, p))}
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
	reserved := scope.reservedRanges()

	// Oldest first (creation time, then name): the order of steps 3 to 5 and of their problems.
	ordered := make([]*vpnv1.VPNPeer, len(peers))
	for i := range peers {
		ordered[i] = &peers[i]
	}
	slices.SortStableFunc(ordered, compareAge)

	type state struct {
		peer     *vpnv1.VPNPeer
		subnets  []netip.Prefix // as declared
		tunnel   []netip.Prefix
		withheld []netip.Prefix
		decision Decision
		// rev is the peer's reverse-exposure grant while it would be allowed.
		rev []string
		// refused: a step made the peer dark (the first refusal's reason stays).
		refused bool
	}
	states := make([]*state, len(ordered))
	backing := make([]state, len(ordered)) // one allocation for all of them
	for i, p := range ordered {
		st := &backing[i]
		st.peer, st.subnets = p, parsedSubnets(peerSubnets(gw, p))
		st.decision, st.rev = decideGrant(gw, p, len(peers), exposures, reverse)
		states[i] = st
	}
	// refuse makes a peer dark with the first refusal found: a later, less fundamental step
	// never replaces an earlier step's reason.
	refuse := func(st *state, reason, msg string) {
		if st.refused {
			return
		}
		st.refused = true
		st.decision = Decision{Reason: reason, Message: msg}
		st.rev = nil
	}

	var problems []Problem
	declared := make([][]netip.Prefix, len(states))
	for i, st := range states {
		declared[i] = st.subnets
	}
	older := olderOverlaps(declared)
	localID, _ := CanonicalID(scope.LocalID)    // a refused local ID is the gateway's own problem (buildIPsecGateway)
	ids := make(map[string]string, len(states)) // normalized identity -> peer holding it
	for j, st := range states {
		if st.decision.Reason == ReasonProtocolMismatch {
			st.refused = true
			st.withheld = st.subnets
			continue
		}

		// Step 3: identities.
		id, key, idWhat, idErr := peerIdentity(gw, st.peer)
		switch other, taken := ids[key]; {
		case id == "":
		case idErr != nil:
			refuse(st, ReasonInvalidIdentity, fmt.Sprintf("%s %v; a pre-shared key must prove exactly one identity", idWhat, idErr))
		case gw.Spec.Protocol == vpnv1.ProtocolIPsec && localID != "" && key == localID:
			refuse(st, ReasonDuplicateIdentity, fmt.Sprintf("%s %q is the gateway's own IKE identity; a peer must present its own", idWhat, id))
			problems = append(problems, Problem{Reason: ReasonIdentityConflict,
				Message: fmt.Sprintf("peer %q presents the gateway's own IKE identity %q; it gets no tunnel", st.peer.Name, id)})
		case taken:
			refuse(st, ReasonDuplicateIdentity, fmt.Sprintf("%s %q is already that of older peer %q; only the older one gets a tunnel", idWhat, id, other))
			problems = append(problems, Problem{Reason: ReasonIdentityConflict,
				Message: fmt.Sprintf("peers %q and %q have the same %s %q; only the older, %q, gets a tunnel", other, st.peer.Name, idWhat, id, other)})
		default:
			ids[key] = st.peer.Name
		}
		if st.refused {
			st.withheld = st.subnets
			continue
		}
		// A peer's own credentials decide only its own tunnel (its identity stays taken, so
		// its siblings' decisions do not depend on which Secrets exist).
		if name, typ, bad := refusedCredentials(st.peer, scope.RefusedSecrets); bad {
			refuse(st, ReasonCredentialsRefused, fmt.Sprintf("Secret %q is of type %q: tunnel credentials must be kept in an Opaque Secret; the peer gets no tunnel", name, typ))
			st.withheld = st.subnets
			continue
		}

		// Steps 4 and 5: subnets, each installed or withheld.
		conflicting := make(map[int]bool)
		for _, pairs := range older[j] {
			for _, pr := range pairs {
				conflicting[pr[0]] = true
			}
		}
		var reservedHits, conflicts []string
		reservedReason := ""
		for k, c := range st.subnets {
			withhold := false
			for _, r := range reserved {
				if c.Overlaps(r.prefix) {
					if reservedReason == "" {
						reservedReason = r.reason
					}
					reservedHits = append(reservedHits, fmt.Sprintf("%s overlaps %s %s", c, r.what, r.prefix))
					withhold = true
				}
			}
			if withhold || conflicting[k] {
				st.withheld = append(st.withheld, c)
				continue
			}
			st.tunnel = append(st.tunnel, c)
		}
		if len(reservedHits) > 0 {
			refuse(st, reservedReason, strings.Join(reservedHits, "; ")+
				"; these subnets get no tunnel and the peer is dark until they are removed")
		}
		olds := make([]int, 0, len(older[j]))
		for i := range older[j] {
			olds = append(olds, i)
		}
		slices.Sort(olds)
		for _, i := range olds {
			old := states[i]
			idx := older[j][i]
			slices.SortFunc(idx, func(a, b [2]int) int {
				if a[0] != b[0] {
					return a[0] - b[0]
				}
				return a[1] - b[1]
			})
			pairs := make([]string, len(idx))
			for n, pr := range idx {
				pairs[n] = st.subnets[pr[0]].String() + " overlaps " + old.subnets[pr[1]].String()
			}
			list := strings.Join(pairs, ", ")
			conflicts = append(conflicts, fmt.Sprintf("%q: %s", old.peer.Name, list))
			problems = append(problems, Problem{
				Reason: ReasonSubnetOverlap,
				Message: fmt.Sprintf("subnets of peer %q overlap those of older peer %q: %s; the younger gets no tunnel for them and cannot be authorized",
					st.peer.Name, old.peer.Name, list),
			})
		}
		if len(conflicts) > 0 {
			refuse(st, ReasonSubnetConflict, "subnets overlap those of older peer "+strings.Join(conflicts, "; ")+
				"; the overlapping subnets get no tunnel (one source, one tunnel)")
		}
	}

	// Step 6: reverse exposures are single-grantee; the target must be inside the peer's subnets.
	type violation struct{ rev, peer string }
	var violations []violation
	for _, st := range states {
		if !st.decision.Authorized {
			continue
		}
		var msgs []string
		for _, r := range st.rev {
			target := reverseTarget[r]
			if addrInPrefixes(target, st.tunnel) {
				continue
			}
			violations = append(violations, violation{rev: r, peer: st.peer.Name})
			msgs = append(msgs, fmt.Sprintf("reverse exposure %q targets %s, which is not inside this peer's subnets (%s)",
				r, target, joinPrefixes(st.tunnel)))
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
		out[st.peer.Name] = verdict{Decision: st.decision, tunnel: st.tunnel, withheld: st.withheld}
	}
	return out, problems
}

// refusedCredentials reports the first Secret the peer authenticates with that is refused.
func refusedCredentials(p *vpnv1.VPNPeer, refused map[string]string) (name, typ string, bad bool) {
	var refs []string
	if p.Spec.IPsec != nil {
		refs = append(refs, p.Spec.IPsec.PSKSecretRef.Name)
	}
	if p.Spec.WireGuard != nil && p.Spec.WireGuard.PresharedKeySecretRef != nil {
		refs = append(refs, p.Spec.WireGuard.PresharedKeySecretRef.Name)
	}
	for _, r := range refs {
		if t, ok := refused[r]; ok {
			return r, t, true
		}
	}
	return "", "", false
}

// peerIdentity is what authenticates the peer on the gateway's protocol — the IKE remote ID
// (the address when no ID is given) or the WireGuard public key — the key it is compared
// under (its canonical form, CanonicalID) and what to call it; err says why it names no one
// identity. An empty id: nothing to compare.
func peerIdentity(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer) (id, key, what string, err error) {
	switch {
	case gw.Spec.Protocol == vpnv1.ProtocolIPsec && p.Spec.IPsec != nil:
		id = p.Spec.IPsec.Peer.ID
		if id == "" {
			id = p.Spec.IPsec.Peer.Address
		}
		key, err = CanonicalID(id)
		return id, key, "IKE identity", err
	case gw.Spec.Protocol == vpnv1.ProtocolWireGuard && p.Spec.WireGuard != nil:
		id = p.Spec.WireGuard.PublicKey
		key, err = CanonicalWireGuardKey(id)
		return id, "wg:" + key, "WireGuard public key", err
	}
	return "", "", "", nil
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
		Message:    "granted exposures: " + listOrNone(exp) + "; reverse exposures: " + listOrNone(rev),
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
	out := make([]netip.Prefix, 0, len(raw))
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

// olderOverlaps finds every overlapping pair of subnets between two owners (owners in age
// order, oldest first) in O(n log n) plus the pairs found: CIDR prefixes overlap exactly when
// one contains the other, so sorted by first address and then length, each prefix overlaps
// exactly the prefixes on a stack of those containing it. The result is, for each owner j, the
// pairs with each older owner i: (index of j's subnet, index of i's subnet).
func olderOverlaps(subnets [][]netip.Prefix) []map[int][][2]int {
	type entry struct {
		p          netip.Prefix
		owner, idx int
	}
	n := 0
	for _, ps := range subnets {
		n += len(ps)
	}
	all := make([]entry, 0, n)
	for owner, ps := range subnets {
		for idx, p := range ps {
			all = append(all, entry{p.Masked(), owner, idx})
		}
	}
	slices.SortFunc(all, func(a, b entry) int {
		if c := comparePrefix(a.p, b.p); c != 0 {
			return c
		}
		return a.owner - b.owner
	})
	out := make([]map[int][][2]int, len(subnets))
	var stack []entry
	for _, e := range all {
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			if top.p.Bits() <= e.p.Bits() && top.p.Contains(e.p.Addr()) {
				break
			}
			stack = stack[:len(stack)-1]
		}
		for _, s := range stack {
			if s.owner == e.owner {
				continue
			}
			young, old, pair := e.owner, s.owner, [2]int{e.idx, s.idx}
			if young < old {
				young, old, pair = s.owner, e.owner, [2]int{s.idx, e.idx}
			}
			if out[young] == nil {
				out[young] = map[int][][2]int{}
			}
			out[young][old] = append(out[young][old], pair)
		}
		stack = append(stack, e)
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

// quoteJoin writes the names quoted as %q does, separated by ", " (one buffer: every
// authorized peer's message has it).
func quoteJoin(names []string) string {
	n := 0
	for _, name := range names {
		n += len(name) + 4
	}
	b := make([]byte, 0, n)
	for i, name := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, name)
	}
	return string(b)
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
