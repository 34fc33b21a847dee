package model

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/ipam"
)

// Input is everything Build needs, already fetched by the caller.
type Input struct {
	Gateway *vpnv1.VPNGateway
	// Kind of the custom resource the gateway comes from: empty for a VPNGateway,
	// KindIPsecGateway when Gateway and Peers were translated from an IPsecGateway.
	Kind string
	// Peers whose spec.gatewayRef names the gateway, in its namespace, any order. The caller
	// leaves out peers being deleted.
	Peers  []vpnv1.VPNPeer
	Config Config
	// ServiceCIDR is the gateway's service CIDR as assigned by the allocator.
	ServiceCIDR netip.Prefix
	// Services maps the exposure target Services' names to where their traffic goes; a name
	// missing here is an error (TargetServiceNotFound).
	Services map[string]ServiceTarget
	// PublicAddress from the endpoint, empty until known.
	PublicAddress string
	// Uplink is the endpoint's second NIC, nil when it has none.
	Uplink *Uplink
	// NodeAddresses are the cluster's nodes' addresses: never an exposure target.
	NodeAddresses []netip.Addr
	// OtherServiceCIDRs are the other gateways' service CIDRs: never an exposure target.
	OtherServiceCIDRs []GatewayCIDR
	// RefusedSecrets are the peers' credential Secrets, by name with their type, that may not
	// hold tunnel credentials (see Scope.RefusedSecrets).
	RefusedSecrets map[string]string
	// ReverseClients are the addresses of the pods that may reach the reverse exposures (the
	// gateway's namespace and those spec.reverseExposureNamespaces selects, host-network pods
	// left out), any order; Build keeps those inside the internal source CIDRs.
	ReverseClients []netip.Addr
	// ReverseServiceIPs are the ClusterIPs of the reverse exposures' Services, by exposure name.
	ReverseServiceIPs map[string]netip.Addr
	// Links are the ready ClusterLinks (DecideLinks): the gateway routes to their ranges, admits
	// them as internal sources and exposure targets, and withholds peer subnets overlapping them.
	Links []Link
}

// GatewayCIDR is a gateway's service CIDR, with the gateway's namespace/name.
type GatewayCIDR struct {
	Gateway string
	CIDR    netip.Prefix
}

// Defaults applied by Build where the spec leaves a setting out.
var (
	defaultIKEProposals = []string{"aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp2048"}
	defaultESPProposals = []string{"aes256gcm16-ecp256", "aes256-sha256-modp2048"}
)

const (
	defaultIKEVersion    = 2
	defaultDPDDelay      = 30 * time.Second
	defaultDPDAction     = "restart"
	defaultIKERekeyTime  = 4 * time.Hour
	defaultIKEReauthTime = 0
	defaultESPRekeyTime  = time.Hour
	defaultWGListenPort  = vpnv1.DefaultWireGuardListenPort
	defaultWGMTU         = 1420
	defaultWGKeySuffix   = "-wireguard-key"
	defaultWGKeyKey      = "privateKey"
)

// errList collects build errors in the order they are found.
type errList []Error

func (l *errList) add(reason, field, format string, args ...any) {
	*l = append(*l, Error{Reason: reason, Field: field, Detail: fmt.Sprintf(format, args...)})
}

