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
// The decision is taken in these steps, in this order (authSteps, one function each):
//  1. a peer whose protocol section does not match the gateway's is dark and has no tunnel
//     (ProtocolMismatch), and so is an IPsec peer at %any whose IKE version (its own or the
//     gateway's) is 1 (IKEv1AnyAddress: main mode picks the PSK by the address; protocolStep),
//     or it sets a DPD timeout while its IKE version is 2 (DPDTimeoutNeedsIKEv1);
//  2. exactly one peer without an authorization block reaches everything (DefaultAllow);
//     otherwise the peer's own block decides (NoGrants, UnknownGrant or Authorized; grantStep).
//     This is the peer's grant, not a refusal: a peer without grants is dark but keeps its
//     tunnel, and a refusal of a later step replaces its reason;
//  3. oldest first, a peer whose identity (IKE remote ID, WireGuard public key) is an older
//     peer's or the gateway's own is dark and has no tunnel (DuplicateIdentity): a PSK proves
//     one identity (identityStep); then a peer whose credentials are in a Secret unfit for
//     them is dark and has no tunnel (CredentialsRefused; credentialsStep);
//  4. a peer's subnets overlapping the gateway's service CIDR or the cluster's ranges are
//     withheld from its tunnel and the peer is dark (SubnetOverlapsServiceCIDR,
//     SubnetOverlapsClusterRange; reservedRangesStep);
//  5. a peer's subnets overlapping any older peer's (authorized, dark or conflicting) are
//     withheld from its tunnel and the peer is dark (SubnetConflict); every overlapping pair is
//     a gateway problem. Tunnels are thereby pairwise disjoint (one source, one tunnel;
//     olderSubnetsStep);
//  6. a peer still allowed that holds a reverse exposure whose target is outside its subnets
//     is dark (ReverseExposureOutsideSubnets); each such grant is a gateway problem naming the
//     peers that do hold a valid grant (reverseTargetsStep, reverseExposureProblems).
//
// The first refusal is the peer's decision (authChain.decide).
//
// Nothing here iterates a map into an output, so decisions and messages are stable.
func authorize(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, scope Scope) (map[string]verdict, []Problem) {
	if gw == nil {
		return gatewayNotFound(peers), nil
	}
	a := newAuthorization(gw, peers, scope)
	for _, st := range a.states {
		authSteps.decide(a, st)
	}
	a.reverseExposureProblems()
	out := make(map[string]verdict, len(peers))
	for _, st := range a.states {
		out[st.peer.Name] = verdict{Decision: st.decision, tunnel: st.tunnel, withheld: st.withheld}
	}
	return out, a.problems
}

// gatewayNotFound is every peer's verdict when its gateway does not exist: no tunnel.
func gatewayNotFound(peers []vpnv1.VPNPeer) map[string]verdict {
	out := make(map[string]verdict, len(peers))
	for i := range peers {
		p := &peers[i]
		out[p.Name] = verdict{Decision: Decision{
			Reason:  ReasonGatewayNotFound,
			Message: fmt.Sprintf("gateway %q not found", p.Spec.GatewayRef),
		}, withheld: parsedSubnets(peerSubnets(nil, p))}
	}
	return out
}

// authorization is what the steps decide one gateway's peers by: the gateway and its scope,
// the peers oldest first, and what the steps found so far.
type authorization struct {
	gw        *vpnv1.VPNGateway
	peerCount int
	// exposures and reverse are the gateway's exposure and reverse-exposure names, sorted;
	// reverseTarget is each reverse exposure's target address (the first of a name).
	exposures, reverse []string
	reverseTarget      map[string]string
	reserved           []reservedRange
	// refusedSecrets may not hold tunnel credentials (Scope.RefusedSecrets).
	refusedSecrets map[string]string
	// localID is the gateway's own IKE identity in canonical form ("" when it has none or a
	// refused one: that is the gateway's own problem, buildIPsecGateway).
	localID string
	// states are the peers oldest first (creation time, then name): the order of steps 3 to 5
	// and of their problems. older[j] are the overlapping subnet pairs of states[j] with each
	// older peer (olderOverlaps).
	states []*peerAuth
	older  []map[int][][2]int
	// ids maps each normalized identity to the peer holding it (identityStep).
	ids        map[string]string
	problems   []Problem
	violations []reverseViolation
}

