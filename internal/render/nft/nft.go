// Package nft renders a gateway's nftables ruleset: the NAT of forward and reverse exposures
// and the per-peer authorization of docs/design.md, as text for one `nft -f` call.
//
// The ruleset is one table, ip bnerd_vpn, that the text declares, deletes and re-creates, so a
// single `nft -f` replaces the whole of it in one transaction (fail-closed: either the new
// ruleset is in force or the old one still is). Per-packet cost does not grow with the number
// of peers: who may reach what lives in sets and maps, never in one rule per peer, and
// established flows are accepted before any of them is consulted.
//
// Layout ("from the tunnel" is iifname <TunnelInterface>; for kernel ESP it is
// `ipsec in reqid @reqids`, "into the tunnel" `ipsec out reqid @reqids`, the set holding
// the reqids of the gateway's own peers' SAs, never another IPsec user's of the node):
//   - peer subnets are looked up by prefix length: a set or map keyed by them is one hash set per
//     prefix length in use (peer_24: /24 networks), consulted by one rule per length that
//     masks the address first — never an interval set, whose element changes cost the kernel
//     time growing with the set (see lengthName). Below, "peer" stands for all its lengths.
//   - peer maps a peer subnet (overlaps resolved, see below) to its peer's grant class: the
//     forward ports the peer may reach, shared by every peer granted the same (classes.go).
//   - drops_in and drops_out count a peer subnet's dropped packets, from the tunnel and toward
//     the subnet: dynamic sets the drop rules add the subnet to, so the kernel makes an
//     element, with its counter, at a subnet's first drop — a table of 10,000 peers loads no
//     counter for them at all (the agent sums a peer's elements: DropCounters). Only a network
//     found in peer is ever added: however many addresses a hostile peer sends from, the sets
//     hold at most the peers' subnets.
//   - tunnel_source (kernel ESP, prerouting before everything else): a packet from the tunnel
//     whose (reqid . source) is not in tunnel_sources — its source is not a subnet of the peer
//     whose SA it came through — is dropped and counted (drop_spoofed). Every later match of a
//     source subnet therefore also matches the granting peer's SA: grants are bound to the
//     tunnel, on top of the peers' disjoint traffic selectors.
//   - prerouting (nat): a new flow from the tunnel whose (grant class of its source subnet .
//     virtual IP . protocol . port) is in fwd_grants gets ct mark MarkForward — the conntrack
//     mark carries the class from one lookup to the next, and ends 0 for every other new flow
//     from the tunnel — and is DNATed through the map fwd_dnat; nothing else from the tunnel is
//     translated. A
//     packet on the cluster interface to a local address, from reverse_clients (the pods of the
//     gateway's tenant), on a gateway port in rev_dnat gets ct mark MarkReverse and is DNATed
//     to the reverse target. On the node (host network) the clients arrive on any device but
//     the tunnel's, and only on the one the node routes their source through (strictSource).
//   - route_mark (prerouting, after the DNAT) and route_mark_out (output, type route): every
//     packet of a MarkForward or MarkReverse flow gets the packet mark RouteMark, the only
//     packets for which charon's routes into the tunnel (table 220) are consulted.
//   - postrouting (nat): MarkForward flows are masqueraded (the gateway's cluster address);
//     MarkReverse flows are SNATed to their exposure's virtual IP (map rev_snat by gateway port).
//   - forward (filter, policy drop): TCP MSS clamped; established/related accepted; new flows
//     accepted only with a mark and a DNAT; the rest dropped and counted in drops_in (a source
//     from the tunnel in a peer subnet) or drops_out (a destination in one), else in the named
//     counters drop_unknown_in / drop_other. input and output drop new traffic from and into the
//     tunnel the same way, in the regular chains input_tunnel and output_tunnel they jump to
//     (the tunnel matched once: the gateway's other traffic meets one test).
//   - host network (the gateway shares the node's namespace): the forward chain's policy is
//     accept and every clamp and drop matches the tunnel — from it (iifname/ipsec in reqid)
//     or into it (oifname/ipsec out reqid) — so the node's other flows, a pod's toward an
//     address inside a peer's subnet included, never meet a rule of the gateway. The forward
//     DNAT matches the tunnel too; the reverse DNAT only the gateway's own ports on a local
//     address from reverse_clients, arriving on any device but the tunnel's.
//
// Reverse rules exist only when the gateway has reverse clients (inside internalSourceCIDRs)
// and a reverse exposure with a grantee. Where peers' subnets overlap, each address counts for one peer: an authorized one
// first, then the most specific subnet, then the first peer by name.
//
// Rendering is pure: it reads a validated model.Gateway and Options and returns text or an
// error. Every string of the model that reaches the text is either a sanitized identifier or a
// comment of [a-z0-9._-]; addresses, ports and protocols are re-checked, and anything odd is
// refused.
package nft

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Family and Table name the table the ruleset owns.
const (
	Family = "ip"
	Table  = "bnerd_vpn"
)

// Conntrack marks of translated flows, set at prerouting with the DNAT and matched in forward
// and postrouting ("bv" followed by 1 or 2).
const (
	MarkForward = 0x62760001 // a granted forward-exposure flow (peer -> virtual IP -> target)
	MarkReverse = 0x62760002 // a reverse-exposure flow (internal source -> gateway port -> peer)
)

// RouteMark is the packet mark (one bit, outside the marks of kube-proxy 0xc000, Calico
// 0xffff0000, Cilium 0x0f00 and Istio 0x539) the ruleset sets on every packet of the gateway's
// own flows (MarkForward, MarkReverse) before routing. charon is configured to consult its
// routing table 220 only for packets with this mark (strongswan.conf:
// charon.plugins.kernel-netlink.fwmark = 0x1000/0x1000; hack/lab/image/strongswan.conf): its
// routes into the tunnel then carry the gateway's traffic and never the node's — on the host
// network a peer subnet in table 220 would otherwise win over the node's own route for it.
const RouteMark = 0x00001000

// Names of the tunnel interfaces the gateway's dataplanes create.
const (
	// LibipsecInterface is the TUN device of strongSwan's kernel-libipsec plugin (userspace ESP).
	LibipsecInterface = "ipsec0"
	// WireGuardInterface is the gateway's WireGuard device (kernel or wireguard-go) in its pod's
	// own network namespace; on the host network see WireGuardDevice.
	WireGuardInterface = "wg0"
	// DefaultClusterInterface is the pod's cluster-facing interface.
	DefaultClusterInterface = "eth0"
	// DefaultIPsecMTU is the MTU assumed for an IPsec tunnel (kernel-libipsec's TUN default).
	DefaultIPsecMTU = model.DefaultIPsecMTU
)