// Build validates the input into a Gateway, or returns why it cannot (never a partial model).
//
// Errors are reported in a fixed order: gateway fields in spec order, then virtual IPs (in
// exposure then reverse-exposure order), then the configuration, then peers by name.
func Build(in Input) (*Gateway, []Error) {
	gw := in.Gateway
	if gw == nil {
		return nil, []Error{{Reason: ReasonInvalidSpec, Field: "gateway", Detail: "no gateway given"}}
	}
	var errs errList

	out := &Gateway{
		Kind:          in.Kind,
		Namespace:     gw.Namespace,
		Name:          gw.Name,
		UID:           gw.UID,
		Generation:    gw.Generation,
		PublicAddress: in.PublicAddress,
		Uplink:        in.Uplink,
	}

	if in.Kind != "" && in.Kind != KindIPsecGateway {
		errs.add(ReasonInvalidSpec, "kind", "kind %q is neither a VPNGateway nor an %s", in.Kind, KindIPsecGateway)
	}
	switch gw.Spec.Protocol {
	case vpnv1.ProtocolIPsec:
		out.Protocol = ProtocolIPsec
	case vpnv1.ProtocolWireGuard:
		out.Protocol = ProtocolWireGuard
	default:
		errs.add(ReasonInvalidSpec, "spec.protocol", "protocol %q is not one of ipsec, wireguard", gw.Spec.Protocol)
	}

	switch gw.Spec.Mode {
	case "", vpnv1.ModeSNAT:
		out.Mode = ModeSNAT
	case vpnv1.ModeRouted:
		errs.add(ReasonModeNotImplemented, "spec.mode", "mode routed is not implemented yet; use snat")
	default:
		errs.add(ReasonInvalidSpec, "spec.mode", "mode %q is not one of snat, routed", gw.Spec.Mode)
	}

	out.Endpoint = buildEndpoint(gw.Spec.Endpoint, &errs)
	out.Standby = StandbyOf(in.Kind, gw, in.Config)
	if len(out.Endpoint.NodeNames) > 0 {
		switch {
		case in.Kind != "":
			errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.nodes", "an IPsecGateway has no standby: name its node with nodeName")
		case out.Protocol == ProtocolWireGuard:
			errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.nodes", "a WireGuard gateway cannot move its address between nodes yet")
		case !out.Standby:
			errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.nodes", "nodes is for a gateway with a standby: set spec.availability.standby to true")
		}
	}

	cidrOK := buildServiceCIDR(gw, in.ServiceCIDR, out, &errs)

	switch out.Protocol {
	case ProtocolIPsec:
		if gw.Spec.WireGuard != nil {
			errs.add(ReasonInvalidSpec, "spec.wireguard", "wireguard settings are not allowed on an ipsec gateway")
		}
		out.IPsec = buildIPsecGateway(gw.Spec.IPsec, &errs)
	case ProtocolWireGuard:
		if gw.Spec.IPsec != nil {
			errs.add(ReasonInvalidSpec, "spec.ipsec", "ipsec settings are not allowed on a wireguard gateway")
		}
		out.WireGuard = buildWireGuardGateway(gw.Name, gw.Spec.WireGuard, &errs)
	}

	namesOK := buildExposures(gw, in.Services, out, &errs)

	if cidrOK && namesOK {
		assignVirtualIPs(gw, out, &errs)
	}
	out.Routes = linkRoutes(in.Links)
	checkTargets(in, out, cidrOK, &errs)

	for i, c := range in.Config.InternalSourceCIDRs {
		if !c.IsValid() {
			errs.add(ReasonInvalidSpec, fmt.Sprintf("config.internalSourceCIDRs[%d]", i), "not a valid CIDR")
		}
	}
	out.InternalSourceCIDRs = slices.Clone(in.Config.InternalSourceCIDRs)
	for _, r := range out.Routes {
		if !slices.Contains(out.InternalSourceCIDRs, r.CIDR) {
			out.InternalSourceCIDRs = append(out.InternalSourceCIDRs, r.CIDR)
		}
	}
	out.ReverseClients = reverseClients(in.ReverseClients, out.InternalSourceCIDRs)
	for i := range out.ReverseExposures {
		if a := in.ReverseServiceIPs[out.ReverseExposures[i].Name]; a.Is4() && !a.IsUnspecified() {
			out.ReverseExposures[i].ServiceIP = a
		}
	}
	if sel := gw.Spec.ReverseExposureNamespaces; sel != nil {
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs.add(ReasonInvalidSpec, "spec.reverseExposureNamespaces", "not a valid label selector: %v", err)
		}
		out.ReverseClientNamespaces = sel.DeepCopy()
	}

	scope := Scope{LocalID: GatewayLocalID(gw, in.PublicAddress), Config: in.Config, RefusedSecrets: in.RefusedSecrets, Links: in.Links}
	if cidrOK {
		scope.ServiceCIDR = out.ServiceCIDR
	}
	verdicts, problems := authorize(gw, in.Peers, scope)
	buildPeers(gw, in.Peers, verdicts, out, &errs)
	assignReqids(gw, in.Peers, out)

	if len(errs) > 0 {
		return nil, errs
	}

	fillGrantees(out)
	out.Problems = problems
	if len(out.ReverseExposures) > 0 && len(out.InternalSourceCIDRs) == 0 {
		names := make([]string, len(out.ReverseExposures))
		for i, r := range out.ReverseExposures {
			names[i] = r.Name
		}
		out.Problems = append(out.Problems, Problem{
			Reason: ReasonNoInternalSources,
			Message: fmt.Sprintf("reverse exposures %s are unreachable: the operator has no internalSourceCIDRs configured",
				quoteJoin(names)),
		})
	}
	return out, nil
}

// StandbyOf is whether a gateway runs a standby pod: its spec.availability.standby, or the
// install's default (Config.Standby) when that is unset. A VPNGateway with a loadBalancer
// endpoint may have one; a host-network gateway only when it says so itself and names its
// nodes and address (the VIP that moves to the active pod's node); a floating IP does not
// follow the active pod yet (admission refuses spec.availability.standby there; the
// install's default applies to neither). A legacy IPsecGateway has none.
func StandbyOf(kind string, gw *vpnv1.VPNGateway, cfg Config) bool {
	if kind != "" {
		return false
	}
	if hn := gw.Spec.Endpoint.HostNetwork; hn != nil {
		a := gw.Spec.Availability
		return len(hn.Nodes) > 0 && hn.Address != "" && a != nil && a.Standby != nil && *a.Standby
	}
	if gw.Spec.Endpoint.LoadBalancer == nil {
		return false
	}
	if a := gw.Spec.Availability; a != nil && a.Standby != nil {
		return *a.Standby
	}
	return cfg.Standby
}