// peerAuth is one peer as the steps see it, and what they decided.
type peerAuth struct {
	peer *vpnv1.VPNPeer
	// age is the peer's index in authorization.states.
	age      int
	subnets  []netip.Prefix // as declared
	tunnel   []netip.Prefix
	withheld []netip.Prefix
	decision Decision
	// rev is the peer's reverse-exposure grant while it would be allowed.
	rev []string
	// refused: a step made the peer dark (the first refusal's reason stays).
	refused bool
	// noTunnel: a step refused the peer its tunnel; no later step applies to it.
	noTunnel bool
}

// reverseViolation is a reverse exposure granted to a peer whose subnets do not hold its target.
type reverseViolation struct{ rev, peer string }

// newAuthorization prepares the steps for one gateway's peers: the gateway's names and
// ranges, the peers oldest first with their declared subnets, and every overlapping pair of
// them.
func newAuthorization(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, scope Scope) *authorization {
	a := &authorization{
		gw:             gw,
		peerCount:      len(peers),
		exposures:      uniqueSorted(exposureNames(gw)),
		reverse:        uniqueSorted(reverseExposureNames(gw)),
		reverseTarget:  make(map[string]string, len(gw.Spec.ReverseExposures)),
		reserved:       scope.reservedRanges(),
		refusedSecrets: scope.RefusedSecrets,
		ids:            make(map[string]string, len(peers)),
	}
	for _, r := range gw.Spec.ReverseExposures {
		if _, seen := a.reverseTarget[r.Name]; !seen {
			a.reverseTarget[r.Name] = r.Target.Address
		}
	}
	a.localID, _ = CanonicalID(scope.LocalID)

	ordered := make([]*vpnv1.VPNPeer, len(peers))
	for i := range peers {
		ordered[i] = &peers[i]
	}
	slices.SortStableFunc(ordered, compareAge)
	a.states = make([]*peerAuth, len(ordered))
	backing := make([]peerAuth, len(ordered)) // one allocation for all of them
	declared := make([][]netip.Prefix, len(ordered))
	for i, p := range ordered {
		st := &backing[i]
		st.peer, st.age, st.subnets = p, i, parsedSubnets(peerSubnets(gw, p))
		a.states[i] = st
		declared[i] = st.subnets
	}
	a.older = olderOverlaps(declared)
	return a
}

// authStep is one step of a peer's authorization: ok when the peer passes it, else the reason
// and message of its refusal. A step may also record the peer's grant, withhold its subnets
// from its tunnel, refuse it the tunnel (dropTunnel) or report gateway problems.
type authStep func(a *authorization, st *peerAuth) (reason, message string, ok bool)

// authChain is a list of steps taken in order.
type authChain []authStep

// authSteps are authorize's steps, in the order of its doc comment.
var authSteps = authChain{
	protocolStep,
	grantStep,
	identityStep,
	credentialsStep,
	reservedRangesStep,
	olderSubnetsStep,
	reverseTargetsStep,
}

// decide takes the chain's steps for one peer, in order. The first refusal is the peer's
// decision: a later, less fundamental step never replaces its reason. A refusal of the tunnel
// (dropTunnel) ends the walk; after any other refusal the later steps still withhold the
// subnets and report the problems they find.
func (c authChain) decide(a *authorization, st *peerAuth) {
	for _, step := range c {
		reason, message, ok := step(a, st)
		if !ok {
			st.refuse(reason, message)
		}
		if st.noTunnel {
			return
		}
	}
}

// refuse makes the peer dark with the first refusal found.
func (st *peerAuth) refuse(reason, message string) {
	if st.refused {
		return
	}
	st.refused = true
	st.decision = Decision{Reason: reason, Message: message}
	st.rev = nil
}

// dropTunnel leaves the peer without a tunnel: every subnet is withheld.
func (st *peerAuth) dropTunnel() {
	st.noTunnel = true
	st.withheld = st.subnets
}

// protocolStep (step 1) refuses a peer whose protocol section does not match the gateway's.
func protocolStep(a *authorization, st *peerAuth) (string, string, bool) {
	if msg, ok := protocolMismatch(a.gw, st.peer); !ok {
		st.dropTunnel()
		return ReasonProtocolMismatch, msg, false
	}
	if ip := st.peer.Spec.IPsec; ip != nil && ip.Peer.Address == "%any" && ikeVersionOf(a.gw, ip) == 1 {
		st.dropTunnel()
		return ReasonIKEv1AnyAddress, "IKE version 1 with address %any: IKEv1 main mode picks the pre-shared key by the peer's address before it learns the peer's identity, so with %any one peer's key could be tried for another; give the peer's address or use IKE version 2 (spec.ipsec.ike.version)", false
	}
	if ip := st.peer.Spec.IPsec; ip != nil && ip.IKE != nil && ip.IKE.DPD != nil && ip.IKE.DPD.Timeout != nil && ikeVersionOf(a.gw, ip) != 1 {
		st.dropTunnel()
		return ReasonDPDTimeoutNeedsIKEv1, "spec.ipsec.ike.dpd.timeout applies to IKEv1 only, and this peer uses IKEv2 (the gateway's version): IKEv2 declares a peer dead when its retransmissions of a liveness check run out; remove the timeout or set spec.ipsec.ike.version: 1", false
	}
	return "", "", true
}