// Options are what the model does not know: the pod's interfaces and the tunnel MTU.
type Options struct {
	// TunnelInterface is where decrypted tunnel traffic enters and leaves the pod: the
	// WireGuardDevice for WireGuard, "ipsec0" for strongSwan with kernel-libipsec. Empty on an IPsec gateway means
	// kernel ESP, which has no interface: tunnel traffic is then recognised by the reqids of
	// the gateway's peers' SAs (ipsec in/out reqid; every IPsec peer with a tunnel must have
	// one, model.FirstReqid). Required for WireGuard.
	TunnelInterface string
	// ClusterInterface is the pod's cluster-facing interface, where reverse-exposure traffic
	// arrives ("eth0"). Required.
	ClusterInterface string
	// TunnelMTU clamps the MSS of every forwarded TCP SYN to TunnelMTU-40. Zero clamps to the
	// MTU of the route instead (rt mtu), which only sees the tunnel on the way into it.
	TunnelMTU int
}

// DefaultOptions are the options for a gateway pod as the operator runs it: "eth0" toward the
// cluster; WireGuardDevice (wg0 in a pod network) with the gateway's MTU for WireGuard; for IPsec "ipsec0" when the dataplane is
// userspace (kernel-libipsec), else kernel ESP, with the gateway's tunnel MTU (spec.ipsec.mtu,
// DefaultIPsecMTU unless set).
func DefaultOptions(g *model.Gateway, userspaceDataplane bool) Options {
	o := Options{ClusterInterface: DefaultClusterInterface, TunnelMTU: DefaultIPsecMTU}
	switch {
	case g != nil && g.Protocol == model.ProtocolWireGuard:
		o.TunnelInterface = WireGuardDevice(g)
		if g.WireGuard != nil && g.WireGuard.MTU > 0 {
			o.TunnelMTU = int(g.WireGuard.MTU)
		}
	case userspaceDataplane:
		o.TunnelInterface = LibipsecInterface
	}
	if g != nil && g.Protocol == model.ProtocolIPsec {
		o.TunnelMTU = g.IPsec.MTU()
	}
	return o
}

// WireGuardDevice is the name of the gateway's WireGuard device, which the agent creates and
// the ruleset matches: WireGuardInterface ("wg0") in the gateway pod's own network namespace.
// On the host network the namespace is the node's, where a wg0 (or another gateway's device)
// may belong to someone else: there it is "wg", up to 6 characters [a-z0-9] of the gateway's
// name, "-" and the first 6 hex digits of the SHA-256 of namespace/name — at most 15
// characters, the same for the same gateway on every render.
func WireGuardDevice(g *model.Gateway) string {
	if g == nil || g.Endpoint.Kind != model.EndpointHostNetwork {
		return WireGuardInterface
	}
	var short []byte
	for i := 0; i < len(g.Name) && len(short) < 6; i++ {
		if c := g.Name[i]; c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			short = append(short, c)
		}
	}
	sum := sha256.Sum256([]byte(g.Namespace + "/" + g.Name))
	return "wg" + string(short) + "-" + hex.EncodeToString(sum[:3])
}

// ifname is a Linux interface name safe to quote in the ruleset.
var ifname = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)

func (o Options) check(g *model.Gateway) error {
	if !ifname.MatchString(o.ClusterInterface) {
		return fmt.Errorf("options: cluster interface %q is not an interface name", o.ClusterInterface)
	}
	switch {
	case o.TunnelInterface == "" && g.Protocol == model.ProtocolWireGuard:
		return fmt.Errorf("options: a WireGuard gateway needs its tunnel interface")
	case o.TunnelInterface != "" && !ifname.MatchString(o.TunnelInterface):
		return fmt.Errorf("options: tunnel interface %q is not an interface name", o.TunnelInterface)
	case o.TunnelInterface == o.ClusterInterface:
		return fmt.Errorf("options: tunnel and cluster interface are both %q", o.ClusterInterface)
	}
	if o.TunnelMTU != 0 && (o.TunnelMTU < 576 || o.TunnelMTU > 9000) {
		return fmt.Errorf("options: tunnel MTU %d is not between 576 and 9000", o.TunnelMTU)
	}
	return nil
}

// forwardKey is one forward exposure's port as the peer addresses it.
type forwardKey struct {
	vip   netip.Addr
	proto string
	port  uint16
}

func (k forwardKey) String() string {
	return fmt.Sprintf("%s . %s . %d", k.vip, k.proto, k.port)
}

type forwardPort struct {
	key        forwardKey
	exposure   string // comment form
	target     netip.Addr
	targetPort uint16
}

// grantClass is the forward ports some peers may reach, all the same: fwd_grants holds each
// class's ports once, keyed by its id, whatever the number of its peers.
type grantClass struct {
	id    uint32
	ports []forwardKey // sorted
	peers []string     // comment forms, in name order
}

type reversePort struct {
	exposure    string // comment form
	grantee     string // comment form
	proto       string
	gatewayPort uint16
	target      netip.Addr
	targetPort  uint16
	vip         netip.Addr
	port        uint16     // the Service's port (what clients connect to)
	serviceIP   netip.Addr // the Service's ClusterIP, when the model has it
}

// plan is everything the text is written from, validated.
type plan struct {
	comment   string // gateway namespace/name, comment form
	protocol  model.Protocol
	tunnelIn  string // match of packets from the tunnel
	tunnelOut string // match of packets into the tunnel (output chain)
	cluster   string // quoted cluster interface
	mss       int    // 0: rt mtu
	// sharedNetns: the gateway runs in the node's network namespace (host network), so the
	// forward chain must leave the node's other traffic alone: it only clamps and drops what
	// comes from the tunnel or goes into it, and accepts everything else.
	sharedNetns bool
	peerNames   []string // comment forms, in name order
	peerIn      []owned  // the peers' subnets, overlaps resolved; owner indexes peerNames
	// peerClass is each peer's grant class (index as peerNames; 0: grants nothing), classes
	// the classes in id order.
	peerClass []uint32
	classes   []grantClass
	// reqids (kernel ESP): the gateway's IPsec peers' reqids, sorted; tunnelIn and tunnelOut
	// match them and nothing else. sources pairs each with the peer's subnets.
	reqids  []uint32
	sources []reqidSource
	forward []forwardPort
	clients []netip.Addr // reverse clients (pods allowed to reach reverse exposures)
	// clientRanges are whole ranges allowed to reach reverse exposures: the ready ClusterLinks'
	// (a service cluster's workloads); reverse_clients becomes an interval set when present.
	clientRanges []netip.Prefix
	reverse      []reversePort
}

// kernelESP: an IPsec gateway without a tunnel interface, its tunnel traffic recognised by
// its SAs' reqids.
func (p *plan) kernelESP() bool {
	return p.protocol == model.ProtocolIPsec && !strings.HasPrefix(p.tunnelIn, "iifname ")
}

// hasClients: someone may reach the reverse exposures.
func (p *plan) hasClients() bool { return len(p.clients) > 0 || len(p.clientRanges) > 0 }