// Authorize decides every peer's Authorized condition from the gateway spec, its peers and
// the scope (the gateway's service CIDR and identity, the cluster's ranges), keyed by peer
// name. Problems are gateway-level findings (e.g. a reverse exposure granted to a peer whose
// subnets do not cover it, naming both peers).
//
// Every peer given counts towards the single-peer default-allow, whatever its protocol. A nil
// gateway leaves every peer GatewayNotFound.
func Authorize(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, scope Scope) (map[string]Decision, []Problem) {
	verdicts, problems := authorize(gw, peers, scope)
	out := make(map[string]Decision, len(verdicts))
	for name, v := range verdicts {
		out[name] = v.Decision
	}
	return out, problems
}

func buildEndpoint(e vpnv1.Endpoint, errs *errList) Endpoint {
	var set []string
	if e.FloatingIPPool != "" {
		set = append(set, "floatingIPPool")
	}
	if e.FloatingIP != "" {
		set = append(set, "floatingIP")
	}
	if e.LoadBalancer != nil {
		set = append(set, "loadBalancer")
	}
	if e.HostNetwork != nil {
		set = append(set, "hostNetwork")
	}
	if len(set) != 1 {
		detail := "exactly one of floatingIPPool, floatingIP, loadBalancer or hostNetwork must be set"
		if len(set) > 1 {
			detail += "; found " + strings.Join(set, ", ")
		}
		errs.add(ReasonInvalidSpec, "spec.endpoint", "%s", detail)
		return Endpoint{}
	}
	var out Endpoint
	switch {
	case e.FloatingIPPool != "":
		out.Kind = EndpointFloatingIPPool
		out.FloatingIPPool = e.FloatingIPPool
	case e.FloatingIP != "":
		out.Kind = EndpointFloatingIP
		a, err := netip.ParseAddr(e.FloatingIP)
		if err != nil || !a.Is4() || a.IsUnspecified() {
			errs.add(ReasonInvalidSpec, "spec.endpoint.floatingIP", "%q is not an IPv4 address", e.FloatingIP)
		}
		out.FloatingIP = a
	case e.LoadBalancer != nil:
		out.Kind = EndpointLoadBalancer
		out.LoadBalancerClass = e.LoadBalancer.LoadBalancerClass
		if len(e.LoadBalancer.Annotations) > 0 {
			out.Annotations = make(map[string]string, len(e.LoadBalancer.Annotations))
			for k, v := range e.LoadBalancer.Annotations {
				out.Annotations[k] = v
			}
		}
	case e.HostNetwork != nil:
		hn := e.HostNetwork
		out.Kind = EndpointHostNetwork
		out.NodeName = hn.NodeName
		switch {
		case len(hn.Nodes) > 0 && hn.NodeName != "":
			errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.nodes", "nodes and nodeName are exclusive")
		case len(hn.Nodes) > 0:
			out.NodeNames = buildNodeNames(hn.Nodes, errs)
		case out.NodeName == "":
			errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.nodeName", "node name is empty")
		}
		if hn.Address != "" {
			a, err := netip.ParseAddr(hn.Address)
			if err != nil || a.IsUnspecified() || a.Zone() != "" {
				errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.address", "%q is not an IP address", hn.Address)
			}
			out.HostAddress = a
		}
		if len(hn.Nodes) > 0 && (!out.HostAddress.Is4() || !out.HostAddress.IsGlobalUnicast()) {
			errs.add(ReasonInvalidSpec, "spec.endpoint.hostNetwork.address", "with nodes, address is the VIP the active pod's node holds: an IPv4 unicast address (got %q)", hn.Address)
		}
	}
	return out
}

// buildNodeNames checks the nodes of a host-network gateway with a standby: at least two,
// each once, none empty.
func buildNodeNames(nodes []string, errs *errList) []string {
	const field = "spec.endpoint.hostNetwork.nodes"
	seen := map[string]bool{}
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		switch {
		case n == "":
			errs.add(ReasonInvalidSpec, field, "a node name is empty")
		case seen[n]:
			errs.add(ReasonInvalidSpec, field, "node %q is named twice", n)
		default:
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) < 2 {
		errs.add(ReasonInvalidSpec, field, "a gateway with a standby needs at least two nodes, got %d", len(out))
	}
	return out
}

// buildServiceCIDR validates the assigned service CIDR and derives the local address.
func buildServiceCIDR(gw *vpnv1.VPNGateway, sc netip.Prefix, out *Gateway, errs *errList) bool {
	const field = "spec.serviceCIDR"
	if gw.Spec.ServiceCIDR != "" {
		spec, err := netip.ParsePrefix(gw.Spec.ServiceCIDR)
		switch {
		case err != nil:
			errs.add(ReasonInvalidSpec, field, "%q is not a CIDR", gw.Spec.ServiceCIDR)
			return false
		case sc.IsValid() && spec != sc:
			errs.add(ReasonInvalidSpec, field, "%s differs from the assigned service CIDR %s, which clients may already use; it cannot change",
				spec, sc)
			return false
		}
	}
	switch {
	case !sc.IsValid():
		errs.add(ReasonInvalidSpec, field, "no service CIDR assigned")
	case !sc.Addr().Is4():
		errs.add(ReasonInvalidSpec, field, "%s is not an IPv4 CIDR", sc)
	case sc.Masked() != sc:
		errs.add(ReasonInvalidSpec, field, "%s is not a network address (host bits set)", sc)
	case sc.Bits() < CGNATRange.Bits() || !CGNATRange.Contains(sc.Addr()):
		errs.add(ReasonInvalidSpec, field, "%s does not lie inside %s", sc, CGNATRange)
	case sc.Bits() > 30:
		errs.add(ReasonInvalidSpec, field, "%s is too small: it needs room for the gateway's own address and virtual IPs", sc)
	default:
		out.ServiceCIDR = sc
		out.LocalAddress = sc.Addr().Next()
		return true
	}
	return false
}