// ikeVersionOf is the IKE version a peer's tunnel uses: its own, or the gateway's (2 unless
// set).
func ikeVersionOf(gw *vpnv1.VPNGateway, p *vpnv1.IPsecPeer) int32 {
	if p.IKE != nil && p.IKE.Version != 0 {
		return p.IKE.Version
	}
	if gw.Spec.IPsec != nil && gw.Spec.IPsec.IKE.Version != 0 {
		return gw.Spec.IPsec.IKE.Version
	}
	return defaultIKEVersion
}

// grantStep (step 2) records the peer's grant: its decision while no step refuses it, and
// the reverse exposures it holds when allowed. It refuses nobody.
func grantStep(a *authorization, st *peerAuth) (string, string, bool) {
	st.decision, st.rev = decideGrant(a.gw, st.peer, a.peerCount, a.exposures, a.reverse)
	return "", "", true
}

// identityStep (step 3) refuses a peer whose identity names no one identity, is the gateway's
// own or is an older peer's, and otherwise takes the identity for the peer.
func identityStep(a *authorization, st *peerAuth) (string, string, bool) {
	id, key, idWhat, idErr := peerIdentity(a.gw, st.peer)
	other, taken := a.ids[key]
	switch {
	case id == "":
		return "", "", true
	case idErr != nil:
		st.dropTunnel()
		return ReasonInvalidIdentity, fmt.Sprintf("%s %v; a pre-shared key must prove exactly one identity", idWhat, idErr), false
	case a.gw.Spec.Protocol == vpnv1.ProtocolIPsec && a.localID != "" && key == a.localID:
		a.problems = append(a.problems, Problem{Reason: ReasonIdentityConflict,
			Message: fmt.Sprintf("peer %q presents the gateway's own IKE identity %q; it gets no tunnel", st.peer.Name, id)})
		st.dropTunnel()
		return ReasonDuplicateIdentity, fmt.Sprintf("%s %q is the gateway's own IKE identity; a peer must present its own", idWhat, id), false
	case taken:
		a.problems = append(a.problems, Problem{Reason: ReasonIdentityConflict,
			Message: fmt.Sprintf("peers %q and %q have the same %s %q; only the older, %q, gets a tunnel", other, st.peer.Name, idWhat, id, other)})
		st.dropTunnel()
		return ReasonDuplicateIdentity, fmt.Sprintf("%s %q is already that of older peer %q; only the older one gets a tunnel", idWhat, id, other), false
	}
	a.ids[key] = st.peer.Name
	return "", "", true
}

// credentialsStep (step 3) refuses a peer whose credentials are in a refused Secret. A peer's
// own credentials decide only its own tunnel: its identity stays taken, so its siblings'
// decisions do not depend on which Secrets exist.
func credentialsStep(a *authorization, st *peerAuth) (string, string, bool) {
	if name, typ, bad := refusedCredentials(st.peer, a.refusedSecrets); bad {
		st.dropTunnel()
		return ReasonCredentialsRefused, fmt.Sprintf("Secret %q is of type %q: tunnel credentials must be kept in an Opaque Secret; the peer gets no tunnel", name, typ), false
	}
	return "", "", true
}

// reservedRangesStep (step 4) withholds the peer's subnets that overlap the gateway's service
// CIDR or the cluster's ranges from its tunnel, and refuses the peer when there are any; the
// others go to its tunnel.
func reservedRangesStep(a *authorization, st *peerAuth) (string, string, bool) {
	var hits []string
	reason := ""
	for _, c := range st.subnets {
		withhold := false
		for _, r := range a.reserved {
			if c.Overlaps(r.prefix) {
				if reason == "" {
					reason = r.reason
				}
				hits = append(hits, fmt.Sprintf("%s overlaps %s %s", c, r.what, r.prefix))
				withhold = true
			}
		}
		if withhold {
			st.withheld = append(st.withheld, c)
			continue
		}
		st.tunnel = append(st.tunnel, c)
	}
	if len(hits) > 0 {
		return reason, strings.Join(hits, "; ") +
			"; these subnets get no tunnel and the peer is dark until they are removed", false
	}
	return "", "", true
}