// clientElements are reverse_clients' elements: the pods outside the link ranges, then the
// ranges (an interval set refuses an address inside a range it already holds).
func (p *plan) clientElements() []string {
	var out []string
	for _, a := range p.clients {
		if !slices.ContainsFunc(p.clientRanges, func(r netip.Prefix) bool { return r.Contains(a) }) {
			out = append(out, a.String())
		}
	}
	for _, r := range p.clientRanges {
		out = append(out, r.String())
	}
	return out
}

// serviceKeyed: the gateway shares the node's network namespace and knows a reverse
// exposure's Service IP, so it translates that Service for clients on its own node.
func (p *plan) serviceKeyed() bool {
	if !p.sharedNetns || !p.hasClients() {
		return false
	}
	return slices.ContainsFunc(p.reverse, func(r reversePort) bool { return r.serviceIP.IsValid() })
}

// strictSource admits a packet only when the node routes its source back out of the device
// it came in on (a strict reverse-path check). On the node (host network) a reverse client's
// packet may arrive on any device but the tunnel's — the CNI's, the fabric's towards a
// ClusterLink — so the source address alone would also admit a forged internal source sent
// to the node's public address from the uplink, whatever the node's rp_filter says.
const strictSource = "fib saddr . iif oif exists "

// reqidSource is one subnet a peer's SAs (reqid) carry.
type reqidSource struct {
	reqid  uint32
	prefix netip.Prefix
}

// notFromTunnel is how a chain's rules after it skip packets from the tunnel: a match to
// prefix them with (interface mode), or a rule of its own that returns on the tunnel's
// packets (kernel ESP: nft cannot negate a reqid match, and "meta ipsec missing" would skip
// another IPsec user's packets too, a CNI's encrypted pod traffic among them).
func (p *plan) notFromTunnel() (match, returnRule string) {
	if rest, ok := strings.CutPrefix(p.tunnelIn, "iifname "); ok {
		return "iifname != " + rest + " ", ""
	}
	return "", "\t\t" + p.tunnelIn + " return\n"
}

// SetReqids is the set of the gateway's reqids (kernel ESP).
const SetReqids = "reqids"

// reqidMatch is `ipsec <dir> reqid` of the gateway's reqids (the set SetReqids).
func reqidMatch(dir string) string { return fmt.Sprintf("ipsec %s reqid @%s", dir, SetReqids) }

// Render returns the gateway's ruleset for `nft -f`, or why it cannot be rendered (a model
// that is inconsistent or holds something that cannot be expressed safely).
func Render(g *model.Gateway, o Options) (string, error) {
	p, err := newPlan(g, o)
	if err != nil {
		return "", err
	}
	return p.write(), nil
}

// newPlan validates the gateway and the options and gathers what the ruleset is written from:
// how tunnel traffic is matched, the peers' subnets, the forward exposures and their grant
// classes, and the reverse exposures.
func newPlan(g *model.Gateway, o Options) (*plan, error) {
	if g == nil {
		return nil, fmt.Errorf("no gateway")
	}
	switch g.Protocol {
	case model.ProtocolIPsec, model.ProtocolWireGuard:
	default:
		return nil, fmt.Errorf("gateway protocol %q is not ipsec or wireguard", g.Protocol)
	}
	if g.Mode != model.ModeSNAT && g.Mode != "" {
		return nil, fmt.Errorf("gateway mode %q: only snat is rendered", g.Mode)
	}
	if err := o.check(g); err != nil {
		return nil, err
	}
	p := &plan{
		comment:     commentName(g.Namespace) + "/" + commentName(g.Name),
		protocol:    g.Protocol,
		cluster:     strconv.Quote(o.ClusterInterface),
		sharedNetns: g.Endpoint.Kind == model.EndpointHostNetwork,
	}
	if err := p.planTunnel(g, o); err != nil {
		return nil, err
	}
	peers, err := p.planPeers(g)
	if err != nil {
		return nil, err
	}
	if err := p.planForward(g, peers); err != nil {
		return nil, err
	}
	// Reverse exposures: nothing at all without internal sources; only those with a grantee.
	if len(g.InternalSourceCIDRs) == 0 {
		return p, nil
	}
	if err := p.planReverseClients(g); err != nil {
		return nil, err
	}
	if err := p.planReverse(g, peers); err != nil {
		return nil, err
	}
	return p, nil
}

// planTunnel sets how the ruleset matches tunnel traffic — the tunnel interface, or for kernel
// ESP the reqids of the gateway's peers' SAs and the subnets each carries — and the MSS clamp.
func (p *plan) planTunnel(g *model.Gateway, o Options) error {
	if o.TunnelInterface == "" {
		// Kernel ESP: tunnel traffic is what the gateway's own SAs (its peers' reqids) carry.
		for _, peer := range g.Peers {
			if peer.IPsec == nil || !peer.HasTunnel() {
				continue
			}
			if err := model.ReqidError(peer); err != nil {
				return fmt.Errorf("kernel ESP: %w", err)
			}
			// The peer's reqid carries all its subnets; a subnet's own reqid (its per-subnet
			// CHILD_SAs) that subnet alone.
			p.reqids = append(p.reqids, peer.IPsec.Reqids()...)
			for i, s := range peer.SourceCIDRs {
				p.sources = append(p.sources, reqidSource{reqid: peer.IPsec.Reqid, prefix: s})
				if i < len(peer.IPsec.SubnetReqids) {
					p.sources = append(p.sources, reqidSource{reqid: peer.IPsec.SubnetReqids[i], prefix: s})
				}
			}
		}
		slices.Sort(p.reqids)
		if len(slices.Compact(slices.Clone(p.reqids))) != len(p.reqids) {
			return fmt.Errorf("kernel ESP: two of the peers' SAs share a reqid")
		}
		slices.SortFunc(p.sources, func(a, b reqidSource) int {
			if a.reqid != b.reqid {
				return cmp.Compare(a.reqid, b.reqid)
			}
			return a.prefix.Addr().Compare(b.prefix.Addr())
		})
		// The reqids are a named set, not a list in each rule: a peer added or removed changes
		// its elements only, which the agent applies by netlink instead of a whole load. Empty
		// (no SA yet), the rules match nothing.
		p.tunnelIn, p.tunnelOut = reqidMatch("in"), reqidMatch("out")
	} else {
		q := strconv.Quote(o.TunnelInterface)
		p.tunnelIn, p.tunnelOut = "iifname "+q, "oifname "+q
	}
	if o.TunnelMTU > 0 {
		p.mss = o.TunnelMTU - 40
	}
	return nil
}