func buildIPsecGateway(s *vpnv1.IPsecGatewaySettings, errs *errList) *IPsecGateway {
	out := &IPsecGateway{
		IKEVersion:   defaultIKEVersion,
		IKEProposals: slices.Clone(defaultIKEProposals),
		DPDDelay:     defaultDPDDelay,
		DPDAction:    defaultDPDAction,
		RekeyTime:    defaultIKERekeyTime,
		ReauthTime:   defaultIKEReauthTime,
	}
	if s == nil {
		return out
	}
	out.LocalID = s.LocalID
	out.ForceEncap = s.ForceEncapsulation
	switch {
	case s.MTU == 0:
	case s.MTU < 1280 || s.MTU > 9000:
		errs.add(ReasonInvalidSpec, "spec.ipsec.mtu", "MTU %d is not between 1280 and 9000", s.MTU)
	default:
		out.TunnelMTU = s.MTU
	}
	if s.LocalID != "" {
		if _, err := CanonicalID(s.LocalID); err != nil {
			errs.add(ReasonInvalidSpec, "spec.ipsec.localID", "%v: the gateway must present one identity its peers can match", err)
		}
	}
	ike := buildIKE("spec.ipsec.ike", out.IKESettings(), ikeFields{version: s.IKE.Version, proposals: s.IKE.Proposals,
		dpd: s.IKE.DPD, rekey: s.IKE.RekeyTime, reauth: s.IKE.ReauthTime}, errs)
	out.IKEVersion, out.IKEProposals, out.DPDDelay, out.DPDAction, out.DPDTimeout = ike.IKEVersion, ike.IKEProposals, ike.DPDDelay, ike.DPDAction, ike.DPDTimeout
	if d := s.IKE.DPD; d != nil && d.Timeout != nil && ike.IKEVersion != 1 {
		errs.add(ReasonInvalidSpec, "spec.ipsec.ike.dpd.timeout", "a DPD timeout applies to IKEv1 only: IKEv2 declares a peer dead when its retransmissions of a liveness check run out")
	}
	out.RekeyTime, out.ReauthTime = ike.RekeyTime, ike.ReauthTime
	return out
}

// ikeFields are the IKE settings of a gateway's or a peer's spec.
type ikeFields struct {
	version       int32
	proposals     []string
	dpd           *vpnv1.DPDSettings
	rekey, reauth *metav1.Duration
}

// buildIKE is base with the settings given in place of its own (field names them in errors).
func buildIKE(field string, base IKE, in ikeFields, errs *errList) IKE {
	out := base
	switch in.version {
	case 0:
	case 1, 2:
		out.IKEVersion = in.version
	default:
		errs.add(ReasonInvalidSpec, field+".version", "IKE version %d is not 1 or 2", in.version)
	}
	if len(in.proposals) > 0 {
		out.IKEProposals = slices.Clone(in.proposals)
		checkProposals(field+".proposals", in.proposals, errs)
	}
	if in.dpd != nil {
		if in.dpd.Delay != nil {
			out.DPDDelay = nonNegative(field+".dpd.delay", in.dpd.Delay.Duration, errs)
		}
		if in.dpd.Timeout != nil {
			out.DPDTimeout = nonNegative(field+".dpd.timeout", in.dpd.Timeout.Duration, errs)
		}
		switch in.dpd.Action {
		case "":
		case "restart", "clear", "trap":
			out.DPDAction = in.dpd.Action
		default:
			errs.add(ReasonInvalidSpec, field+".dpd.action", "DPD action %q is not one of restart, clear, trap", in.dpd.Action)
		}
	}
	if out.IKEVersion != 1 {
		// IKEv2 has no DPD timeout: a timeout set beside it is refused by the API (the
		// gateway's), the model (the gateway's, buildIPsecGateway) or the peer's authorization
		// (a peer's own, protocolStep); one inherited from an IKEv1 gateway does not apply.
		out.DPDTimeout = 0
	}
	if in.rekey != nil {
		out.RekeyTime = nonNegative(field+".rekeyTime", in.rekey.Duration, errs)
	}
	if in.reauth != nil {
		out.ReauthTime = nonNegative(field+".reauthTime", in.reauth.Duration, errs)
	}
	return out
}

func checkProposals(field string, ps []string, errs *errList) {
	for i, p := range ps {
		if p == "" || strings.ContainsAny(p, " \t\r\n,;{}\"'#") {
			errs.add(ReasonInvalidSpec, fmt.Sprintf("%s[%d]", field, i), "%q is not a proposal in strongSwan notation", p)
		}
	}
}