// olderSubnetsStep (step 5) withholds the peer's subnets that overlap an older peer's from
// its tunnel, reports each older peer it overlaps as a gateway problem, and refuses the peer
// when there is any.
func olderSubnetsStep(a *authorization, st *peerAuth) (string, string, bool) {
	older := a.older[st.age]
	if len(older) == 0 {
		return "", "", true
	}
	st.withholdConflicting(older)
	olds := make([]int, 0, len(older))
	for i := range older {
		olds = append(olds, i)
	}
	slices.Sort(olds)
	conflicts := make([]string, 0, len(olds))
	for _, i := range olds {
		old := a.states[i]
		idx := older[i]
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
		a.problems = append(a.problems, Problem{
			Reason: ReasonSubnetOverlap,
			Message: fmt.Sprintf("subnets of peer %q overlap those of older peer %q: %s; the younger gets no tunnel for them and cannot be authorized",
				st.peer.Name, old.peer.Name, list),
		})
	}
	return ReasonSubnetConflict, "subnets overlap those of older peer " + strings.Join(conflicts, "; ") +
		"; the overlapping subnets get no tunnel (one source, one tunnel)", false
}

// withholdConflicting moves the peer's subnets named in the overlapping pairs (olderOverlaps)
// from its tunnel to its withheld subnets, which stay in the order of the declared ones.
func (st *peerAuth) withholdConflicting(older map[int][][2]int) {
	conflicting := make(map[netip.Prefix]bool)
	for _, pairs := range older {
		for _, pr := range pairs {
			conflicting[st.subnets[pr[0]]] = true
		}
	}
	tunnel := st.tunnel
	st.tunnel = nil
	for _, c := range tunnel {
		if conflicting[c] {
			st.withheld = append(st.withheld, c)
			continue
		}
		st.tunnel = append(st.tunnel, c)
	}
	slices.SortFunc(st.withheld, comparePrefix)
}

// reverseTargetsStep (step 6) refuses a peer still allowed that holds a reverse exposure whose
// target is outside its tunnel's subnets, and records each such grant for
// reverseExposureProblems.
func reverseTargetsStep(a *authorization, st *peerAuth) (string, string, bool) {
	if !st.decision.Authorized {
		return "", "", true
	}
	var msgs []string
	for _, r := range st.rev {
		target := a.reverseTarget[r]
		if addrInPrefixes(target, st.tunnel) {
			continue
		}
		a.violations = append(a.violations, reverseViolation{rev: r, peer: st.peer.Name})
		msgs = append(msgs, fmt.Sprintf("reverse exposure %q targets %s, which is not inside this peer's subnets (%s)",
			r, target, joinPrefixes(st.tunnel)))
	}
	if len(msgs) > 0 {
		return ReasonReverseExposureOutsideSubnets, strings.Join(msgs, "; ") +
			"; a reverse exposure may only be granted to the peer whose subnets contain its target", false
	}
	return "", "", true
}

// reverseExposureProblems reports each reverse exposure granted outside the grantee's
// subnets (step 6) as a gateway problem, naming the valid grantees: the peers still allowed
// after every step that hold the grant (their subnets necessarily contain the target).
func (a *authorization) reverseExposureProblems() {
	slices.SortFunc(a.violations, func(x, y reverseViolation) int {
		if c := strings.Compare(x.rev, y.rev); c != 0 {
			return c
		}
		return strings.Compare(x.peer, y.peer)
	})
	for _, v := range a.violations {
		var valid []string
		for _, st := range a.states {
			if st.decision.Authorized && slices.Contains(st.rev, v.rev) {
				valid = append(valid, st.peer.Name)
			}
		}
		slices.Sort(valid)
		msg := fmt.Sprintf("reverse exposure %q (%s) is granted to peer %q, whose subnets do not contain it; ",
			v.rev, a.reverseTarget[v.rev], v.peer)
		switch len(valid) {
		case 0:
			msg += "no authorized peer holding the grant contains it"
		case 1:
			msg += fmt.Sprintf("its valid grantee is %q", valid[0])
		default:
			msg += "its valid grantees are " + quoteJoin(valid)
		}
		a.problems = append(a.problems, Problem{Reason: ReasonReverseExposureConflict, Message: msg})
	}
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

// decideGrant is a peer's grant (step 2) on a gateway whose protocol it matches: the decision
// and, when allowed, the reverse exposures it is granted.
func decideGrant(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer, peerCount int, exposures, reverse []string) (Decision, []string) {
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