// planPeers sets the peers' names and their subnets, overlaps resolved (peerSubnets), and
// returns the peers in name order, the order peerNames and the owners of peerIn follow.
func (p *plan) planPeers(g *model.Gateway) (*peerIndex, error) {
	peers, pieces, err := peerSubnets(g)
	if err != nil {
		return nil, err
	}
	p.peerIn = pieces
	ix := &peerIndex{
		peers:  peers,
		byName: make(map[string]*model.Peer, len(peers)),
		index:  make(map[string]int, len(peers)),
	}
	for i := range peers {
		ix.byName[peers[i].Name] = &peers[i]
		ix.index[peers[i].Name] = i
		p.peerNames = append(p.peerNames, commentName(peers[i].Name))
	}
	return ix, nil
}

// peerIndex finds the gateway's peers by name: the peer, and its index in name order.
type peerIndex struct {
	peers  []model.Peer
	byName map[string]*model.Peer
	index  map[string]int
}

// grantee checks that what (an exposure) may be granted to the peer named n: the gateway has
// it and it is authorized.
func (ix *peerIndex) grantee(what, n string) (*model.Peer, error) {
	peer, ok := ix.byName[n]
	switch {
	case !ok:
		return nil, fmt.Errorf("%s is granted to peer %q, which the gateway does not have", what, commentName(n))
	case !peer.Authorization.Authorized:
		return nil, fmt.Errorf("%s is granted to peer %q, which is not authorized", what, commentName(n))
	}
	return peer, nil
}

// planForward checks the forward exposures and sets their ports and the peers' grant classes.
func (p *plan) planForward(g *model.Gateway, peers *peerIndex) error {
	seen := make(map[forwardKey]string)
	granted := make([][]forwardKey, len(peers.peers)) // by peer index
	for _, e := range g.Exposures {
		name := commentName(e.Name)
		what := fmt.Sprintf("exposure %q", name)
		if err := checkAddr(what+" virtual IP", e.VirtualIP); err != nil {
			return err
		}
		if g.ServiceCIDR.IsValid() && !g.ServiceCIDR.Contains(e.VirtualIP) {
			return fmt.Errorf("%s: virtual IP %s is outside the service CIDR %s", what, e.VirtualIP, g.ServiceCIDR)
		}
		if err := checkAddr(what+" target", e.Target); err != nil {
			return err
		}
		for _, n := range e.GrantedTo {
			if _, err := peers.grantee(what, n); err != nil {
				return err
			}
		}
		if len(e.Ports) == 0 {
			return fmt.Errorf("%s has no ports", what)
		}
		for _, port := range e.Ports {
			if err := checkPort(what, port, false); err != nil {
				return err
			}
			k := forwardKey{vip: e.VirtualIP, proto: port.Protocol, port: port.Port}
			if other, dup := seen[k]; dup {
				return fmt.Errorf("%s and exposure %q both use %s", what, other, k)
			}
			seen[k] = name
			p.forward = append(p.forward, forwardPort{key: k, exposure: name, target: e.Target, targetPort: port.TargetPort})
			for _, n := range e.GrantedTo {
				granted[peers.index[n]] = append(granted[peers.index[n]], k)
			}
		}
	}
	p.peerClass, p.classes = grantClasses(granted, p.peerNames)
	return nil
}

// planReverseClients checks the internal source CIDRs and sets who may reach the reverse
// exposures: the reverse clients and the ready ClusterLinks' ranges.
func (p *plan) planReverseClients(g *model.Gateway) error {
	for i, c := range g.InternalSourceCIDRs {
		if err := checkPrefix(fmt.Sprintf("internal source CIDR %d", i), c); err != nil {
			return err
		}
	}
	for _, a := range g.ReverseClients {
		if err := checkAddr("reverse client", a); err != nil {
			return err
		}
		if !slices.ContainsFunc(g.InternalSourceCIDRs, func(c netip.Prefix) bool { return c.Contains(a) }) {
			return fmt.Errorf("reverse client %s is outside the internal source CIDRs", a)
		}
	}
	p.clients = slices.Clone(g.ReverseClients)
	slices.SortFunc(p.clients, netip.Addr.Compare)
	p.clients = slices.Compact(p.clients)
	var ranges []netip.Prefix
	for _, r := range g.Routes {
		if err := checkPrefix("ClusterLink "+commentName(r.Link)+" range", r.CIDR); err != nil {
			return err
		}
		if !slices.Contains(g.InternalSourceCIDRs, r.CIDR) {
			return fmt.Errorf("ClusterLink %q range %s is not an internal source CIDR", commentName(r.Link), r.CIDR)
		}
		ranges = append(ranges, r.CIDR)
	}
	if len(ranges) > 0 {
		p.clientRanges = coverPrefixes(ranges)
	}
	return nil
}

// planReverse checks the reverse exposures that have a grantee and sets their ports.
func (p *plan) planReverse(g *model.Gateway, peers *peerIndex) error {
	gwPorts := make(map[uint16]string)
	for _, r := range g.ReverseExposures {
		if r.Grantee == "" {
			continue
		}
		name := commentName(r.Name)
		what := fmt.Sprintf("reverse exposure %q", name)
		peer, err := peers.grantee(what, r.Grantee)
		if err != nil {
			return err
		}
		if err := checkAddr(what+" virtual IP", r.VirtualIP); err != nil {
			return err
		}
		if g.ServiceCIDR.IsValid() && !g.ServiceCIDR.Contains(r.VirtualIP) {
			return fmt.Errorf("%s: virtual IP %s is outside the service CIDR %s", what, r.VirtualIP, g.ServiceCIDR)
		}
		if err := checkAddr(what+" target", r.Target); err != nil {
			return err
		}
		if r.ServiceIP.IsValid() {
			if err := checkAddr(what+" Service IP", r.ServiceIP); err != nil {
				return err
			}
		}
		if !slices.ContainsFunc(peer.SourceCIDRs, func(s netip.Prefix) bool { return s.Contains(r.Target) }) {
			return fmt.Errorf("%s: target %s is not inside the subnets of its grantee %q", what, r.Target, commentName(r.Grantee))
		}
		if len(r.Ports) == 0 {
			return fmt.Errorf("%s has no ports", what)
		}
		for _, port := range r.Ports {
			if err := checkPort(what, port, true); err != nil {
				return err
			}
			if other, dup := gwPorts[port.GatewayPort]; dup {
				return fmt.Errorf("%s and reverse exposure %q both use gateway port %d", what, other, port.GatewayPort)
			}
			gwPorts[port.GatewayPort] = name
			p.reverse = append(p.reverse, reversePort{
				exposure: name, grantee: commentName(r.Grantee), proto: port.Protocol,
				gatewayPort: port.GatewayPort, target: r.Target, targetPort: port.TargetPort, vip: r.VirtualIP,
				port: port.Port, serviceIP: r.ServiceIP,
			})
		}
	}
	return nil
}