func nonNegative(field string, d time.Duration, errs *errList) time.Duration {
	if d < 0 {
		errs.add(ReasonInvalidSpec, field, "duration %s is negative", d)
		return 0
	}
	return d
}

// WireGuardKeyRef is where a WireGuard gateway's private key lives, and whether it is the
// operator's own Secret (generated when absent) rather than one the user named.
func WireGuardKeyRef(gw *vpnv1.VPNGateway) (ref SecretKeyRef, generated bool) {
	if s := gw.Spec.WireGuard; s != nil && s.PrivateKeySecretRef != nil {
		return SecretKeyRef{Name: s.PrivateKeySecretRef.Name, Key: s.PrivateKeySecretRef.Key}, false
	}
	return SecretKeyRef{Name: gw.Name + defaultWGKeySuffix, Key: defaultWGKeyKey}, true
}

func buildWireGuardGateway(gwName string, s *vpnv1.WireGuardGatewaySettings, errs *errList) *WireGuardGateway {
	out := &WireGuardGateway{
		ListenPort: defaultWGListenPort,
		MTU:        defaultWGMTU,
		PrivateKey: SecretKeyRef{Name: gwName + defaultWGKeySuffix, Key: defaultWGKeyKey},
	}
	if s == nil {
		return out
	}
	switch {
	case s.ListenPort == 0:
	case s.ListenPort < 1 || s.ListenPort > 65535:
		errs.add(ReasonInvalidSpec, "spec.wireguard.listenPort", "port %d is not between 1 and 65535", s.ListenPort)
	default:
		out.ListenPort = uint16(s.ListenPort)
	}
	switch {
	case s.MTU == 0:
	case s.MTU < 1280 || s.MTU > 9000:
		errs.add(ReasonInvalidSpec, "spec.wireguard.mtu", "MTU %d is not between 1280 and 9000", s.MTU)
	default:
		out.MTU = s.MTU
	}
	if s.PrivateKeySecretRef != nil {
		out.PrivateKey = secretRef("spec.wireguard.privateKeySecretRef", *s.PrivateKeySecretRef, errs)
	}
	return out
}

func secretRef(field string, r vpnv1.SecretKeyRef, errs *errList) SecretKeyRef {
	if r.Name == "" {
		errs.add(ReasonInvalidSpec, field+".name", "secret name is empty")
	}
	if r.Key == "" {
		errs.add(ReasonInvalidSpec, field+".key", "secret key is empty")
	}
	return SecretKeyRef{Name: r.Name, Key: r.Key}
}

// buildExposures validates exposures and reverse exposures (everything but virtual IPs).
// It reports whether their names are usable as keys (non-empty and distinct across both lists).
func buildExposures(gw *vpnv1.VPNGateway, services map[string]ServiceTarget, out *Gateway, errs *errList) bool {
	namesOK := true
	seen := make(map[string]string) // name -> field of its first use
	checkName := func(field, name string) {
		if name == "" {
			errs.add(ReasonInvalidSpec, field, "name is empty")
			namesOK = false
			return
		}
		if first, dup := seen[name]; dup {
			errs.add(ReasonInvalidSpec, field, "name %q is already used by %s; exposure and reverse exposure names must be distinct", name, first)
			namesOK = false
			return
		}
		seen[name] = field
	}

	for i, e := range gw.Spec.Exposures {
		f := fmt.Sprintf("spec.exposures[%d]", i)
		checkName(f+".name", e.Name)
		x := Exposure{Name: e.Name}
		t := e.Target
		var serviceTarget *ServiceTarget
		switch {
		case t.Address != "" && t.Service != nil:
			errs.add(ReasonInvalidSpec, f+".target", "exactly one of address or service must be set, not both")
		case t.Address != "":
			x.Target = parseTarget(f+".target.address", t.Address, errs)
		case t.Service != nil:
			x.TargetService = t.Service.Name
			field := f + ".target.service.name"
			if t.Service.Name == "" {
				errs.add(ReasonInvalidSpec, field, "service name is empty")
				break
			}
			st, found := services[t.Service.Name]
			a := st.Address
			switch {
			case !found:
				errs.add(ReasonTargetServiceNotFound, field, "service %q not found in namespace %q", t.Service.Name, gw.Namespace)
			case st.Endpoint && (!a.IsValid() || !a.Is4() || a.IsUnspecified()):
				errs.add(ReasonTargetServiceNoEndpoints, field, "service %q has no ready IPv4 endpoint (a host-network gateway sends to an endpoint: kube-proxy cannot translate a ClusterIP in the node's own network namespace)", t.Service.Name)
			case !a.IsValid() || !a.Is4() || a.IsUnspecified():
				errs.add(ReasonTargetServiceNoAddress, field, "service %q has no IPv4 ClusterIP", t.Service.Name)
			default:
				x.Target = a
				serviceTarget = &st
			}
		default:
			errs.add(ReasonInvalidSpec, f+".target", "exactly one of address or service must be set")
		}
		x.Ports = buildPorts(f+".target.ports", t.Ports, errs)
		if serviceTarget != nil {
			mapServicePorts(f+".target.ports", t.Service.Name, x.Ports, *serviceTarget, errs)
		}
		out.Exposures = append(out.Exposures, x)
	}

	nextGatewayPort := uint16(ReverseGatewayPortBase)
	for i, r := range gw.Spec.ReverseExposures {
		f := fmt.Sprintf("spec.reverseExposures[%d]", i)
		checkName(f+".name", r.Name)
		ports := buildPorts(f+".target.ports", r.Target.Ports, errs)
		for j := range ports {
			ports[j].GatewayPort = nextGatewayPort
			nextGatewayPort++
		}
		out.ReverseExposures = append(out.ReverseExposures, ReverseExposure{
			Name:   r.Name,
			Target: parseTarget(f+".target.address", r.Target.Address, errs),
			Ports:  ports,
		})
	}
	return namesOK
}