// peerSubnets returns g's peers in name order and their subnets as the ruleset attributes
// them — every address to one peer (partition; owner indexes the peers) — or why they cannot
// be rendered.
func peerSubnets(g *model.Gateway) ([]model.Peer, []owned, error) {
	peers := slices.Clone(g.Peers)
	slices.SortStableFunc(peers, func(a, b model.Peer) int { return strings.Compare(a.Name, b.Name) })
	var claims []claim
	for i, peer := range peers {
		if i > 0 && peers[i-1].Name == peer.Name {
			return nil, nil, fmt.Errorf("peer %q is listed twice", commentName(peer.Name))
		}
		for _, s := range peer.SourceCIDRs {
			if err := checkPrefix(fmt.Sprintf("peer %q", commentName(peer.Name)), s); err != nil {
				return nil, nil, err
			}
			claims = append(claims, claim{prefix: s, owner: i, authorized: peer.Authorization.Authorized})
		}
	}
	return peers, partition(claims), nil
}

func checkPort(what string, p model.Port, reverse bool) error {
	if p.Protocol != "tcp" && p.Protocol != "udp" {
		return fmt.Errorf("%s: protocol %q is not tcp or udp", what, commentName(p.Protocol))
	}
	if p.Port == 0 || p.TargetPort == 0 {
		return fmt.Errorf("%s: port %d -> %d: ports must not be 0", what, p.Port, p.TargetPort)
	}
	if reverse && p.GatewayPort == 0 {
		return fmt.Errorf("%s: %s port %d has no gateway port", what, p.Protocol, p.Port)
	}
	return nil
}

// elements is how many set and map elements the ruleset holds.
func (p *plan) elements() int {
	n := len(p.peerIn) + len(p.forward) + len(p.sources)
	if p.kernelESP() {
		n += len(p.reqids)
	}
	for _, c := range p.classes {
		n += len(c.ports)
	}
	if p.hasClients() && len(p.reverse) > 0 {
		n += len(p.clientElements()) + 3*len(p.reverse) // rev_dnat, its keys, rev_snat
	}
	return n
}

// write renders the plan: the table's header, its counters, sets and maps, then its chains,
// one section each, in this order. Everything here is already validated.
func (p *plan) write() string {
	w := &rulesetWriter{
		p:             p,
		inLengths:     lengthsOf(len(p.peerIn), func(i int) netip.Prefix { return p.peerIn[i].prefix }),
		sourceLengths: lengthsOf(len(p.sources), func(i int) netip.Prefix { return p.sources[i].prefix }),
		reverse:       p.hasClients() && len(p.reverse) > 0,
	}
	w.b.Grow(4096 + 30*len(p.peerIn) + 100*len(p.forward))

	w.header()
	w.counters()
	w.peerMaps()
	w.dropSets()
	w.kernelESPSets()
	w.forwardSets()
	w.reverseSets()

	w.tunnelSourceChain()
	w.reverseServiceChain()
	w.preroutingChain()
	w.routeMarkChains()
	w.postroutingChain()
	w.forwardChain()
	w.tunnelChains()
	w.printf("}\n")
	return w.b.String()
}

// rulesetWriter writes one plan's ruleset text, section by section (plan.write).
type rulesetWriter struct {
	p *plan
	b strings.Builder
	// inLengths and sourceLengths are the prefix lengths of the peers' subnets and of the
	// reqids' sources (kernel ESP), longest first: one set or map, and one rule, per length.
	inLengths, sourceLengths []int
	// reverse: the ruleset translates reverse exposures (someone may reach one with a grantee).
	reverse bool
}

func (w *rulesetWriter) printf(format string, args ...any) { fmt.Fprintf(&w.b, format, args...) }

// header opens the table after deleting the old one (one transaction with `nft -f`).
func (w *rulesetWriter) header() {
	w.printf("# nftables ruleset of VPN gateway %s (%s), rendered by bnerd-vpn-operator; do not edit.\n", w.p.comment, w.p.protocol)
	w.printf("# Apply with `nft -f`: the table is declared, deleted and re-created in one transaction.\n")
	w.printf("table %s %s {}\n", Family, Table)
	w.printf("delete table %s %s\n", Family, Table)
	w.printf("table %s %s {\n", Family, Table)
}

// counters are the named counters of drops no peer subnet accounts for.
func (w *rulesetWriter) counters() {
	counter := func(name string) { w.printf("\tcounter %s {}\n", name) }
	w.printf("\t# Dropped from the tunnel with a source in no peer's subnets.\n")
	counter(CounterUnknownIn)
	w.printf("\t# Dropped otherwise (forwarded, neither from the tunnel nor toward a peer).\n")
	counter(CounterOther)
	if w.p.kernelESP() {
		w.printf("\t# Dropped from the tunnel with a source its SA's peer does not carry (kernel ESP).\n")
		counter(CounterSpoofed)
	}
	w.printf("\n")
}

// peerMaps map each peer subnet to its peer's grant class (overlaps resolved: authorized peer,
// then the longest prefix), one map per prefix length (see lengthName).
func (w *rulesetWriter) peerMaps() {
	w.printf("\t# A peer subnet's /N network -> its peer's grant class (0: none), one map per prefix length N.\n")
	for _, bits := range w.inLengths {
		w.printf("\tmap %s {\n\t\ttype ipv4_addr : mark\n", lengthName(SetPeer, bits))
		var elems []string
		for _, e := range w.p.peerIn {
			if e.prefix.Bits() == bits {
				elems = append(elems, e.prefix.Addr().String()+" : "+classID(w.p.peerClass[e.owner]))
			}
		}
		writeElements(&w.b, nil, elems)
		w.printf("\t}\n\n")
	}
}

// dropSets count each peer subnet's drops, both ways, one set per prefix length.
func (w *rulesetWriter) dropSets() {
	w.printf("\t# Dropped packets per peer subnet (/N network), from the tunnel (in) and toward it (out): an\n")
	w.printf("\t# element, and its counter, is made by the kernel at the subnet's first drop.\n")
	for _, dir := range []string{SetDropsIn, SetDropsOut} {
		for _, bits := range w.inLengths {
			w.printf("\tset %s {\n\t\ttype ipv4_addr\n\t\tflags dynamic\n\t\tcounter\n\t}\n\n", lengthName(dir, bits))
		}
	}
}

// kernelESPSets (kernel ESP only) are the reqids of the gateway's SAs and, per prefix length,
// the sources each of them carries.
func (w *rulesetWriter) kernelESPSets() {
	if !w.p.kernelESP() {
		return
	}
	w.printf("\t# Kernel ESP: the reqids of the gateway's peers' SAs; tunnel traffic is what they carry.\n")
	w.printf("\tset %s {\n\t\ttypeof ipsec in reqid\n", SetReqids)
	reqids := make([]string, len(w.p.reqids))
	for i, r := range w.p.reqids {
		reqids[i] = strconv.FormatUint(uint64(r), 10)
	}
	writeElements(&w.b, nil, reqids)
	w.printf("\t}\n\n")
	w.printf("\t# Kernel ESP: (reqid . source's /N network) of every peer's subnets, one set per prefix\n")
	w.printf("\t# length N; a packet an SA of the gateway decrypted is let in only when its source is one\n")
	w.printf("\t# its own peer carries.\n")
	for _, bits := range w.sourceLengths {
		w.printf("\tset %s {\n\t\ttypeof ipsec in reqid . ip saddr\n", lengthName(SetTunnelSources, bits))
		var elems []string
		for _, s := range w.p.sources {
			if s.prefix.Bits() == bits {
				elems = append(elems, fmt.Sprintf("%d . %s", s.reqid, s.prefix.Addr()))
			}
		}
		writeElements(&w.b, nil, elems)
		w.printf("\t}\n\n")
	}
}

// forwardSets are the forward exposures: what each grant class may reach, and where each
// virtual IP's port is translated to.
func (w *rulesetWriter) forwardSets() {
	w.printf("\t# Forward exposures: (grant class . virtual IP . protocol . port) granted.\n")
	w.printf("\tset %s {\n\t\ttype mark . ipv4_addr . inet_proto . inet_service\n", SetFwdGrants)
	var elems []string
	var notes []elementNote
	for _, c := range w.p.classes {
		notes = append(notes, elementNote{at: len(elems), text: "class " + classID(c.id) + ": " + nameList(c.peers)})
		for _, k := range c.ports {
			elems = append(elems, classID(c.id)+" . "+k.String())
		}
	}
	writeElements(&w.b, notes, elems)
	w.printf("\t}\n\n")

	w.printf("\t# Forward exposures: (virtual IP . protocol . port) -> (target . port).\n")
	w.printf("\tmap fwd_dnat {\n\t\ttype ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service\n")
	elems, notes = nil, nil
	for i, f := range w.p.forward {
		if i == 0 || w.p.forward[i-1].exposure != f.exposure {
			notes = append(notes, elementNote{at: len(elems), text: "exposure " + f.exposure})
		}
		elems = append(elems, fmt.Sprintf("%s : %s . %d", f.key, f.target, f.targetPort))
	}
	writeElements(&w.b, notes, elems)
	w.printf("\t}\n")
}

// reverseSets (when reverse exposures are translated) are who may reach them, where each
// gateway port is translated to and from, and, on the node, the same by Service IP.
func (w *rulesetWriter) reverseSets() {
	if !w.reverse {
		return
	}
	p := w.p
	w.printf("\n\t# Reverse exposures: the pods that may reach them (the gateway's tenant), inside internalSourceCIDRs.\n")
	w.printf("\tset reverse_clients {\n\t\ttype ipv4_addr\n")
	if len(p.clientRanges) > 0 {
		w.printf("\t\t# and the ranges of the ready ClusterLinks (service clusters' workloads)\n")
		w.printf("\t\tflags interval\n")
	}
	writeElements(&w.b, nil, p.clientElements())
	w.printf("\t}\n\n")
	w.printf("\t# Reverse exposures: (protocol . gateway port) -> (target in the grantee's subnets . port).\n")
	w.printf("\tmap rev_dnat {\n\t\ttype inet_proto . inet_service : ipv4_addr . inet_service\n")
	var elems []string
	var notes []elementNote
	for i, r := range p.reverse {
		if i == 0 || p.reverse[i-1].exposure != r.exposure {
			notes = append(notes, elementNote{at: len(elems), text: fmt.Sprintf("reverse exposure %s into peer %s", r.exposure, r.grantee)})
		}
		elems = append(elems, fmt.Sprintf("%s . %d : %s . %d", r.proto, r.gatewayPort, r.target, r.targetPort))
	}
	writeElements(&w.b, notes, elems)
	w.printf("\t}\n\n")
	keySet(&w.b, "rev_ports", "inet_proto . inet_service", "rev_dnat", elems)
	w.printf("\n")
	w.printf("\t# Reverse exposures: gateway port -> the exposure's virtual IP (the tunnel's source).\n")
	w.printf("\tmap rev_snat {\n\t\ttype inet_service : ipv4_addr\n")
	elems = nil
	for _, r := range p.reverse {
		elems = append(elems, fmt.Sprintf("%d : %s", r.gatewayPort, r.vip))
	}
	writeElements(&w.b, nil, elems)
	w.printf("\t}\n")
	if !p.serviceKeyed() {
		return
	}
	w.printf("\n\t# Reverse exposures on the node: (Service IP . protocol . port) -> (target . port).\n")
	w.printf("\tmap rev_svc_dnat {\n\t\ttype ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service\n")
	elems = nil
	for _, r := range p.reverse {
		if r.serviceIP.IsValid() {
			elems = append(elems, fmt.Sprintf("%s . %s . %d : %s . %d", r.serviceIP, r.proto, r.port, r.target, r.targetPort))
		}
	}
	writeElements(&w.b, nil, elems)
	w.printf("\t}\n\n")
	keySet(&w.b, "rev_svc_keys", "ipv4_addr . inet_proto . inet_service", "rev_svc_dnat", elems)
	w.printf("\n")
	w.printf("\t# Reverse exposures on the node: (Service IP . port) -> the exposure's virtual IP.\n")
	w.printf("\tmap rev_svc_snat {\n\t\ttype ipv4_addr . inet_service : ipv4_addr\n")
	elems = nil
	for _, r := range p.reverse {
		if r.serviceIP.IsValid() {
			elems = append(elems, fmt.Sprintf("%s . %d : %s", r.serviceIP, r.port, r.vip))
		}
	}
	writeElements(&w.b, nil, elems)
	w.printf("\t}\n\n")
	keySet(&w.b, "rev_svc_snat_keys", "ipv4_addr . inet_service", "rev_svc_snat", elems)
}

// tunnelSourceChain (kernel ESP only) drops a packet from the tunnel whose source the SA it
// came through does not carry, before anything else sees it.
func (w *rulesetWriter) tunnelSourceChain() {
	if !w.p.kernelESP() {
		return
	}
	w.printf("\n\t# Kernel ESP: grants are bound to the SA a packet came through. A source in another\n")
	w.printf("\t# peer's subnets (or in none) is dropped before anything else sees the packet, so every\n")
	w.printf("\t# later match of a source subnet also matches the SA (reqid) of the peer owning it.\n")
	w.printf("\tchain tunnel_source {\n\t\ttype filter hook prerouting priority -160; policy accept;\n")
	for _, bits := range w.sourceLengths {
		w.printf("\t\t%s ipsec in reqid . %s @%s accept\n", w.p.tunnelIn, masked("ip saddr", bits), lengthName(SetTunnelSources, bits))
	}
	w.printf("\t\t%s counter name %q drop\n", w.p.tunnelIn, CounterSpoofed)
	w.printf("\t}\n")
}