// parseTarget parses a target address: a unicast IPv4 address.
func parseTarget(field, s string, errs *errList) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		errs.add(ReasonInvalidSpec, field, "%q is not a unicast IPv4 address", s)
		return netip.Addr{}
	}
	return a
}

// checkTargets refuses exposure targets (as resolved) the cluster did not offer: reserved
// addresses (loopback, link-local — cloud metadata —, multicast, unspecified, broadcast), a
// node's own address, this or another gateway's service CIDR, and anything outside the
// admin's allowed target ranges when those are set.
func checkTargets(in Input, out *Gateway, cidrOK bool, errs *errList) {
	for i, x := range out.Exposures {
		a := x.Target
		if !a.IsValid() {
			continue // already an error
		}
		field := fmt.Sprintf("spec.exposures[%d].target.address", i)
		what := a.String()
		if x.TargetService != "" {
			field = fmt.Sprintf("spec.exposures[%d].target.service.name", i)
			what = fmt.Sprintf("%s (service %q)", a, x.TargetService)
		}
		if reason, detail := targetRefusal(a, in, out, cidrOK); reason != "" {
			errs.add(reason, field, "target %s %s", what, detail)
		}
	}
}

// targetRefusal says why an exposure target is refused, or "" when it is allowed.
func targetRefusal(a netip.Addr, in Input, out *Gateway, cidrOK bool) (reason, detail string) {
	switch {
	case reservedTarget(a):
		return ReasonTargetReserved, "is a loopback, link-local, multicast, unspecified or broadcast address"
	case slices.Contains(in.NodeAddresses, a):
		return ReasonTargetIsNodeAddress, "is the address of a cluster node"
	case cidrOK && out.ServiceCIDR.Contains(a):
		return ReasonTargetInServiceCIDR, fmt.Sprintf("lies in the gateway's own service CIDR %s", out.ServiceCIDR)
	}
	for _, o := range in.OtherServiceCIDRs {
		if o.CIDR.IsValid() && o.CIDR.Contains(a) {
			return ReasonTargetInServiceCIDR, fmt.Sprintf("lies in the service CIDR %s of gateway %s", o.CIDR, o.Gateway)
		}
	}
	if allowed := in.Config.AllowedTargetCIDRs; len(allowed) > 0 && !slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(a) }) &&
		!slices.ContainsFunc(out.Routes, func(r Route) bool { return r.CIDR.Contains(a) }) {
		return ReasonTargetNotAllowed, fmt.Sprintf("is outside the allowed target ranges %s set by the cluster admin", joinPrefixes(allowed))
	}
	return "", ""
}

// mapServicePorts checks that the Service serves every target port and, when the traffic goes
// to an endpoint, replaces each target port with the endpoint's.
func mapServicePorts(field, service string, ports []Port, st ServiceTarget, errs *errList) {
	for j := range ports {
		sp := ServicePort{Protocol: ports[j].Protocol, Port: ports[j].TargetPort}
		to, ok := st.Ports[sp]
		if !ok {
			errs.add(ReasonTargetServicePortNotFound, fmt.Sprintf("%s[%d]", field, j), "service %q has no port %s/%d", service, sp.Protocol, sp.Port)
			continue
		}
		ports[j].TargetPort = to
	}
}

func buildPorts(field string, ps []intstr.IntOrString, errs *errList) []Port {
	if len(ps) == 0 {
		errs.add(ReasonInvalidSpec, field, "at least one port is required")
		return nil
	}
	out := make([]Port, 0, len(ps))
	seen := make(map[Port]int) // {protocol, port} -> index
	for i, v := range ps {
		f := fmt.Sprintf("%s[%d]", field, i)
		p, err := vpnv1.ParsePort(v)
		if err != nil {
			errs.add(ReasonInvalidSpec, f, "%v", err)
			continue
		}
		proto := strings.ToLower(string(p.Protocol))
		key := Port{Protocol: proto, Port: uint16(p.Port)}
		if first, dup := seen[key]; dup {
			errs.add(ReasonInvalidSpec, f, "%s port %d is already listed at index %d", proto, p.Port, first)
			continue
		}
		seen[key] = i
		out = append(out, Port{Protocol: proto, Port: uint16(p.Port), TargetPort: uint16(p.TargetPort)})
	}
	return out
}

// assignVirtualIPs assigns every exposure's and reverse exposure's virtual IP in one call, so
// they share the service CIDR's address space; the gateway's own address is reserved.
func assignVirtualIPs(gw *vpnv1.VPNGateway, out *Gateway, errs *errList) {
	previous := func(st []vpnv1.ExposureStatus) map[string]netip.Addr {
		m := make(map[string]netip.Addr, len(st))
		for _, s := range st {
			if a, err := netip.ParseAddr(s.VirtualIP); err == nil {
				m[s.Name] = a
			}
		}
		return m
	}
	prevExp := previous(gw.Status.Exposures)
	prevRev := previous(gw.Status.ReverseExposures)

	n := len(gw.Spec.Exposures) + len(gw.Spec.ReverseExposures)
	if n == 0 {
		return
	}
	reqs := make([]ipam.AddressRequest, 0, n)
	fields := make([]string, 0, n)
	index := make(map[string]int, n)
	skip := make(map[string]bool) // requests whose virtualIP did not parse (already an error)
	add := func(field, name, vip string, prev netip.Addr) {
		req := ipam.AddressRequest{Name: name, Previous: prev}
		if vip != "" {
			a, err := netip.ParseAddr(vip)
			if err != nil || !a.Is4() {
				errs.add(ReasonInvalidSpec, field, "%q is not an IPv4 address", vip)
				skip[name] = true
			} else {
				req.Requested = a
			}
		}
		index[name] = len(reqs)
		reqs = append(reqs, req)
		fields = append(fields, field)
	}
	for i, e := range gw.Spec.Exposures {
		add(fmt.Sprintf("spec.exposures[%d].virtualIP", i), e.Name, e.VirtualIP, prevExp[e.Name])
	}
	for i, r := range gw.Spec.ReverseExposures {
		add(fmt.Sprintf("spec.reverseExposures[%d].virtualIP", i), r.Name, r.VirtualIP, prevRev[r.Name])
	}

	addrs, aerrs := ipam.AssignAddresses(out.ServiceCIDR, []netip.Addr{out.LocalAddress}, reqs)

	failed := make(map[string]bool, len(aerrs))
	slices.SortStableFunc(aerrs, func(a, b ipam.AddressError) int {
		return indexOf(index, a.Name) - indexOf(index, b.Name)
	})
	for _, ae := range aerrs {
		failed[ae.Name] = true
		if skip[ae.Name] {
			continue
		}
		field := "spec.serviceCIDR"
		if i, ok := index[ae.Name]; ok {
			field = fields[i]
		}
		var reason string
		switch ae.Reason {
		case "OutsideCIDR":
			reason = ReasonVirtualIPOutsideCIDR
		case "Conflict", "Reserved":
			reason = ReasonVirtualIPConflict
		case "Exhausted":
			reason = ReasonServiceCIDRExhausted
		default:
			reason = ReasonInvalidSpec
		}
		errs.add(reason, field, "%s", ae.Detail)
	}

	for i, req := range reqs {
		a, ok := addrs[req.Name]
		if failed[req.Name] || skip[req.Name] {
			continue
		}
		if !ok || !out.ServiceCIDR.Contains(a) {
			errs.add(ReasonServiceCIDRExhausted, fields[i], "no virtual IP could be assigned in %s", out.ServiceCIDR)
			continue
		}
		if i < len(gw.Spec.Exposures) {
			out.Exposures[i].VirtualIP = a
		} else {
			out.ReverseExposures[i-len(gw.Spec.Exposures)].VirtualIP = a
		}
	}
}

func indexOf(index map[string]int, name string) int {
	if i, ok := index[name]; ok {
		return i
	}
	return len(index)
}