// reverseServiceChain (on the node, with a reverse exposure's Service IP) translates a client
// of the gateway's own node to the reverse target before kube-proxy would.
func (w *rulesetWriter) reverseServiceChain() {
	if !w.p.serviceKeyed() {
		return
	}
	w.printf("\n\t# A client on the gateway's own node reaches a reverse exposure's Service here, before\n")
	w.printf("\t# kube-proxy (priority dstnat) would translate it to the node's address, where no second\n")
	w.printf("\t# translation into the tunnel can happen.\n")
	w.printf("\tchain reverse_service {\n\t\ttype nat hook prerouting priority -110; policy accept;\n")
	match, ret := w.p.notFromTunnel()
	w.b.WriteString(ret)
	w.printf("\t\t%s%sip saddr @reverse_clients ip daddr . meta l4proto . th dport @rev_svc_keys ct mark set 0x%08x dnat ip to ip daddr . meta l4proto . th dport map @rev_svc_dnat\n", match, strictSource, MarkReverse)
	w.printf("\t}\n")
}

// preroutingChain translates a granted peer's new flow to its forward exposure's target, and
// a reverse client's to its reverse exposure's.
func (w *rulesetWriter) preroutingChain() {
	p := w.p
	w.printf("\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	w.printf("\t\t# A peer's packet is translated only when its source is granted; nothing else is. The\n")
	w.printf("\t\t# conntrack mark carries the source subnet's grant class from one lookup to the next and\n")
	w.printf("\t\t# ends as MarkForward (translated) or 0.\n")
	w.printf("\t\t%s ct mark set %s\n", p.tunnelIn, classID(noClass))
	for _, bits := range w.inLengths {
		w.printf("\t\t%s ct mark set %s map @%s\n", p.tunnelIn, masked("ip saddr", bits), lengthName(SetPeer, bits))
	}
	w.printf("\t\t%s ct mark . ip daddr . meta l4proto . th dport @%s ct mark set 0x%08x dnat ip to ip daddr . meta l4proto . th dport map @fwd_dnat\n",
		p.tunnelIn, SetFwdGrants, MarkForward)
	w.printf("\t\t%s ct mark set %s\n", p.tunnelIn, classID(noClass))
	if w.reverse {
		// In a pod the clients arrive on its cluster interface; on the node they arrive on the
		// CNI's bridge or veths (any device but the tunnel's), sent by kube-proxy to the node's
		// address and the gateway's port.
		from := "iifname " + p.cluster + " "
		if p.sharedNetns {
			var ret string
			from, ret = p.notFromTunnel()
			w.b.WriteString(ret)
			from += strictSource
		}
		w.printf("\t\t%sfib daddr type local ip saddr @reverse_clients meta l4proto . th dport @rev_ports ct mark set 0x%08x dnat ip to meta l4proto . th dport map @rev_dnat\n", from, MarkReverse)
	}
	w.printf("\t}\n\n")
}

// routeMarkChains give the gateway's own flows the packet mark charon's routes are
// consulted for (RouteMark).
func (w *rulesetWriter) routeMarkChains() {
	w.printf("\t# The gateway's own flows take charon's routes (table 220, consulted for RouteMark only):\n")
	w.printf("\t# after the DNAT, before the routing decision; and the gateway's own ICMP errors for them.\n")
	w.printf("\tchain route_mark {\n\t\ttype filter hook prerouting priority -99; policy accept;\n")
	w.printf("\t\tct mark { 0x%08x, 0x%08x } meta mark set meta mark | 0x%08x\n", MarkForward, MarkReverse, RouteMark)
	w.printf("\t}\n\n")
	w.printf("\tchain route_mark_out {\n\t\ttype route hook output priority -99; policy accept;\n")
	w.printf("\t\tct mark { 0x%08x, 0x%08x } meta mark set meta mark | 0x%08x\n", MarkForward, MarkReverse, RouteMark)
	w.printf("\t}\n\n")
}

// postroutingChain gives the gateway's translated flows its own source addresses.
//
// Just before srcnat: on a node the CNI's and kube-proxy's masquerade chains sit at srcnat,
// and the first source NAT of a flow is the only one; the gateway's flows must leave with
// its own addresses (a reverse flow from its virtual IP), so its chain comes first. It
// translates nothing but the gateway's own marked flows.
func (w *rulesetWriter) postroutingChain() {
	w.printf("\tchain postrouting {\n\t\ttype nat hook postrouting priority 99; policy accept;\n")
	w.printf("\t\t# Granted forward flows leave with the gateway's own cluster address: no routes back needed.\n")
	w.printf("\t\tct mark 0x%08x masquerade\n", MarkForward)
	if w.reverse {
		w.printf("\t\t# Reverse flows enter the tunnel from the exposure's virtual IP (inside the service CIDR).\n")
		if w.p.serviceKeyed() {
			w.printf("\t\tmeta l4proto { tcp, udp } ct mark 0x%08x ct original ip daddr . ct original proto-dst @rev_svc_snat_keys snat ip to ct original ip daddr . ct original proto-dst map @rev_svc_snat\n", MarkReverse)
		}
		w.printf("\t\tmeta l4proto { tcp, udp } ct mark 0x%08x snat ip to ct original proto-dst map @rev_snat\n", MarkReverse)
	}
	w.printf("\t}\n\n")
}

// forwardChain clamps the MSS, accepts established and translated flows, and drops and
// counts the rest (on the node: the rest from or into the tunnel).
func (w *rulesetWriter) forwardChain() {
	p := w.p
	policy := "drop"
	if p.sharedNetns {
		// On a node, other forwarded traffic (pods, services) is none of the gateway's business.
		policy = "accept"
	}
	w.printf("\tchain forward {\n\t\ttype filter hook forward priority filter; policy %s;\n", policy)
	clamps := []string{""}
	if p.sharedNetns { // only tunnel traffic, both ways
		clamps = []string{p.tunnelIn + " ", p.tunnelOut + " "}
	}
	// "tcp flags syn" first: every packet of the chain meets these rules before the
	// established ones are accepted, and the flags are cheaper to test than an interface name
	// (with kernel-libipsec each packet's whole path through the kernel costs charon's
	// inbound thread, the dataplane's bottleneck).
	for _, match := range clamps {
		if p.mss > 0 {
			w.printf("\t\ttcp flags syn %stcp option maxseg size > %d tcp option maxseg size set %d\n", match, p.mss, p.mss)
		} else {
			w.printf("\t\ttcp flags syn %stcp option maxseg size set rt mtu\n", match)
		}
	}
	w.printf("\t\tct state established,related accept\n")
	w.printf("\t\tct mark 0x%08x ct status dnat accept\n", MarkForward)
	if w.reverse {
		w.printf("\t\tct mark 0x%08x ct status dnat accept\n", MarkReverse)
	}
	w.peerDrops(p.tunnelIn+" ", "ip saddr", SetDropsIn)
	w.printf("\t\t%s counter name %q drop\n", p.tunnelIn, CounterUnknownIn)
	if p.sharedNetns {
		// On a node only what enters the tunnel is the gateway's: a new flow into it that no
		// exposure accepted is dropped; the node's other flows toward a peer-like range are not.
		w.peerDrops(p.tunnelOut+" ", "ip daddr", SetDropsOut)
		w.printf("\t\t%s counter name %q drop\n", p.tunnelOut, CounterOther)
	} else {
		w.peerDrops("", "ip daddr", SetDropsOut)
		w.printf("\t\tcounter name %q drop\n", CounterOther)
	}
	w.printf("\t}\n\n")
}

// peerDrops are the rules that drop a packet of a peer subnet (field: its source or
// destination) and count it in the subnet's element of set, one rule per prefix length. The
// map's value (unused, but a lookup in a map must take it on Linux 6.1) goes into the packet's
// mark on its way to being dropped.
func (w *rulesetWriter) peerDrops(match, field, set string) {
	for _, bits := range w.inLengths {
		key := masked(field, bits)
		w.printf("\t\t%smeta mark set %s map @%s update @%s { %s } drop\n", match, key, lengthName(SetPeer, bits), lengthName(set, bits), key)
	}
}

// tunnelChains judge the gateway's own traffic: what comes from or goes into the tunnel is
// matched once and judged in a chain of its own, so the rest (charon's ESP and IKE packets
// among them, several for every packet through the tunnel) meets one test, not three.
func (w *rulesetWriter) tunnelChains() {
	w.tunnelChain("input", w.p.tunnelIn, "ip saddr", SetDropsIn, CounterUnknownIn)
	w.printf("\n")
	w.tunnelChain("output", w.p.tunnelOut, "ip daddr", SetDropsOut, CounterOther)
}

// tunnelChain is a base chain on hook that jumps to <hook>_tunnel for the tunnel's packets
// (match), and that chain: established flows accepted, new ones dropped and counted.
func (w *rulesetWriter) tunnelChain(hook, match, field, set, counter string) {
	w.printf("\tchain %s {\n\t\ttype filter hook %s priority filter; policy accept;\n", hook, hook)
	w.printf("\t\t%s jump %s_tunnel\n", match, hook)
	w.printf("\t}\n\n")
	w.printf("\tchain %s_tunnel {\n", hook)
	w.printf("\t\tct state established,related accept\n")
	w.peerDrops("", field, set)
	w.printf("\t\tcounter name %q drop\n", counter)
	w.printf("\t}\n")
}

// Names of the sets and maps keyed by a peer subnet, before their prefix length (lengthName).
const (
	SetPeer          = "peer"
	SetDropsIn       = "drops_in"
	SetDropsOut      = "drops_out"
	SetFwdGrants     = "fwd_grants"
	SetTunnelSources = "tunnel_sources"
)

// Peer subnets are looked up by prefix length, never in interval sets: each set or map keyed by
// a subnet is split into one plain (hash) set per prefix length in use, keyed by the /N network
// (the address masked to N bits), and each rule that consults it becomes one rule per length,
// masking the address first. The subnets of one set are disjoint (partition, coverPrefixes), so
// an address matches in at most one length and the rules' order does not matter. Why: adding
// or removing an element of an interval set costs the kernel time that grows with the set (the
// rbtree's overlap walk, the concatenated pipapo's clone on commit: ~2 ms and ~17 ms at 10,000
// peers on Linux 6.x); a hash set's element costs the same at 10 peers as at 10,000. A peer
// with a prefix length no other peer has changes the structure (a set and its rules): a whole
// load, as for any structural change.

// lengthName is the set for one prefix length: peer_24.
func lengthName(base string, bits int) string { return base + "_" + strconv.Itoa(bits) }

// classID is a grant class as the ruleset writes it (a mark: the conntrack mark carries it).
func classID(id uint32) string { return fmt.Sprintf("0x%08x", id) }

// masked is an address expression masked to a prefix length (left as is for /32).
func masked(field string, bits int) string {
	if bits == 32 {
		return field
	}
	return field + " & " + maskOf(bits)
}

func maskOf(bits int) string {
	m := ^uint32(0) << (32 - bits) // 0 for /0
	return netip.AddrFrom4([4]byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}).String()
}