// buildPeers validates every peer and fills its decision and grants, sorted by name.
func buildPeers(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, verdicts map[string]verdict, out *Gateway, errs *errList) {
	ordered := make([]*vpnv1.VPNPeer, len(peers))
	for i := range peers {
		ordered[i] = &peers[i]
	}
	slices.SortStableFunc(ordered, func(a, b *vpnv1.VPNPeer) int { return strings.Compare(a.Name, b.Name) })

	allExp := uniqueSorted(exposureNames(gw))
	allRev := uniqueSorted(reverseExposureNames(gw))

	out.Peers = slices.Grow(out.Peers, len(ordered))
	for i, p := range ordered {
		pf := "peers[" + p.Name + "]"
		if p.Name == "" {
			errs.add(ReasonInvalidSpec, "peers", "a peer has no name")
			continue
		}
		if i > 0 && ordered[i-1].Name == p.Name {
			errs.add(ReasonInvalidSpec, pf, "peer %q is listed more than once", p.Name)
			continue
		}
		v := verdicts[p.Name]
		mp := Peer{
			Name:          p.Name,
			UID:           p.UID,
			Generation:    p.Generation,
			Authorization: v.Decision,
		}
		if s := p.Spec.IPsec; s != nil {
			f := pf + ".spec.ipsec"
			ip := &IPsecPeer{
				RemoteAddress: s.Peer.Address,
				RemoteID:      s.Peer.ID,
				ESPProposals:  slices.Clone(defaultESPProposals),
				RekeyTime:     defaultESPRekeyTime,
				PSK:           secretRef(f+".pskSecretRef", s.PSKSecretRef, errs),
			}
			if s.Peer.Address == "" || strings.ContainsAny(s.Peer.Address, " \t\r\n,;{}\"'#") {
				errs.add(ReasonInvalidSpec, f+".peer.address", "%q is not an IP address, DNS name or %%any", s.Peer.Address)
			}
			if ip.RemoteID == "" {
				ip.RemoteID = s.Peer.Address
			}
			if len(s.ESP.Proposals) > 0 {
				ip.ESPProposals = slices.Clone(s.ESP.Proposals)
				checkProposals(f+".esp.proposals", s.ESP.Proposals, errs)
			}
			if s.ESP.RekeyTime != nil {
				ip.RekeyTime = nonNegative(f+".esp.rekeyTime", s.ESP.RekeyTime.Duration, errs)
			}
			if s.IKE != nil && out.IPsec != nil {
				ike := buildIKE(f+".ike", out.IPsec.IKESettings(), ikeFields{version: s.IKE.Version, proposals: s.IKE.Proposals,
					dpd: s.IKE.DPD, rekey: s.IKE.RekeyTime, reauth: s.IKE.ReauthTime}, errs)
				ip.IKE = &ike
			}
			checkSubnets(f+".remoteSubnets", s.RemoteSubnets, errs)
			mp.IPsec = ip
		}
		if s := p.Spec.WireGuard; s != nil {
			f := pf + ".spec.wireguard"
			wg := &WireGuardPeer{PublicKey: s.PublicKey, Endpoint: s.Endpoint}
			if k, err := base64.StdEncoding.DecodeString(s.PublicKey); err != nil || len(k) != 32 {
				errs.add(ReasonInvalidSpec, f+".publicKey", "not a base64-encoded 32-byte WireGuard key")
			}
			if s.PresharedKeySecretRef != nil {
				r := secretRef(f+".presharedKeySecretRef", *s.PresharedKeySecretRef, errs)
				wg.PresharedKey = &r
			}
			if s.PersistentKeepalive != nil {
				if k := *s.PersistentKeepalive; k < 0 || k > 65535 {
					errs.add(ReasonInvalidSpec, f+".persistentKeepalive", "%d is not between 0 and 65535", k)
				} else {
					wg.PersistentKeepalive = uint16(k)
				}
			}
			checkSubnets(f+".subnets", s.Subnets, errs)
			mp.WireGuard = wg
		}
		mp.SourceCIDRs = slices.Clone(v.tunnel)
		mp.WithheldCIDRs = slices.Clone(v.withheld)

		if d := mp.Authorization; d.Authorized {
			if d.Reason == ReasonDefaultAllow {
				mp.Exposures = slices.Clone(allExp)
				mp.ReverseExposures = slices.Clone(allRev)
			} else if a := p.Spec.Authorization; a != nil {
				mp.Exposures = uniqueSorted(a.Exposures)
				mp.ReverseExposures = uniqueSorted(a.ReverseExposures)
			}
		}
		out.Peers = append(out.Peers, mp)
	}
}

// checkSubnets requires at least one subnet and every one an IPv4 network address.
func checkSubnets(field string, subnets []string, errs *errList) {
	if len(subnets) == 0 {
		errs.add(ReasonInvalidSpec, field, "at least one subnet is required")
	}
	for i, s := range subnets {
		// The field's name is made only for an error: 10,000 peers pass through here.
		f := func() string { return field + "[" + strconv.Itoa(i) + "]" }
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil || !p.Addr().Is4():
			errs.add(ReasonInvalidSpec, f(), "%q is not an IPv4 CIDR", s)
		case p.Masked() != p:
			errs.add(ReasonInvalidSpec, f(), "%q is not a network address (host bits set)", s)
		}
	}
}

// fillGrantees sets every exposure's GrantedTo and every reverse exposure's Grantee from the
// authorized peers (Peers are sorted by name, so GrantedTo is too).
func fillGrantees(out *Gateway) {
	expIdx := make(map[string]int, len(out.Exposures))
	for i, e := range out.Exposures {
		expIdx[e.Name] = i
	}
	revIdx := make(map[string]int, len(out.ReverseExposures))
	for i, r := range out.ReverseExposures {
		revIdx[r.Name] = i
	}
	for _, p := range out.Peers {
		if !p.Authorization.Authorized {
			continue
		}
		for _, n := range p.Exposures {
			if i, ok := expIdx[n]; ok {
				out.Exposures[i].GrantedTo = append(out.Exposures[i].GrantedTo, p.Name)
			}
		}
		for _, n := range p.ReverseExposures {
			// Authorize leaves at most one authorized holder whose subnets contain the target;
			// should there ever be more, the first by name is the grantee.
			if i, ok := revIdx[n]; ok && out.ReverseExposures[i].Grantee == "" {
				out.ReverseExposures[i].Grantee = p.Name
			}
		}
	}
}

// reverseClients are the valid IPv4 addresses among addrs that lie inside one of the internal
// source CIDRs, sorted and unique.
func reverseClients(addrs []netip.Addr, internal []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() && !a.IsUnspecified() && slices.ContainsFunc(internal, func(c netip.Prefix) bool { return c.IsValid() && c.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