// lengthsOf are the distinct prefix lengths of n prefixes, longest first.
func lengthsOf(n int, prefix func(int) netip.Prefix) []int {
	var seen [33]bool
	var out []int
	for i := range n {
		seen[prefix(i).Bits()] = true
	}
	for bits := 32; bits >= 0; bits-- {
		if seen[bits] {
			out = append(out, bits)
		}
	}
	return out
}

// keySet writes a set holding the keys of a map's elements ("key : value"), for the rules
// that test membership before they translate: Linux 6.1 refuses (EINVAL) a lookup in a named
// map that does not use its value (allowed from later kernels on), so such a test needs a set.
func keySet(b *strings.Builder, name, typ, of string, mapElems []string) {
	keys := make([]string, len(mapElems))
	for i, e := range mapElems {
		keys[i], _, _ = strings.Cut(e, " : ")
	}
	fmt.Fprintf(b, "\t# The keys of %s (membership tests; see keySet).\n\tset %s {\n\t\ttype %s\n", of, name, typ)
	writeElements(b, nil, keys)
	b.WriteString("\t}\n")
}

// nameList lists up to 8 names, then how many more there are.
func nameList(names []string) string {
	const show = 8
	if len(names) <= show {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:show], ", "), len(names)-show)
}

// elementNote is a comment line written before element number at.
type elementNote struct {
	at   int
	text string
}

// Element lists longer than packAbove are written packPer elements a line: nft's parser slows
// down quadratically with the number of lines one statement spans when it reads a file
// (nft -f FILE, 1.0.6: 9 s instead of 0.7 s for 10,000 peers one element a line).
const (
	packAbove = 64
	packPer   = 16
)

// writeElements writes `elements = { ... }`, or nothing when there are none: one element a
// line, or packed for long lists; a note starts a new line.
func writeElements(b *strings.Builder, notes []elementNote, elems []string) {
	if len(elems) == 0 {
		return
	}
	per := 1
	if len(elems) > packAbove {
		per = packPer
	}
	b.WriteString("\t\telements = {\n")
	n, onLine := 0, 0
	for i, e := range elems {
		for n < len(notes) && notes[n].at == i {
			if onLine > 0 {
				b.WriteString("\n")
				onLine = 0
			}
			b.WriteString("\t\t\t# ")
			b.WriteString(notes[n].text)
			b.WriteString("\n")
			n++
		}
		if onLine == per {
			b.WriteString("\n")
			onLine = 0
		}
		if onLine == 0 {
			b.WriteString("\t\t\t")
		} else {
			b.WriteString(" ")
		}
		b.WriteString(e)
		if i < len(elems)-1 {
			b.WriteString(",")
		}
		onLine++
	}
	b.WriteString("\n\t\t}\n")
}
