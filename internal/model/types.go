// Package model turns a VPNGateway, its VPNPeers and the operator's configuration into one
// validated, protocol-neutral model of a gateway: addresses, exposures, peers and exactly who
// may reach what. It is pure (no I/O) and is the only place that decides validity and
// authorization; reconcilers, renderers and the gateway agent all consume its output.
package model

import (
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config is the part of the operator's configuration the model depends on.
type Config struct {
	// PoolCIDR is where service CIDRs are allocated from (inside 100.64.0.0/10).
	PoolCIDR netip.Prefix
	// InternalSourceCIDRs may initiate toward reverse exposures (the pod CIDR; the gateway model
	// adds every ready ClusterLink's ranges).
	InternalSourceCIDRs []netip.Prefix
	// ClusterPodCIDRs, ClusterServiceCIDRs and NodeCIDRs are the cluster's own ranges: no
	// peer's subnets may overlap them (a tunnel would capture the cluster's traffic).
	ClusterPodCIDRs     []netip.Prefix
	ClusterServiceCIDRs []netip.Prefix
	NodeCIDRs           []netip.Prefix
	// AllowedTargetCIDRs, when set, are the only ranges exposure targets may lie in (the
	// cluster admin's allow-list); empty allows every range not otherwise refused.
	AllowedTargetCIDRs []netip.Prefix
	// Standby is the install's default for a VPNGateway's spec.availability.standby
	// (--gateway-standby): whether gateways that leave it unset run a standby pod.
	Standby bool
}

// CGNATRange is the only range service CIDRs and the pool may come from.
var CGNATRange = netip.MustParsePrefix("100.64.0.0/10")

// DefaultPoolCIDR is the operator's default service-CIDR pool.
var DefaultPoolCIDR = netip.MustParsePrefix("100.64.0.0/16")

// Protocol and Mode mirror the API's values.
type Protocol string
type Mode string

const (
	ProtocolIPsec     Protocol = "ipsec"
	ProtocolWireGuard Protocol = "wireguard"
	ModeSNAT          Mode     = "snat"
	ModeRouted        Mode     = "routed"
)

// EndpointKind is where the public address comes from.
type EndpointKind string

const (
	EndpointFloatingIPPool EndpointKind = "floatingIPPool"
	EndpointFloatingIP     EndpointKind = "floatingIP"
	EndpointLoadBalancer   EndpointKind = "loadBalancer"
	EndpointHostNetwork    EndpointKind = "hostNetwork"
)

// Endpoint is the validated public endpoint.
type Endpoint struct {
	Kind EndpointKind `json:"kind"`
	// FloatingIPPool: external network; FloatingIP: the pinned address.
	FloatingIPPool string     `json:"floatingIPPool,omitempty"`
	FloatingIP     netip.Addr `json:"floatingIP,omitzero"`
	// LoadBalancer settings.
	LoadBalancerClass string            `json:"loadBalancerClass,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	// HostNetwork settings: the node (NodeName), or the nodes a gateway with a standby may
	// run on (NodeNames, at least two), and the public address (with NodeNames: the VIP
	// the active pod's agent holds on its node, see MovingAddress).
	NodeName    string     `json:"nodeName,omitempty"`
	NodeNames   []string   `json:"nodeNames,omitempty"`
	HostAddress netip.Addr `json:"hostAddress,omitzero"`
}

// MovingAddress reports whether the endpoint's public address is a VIP on the node network
// that moves with the active pod: a host-network endpoint on several nodes.
func (e Endpoint) MovingAddress() bool {
	return e.Kind == EndpointHostNetwork && len(e.NodeNames) > 0 && e.HostAddress.IsValid()
}

// Uplink is the gateway pod's second NIC (an OpenStack port attached through Multus): the
// tunnels are bound to its address (charon's local_addrs) and every packet from that address
// leaves through it, toward Gateway (source-based policy routing), not through the pod's
// default route — the cloud's router translates the floating IP to this address only.
type Uplink struct {
	// Interface is the NIC's name in the pod ("net1").
	Interface string `json:"interface"`
	// Address is the port's fixed IP with its subnet's prefix length.
	Address netip.Prefix `json:"address"`
	// Gateway is the subnet's gateway; invalid when it has none (on-link only).
	Gateway netip.Addr `json:"gateway,omitzero"`
}

// The uplink's policy routing in the gateway pod's namespace (an uplink never exists on the
// host network): packets from the uplink's address, and packets carrying UplinkMark (the
// WireGuard device's own, whatever their source), look up UplinkTable (rules at priority
// UplinkRulePriority, before the main table), which routes them out of the uplink.
const (
	UplinkTable        = 2150
	UplinkRulePriority = 2150
	UplinkMark         = 0x62760003
)

// KindIPsecGateway is Gateway.Kind of a gateway declared by the legacy ipsec.bnerd.net
// IPsecGateway (translated into the unified API); an empty Kind is a VPNGateway.
const KindIPsecGateway = "IPsecGateway"

// Gateway is one validated gateway with its peers.
type Gateway struct {
	// Kind of the custom resource declaring the gateway: empty for a VPNGateway,
	// KindIPsecGateway for a legacy IPsecGateway (its peers are its tunnels, with no VPNPeer
	// objects). Children names, owner and where tunnel state is reported follow it.
	Kind       string    `json:"kind,omitempty"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	Protocol   Protocol  `json:"protocol"`
	Mode       Mode      `json:"mode"`
	Endpoint   Endpoint  `json:"endpoint"`
	// PublicAddress peers connect to (empty until the endpoint has one).
	PublicAddress string `json:"publicAddress,omitempty"`
	// Uplink is the pod's second NIC carrying the tunnels (a cloud port), nil when the
	// tunnels use the pod's own interface.
	Uplink *Uplink `json:"uplink,omitempty"`
	// Standby: the gateway runs two pods, one active and one standby ready to take over
	// (StandbyOf).
	Standby bool `json:"standby,omitempty"`

	// ServiceCIDR is the client's view of us (IPsec local_ts in snat mode).
	ServiceCIDR netip.Prefix `json:"serviceCIDR"`
	// LocalAddress is the gateway's own address in the service CIDR (first host address):
	// the WireGuard device address, never handed out as a virtual IP.
	LocalAddress netip.Addr `json:"localAddress"`

	Exposures        []Exposure        `json:"exposures,omitempty"`
	ReverseExposures []ReverseExposure `json:"reverseExposures,omitempty"`

	// InternalSourceCIDRs may initiate toward reverse exposures: the operator's
	// internalSourceCIDRs and every ready ClusterLink's ranges.
	InternalSourceCIDRs []netip.Prefix `json:"internalSourceCIDRs,omitempty"`
	// Routes toward the ready ClusterLinks' ranges (next hop on the fabric), sorted by range.
	// Their ranges are internal sources as a whole (the service cluster's workloads), not
	// only through ReverseClients.
	Routes []Route `json:"routes,omitempty"`
	// ReverseClients are the addresses that may reach the reverse exposures: the pods of the
	// gateway's namespace and of ReverseClientNamespaces, host-network pods excluded, inside
	// InternalSourceCIDRs. Sorted, unique.
	ReverseClients []netip.Addr `json:"reverseClients,omitempty"`
	// ReverseClientNamespaces selects the namespaces, besides the gateway's own, whose pods
	// may reach the reverse exposures (spec.reverseExposureNamespaces); nil: none.
	ReverseClientNamespaces *metav1.LabelSelector `json:"reverseClientNamespaces,omitempty"`

	IPsec     *IPsecGateway     `json:"ipsec,omitempty"`
	WireGuard *WireGuardGateway `json:"wireguard,omitempty"`

	// Peers sorted by name; every peer referencing the gateway, dark or not.
	Peers []Peer `json:"peers,omitempty"`

	// Problems found that did not stop the build (a grant that could not be honoured, reverse
	// exposures without internal sources). Each names the objects involved.
	Problems []Problem `json:"problems,omitempty"`
}

// Port is one exposed port.
type Port struct {
	Protocol   string `json:"protocol"` // "tcp" or "udp"
	Port       uint16 `json:"port"`
	TargetPort uint16 `json:"targetPort"`
	// GatewayPort (reverse exposures only) is the gateway pod's port that internal clients'
	// traffic arrives on, through the exposure's ClusterIP Service; the gateway DNATs it to
	// Target:TargetPort. Assigned in spec order from ReverseGatewayPortBase.
	GatewayPort uint16 `json:"gatewayPort,omitempty"`
}

// ReverseGatewayPortBase is the first gateway pod port handed to reverse-exposure ports.
const ReverseGatewayPortBase = 20000

// Exposure: peers reach Target through VirtualIP.
type Exposure struct {
	Name      string     `json:"name"`
	VirtualIP netip.Addr `json:"virtualIP"`
	// Target is the resolved address (a Service's ClusterIP, or one of its endpoints for a
	// host-network gateway, when TargetService is set); Ports' TargetPort is the port there.
	Target        netip.Addr `json:"target"`
	TargetService string     `json:"targetService,omitempty"`
	Ports         []Port     `json:"ports"`
	// GrantedTo are the peers (by name, sorted) allowed to reach it.
	GrantedTo []string `json:"grantedTo,omitempty"`
}

// ServiceTarget is where the traffic of an exposure whose target is a Service goes, as the
// caller resolved it.
type ServiceTarget struct {
	// Address is the Service's ClusterIP; or, when Endpoint is set, one ready endpoint of it:
	// a host-network gateway DNATs in the node's own network namespace, where kube-proxy cannot
	// translate a ClusterIP a second time.
	Address  netip.Addr
	Endpoint bool
	// Ports maps each port of the Service to the port on Address: itself for the ClusterIP,
	// the endpoint's (target) port for an endpoint. An exposure port naming a Service port
	// missing here is an error (TargetServicePortNotFound).
	Ports map[ServicePort]uint16
}

// ServicePort is one port of a Service ("tcp" or "udp").
type ServicePort struct {
	Protocol string
	Port     uint16
}

// ReverseExposure: internal sources reach Target (inside Grantee's subnets), source-NATed to VirtualIP.
type ReverseExposure struct {
	Name      string     `json:"name"`
	VirtualIP netip.Addr `json:"virtualIP"`
	Target    netip.Addr `json:"target"`
	Ports     []Port     `json:"ports"`
	// Grantee is the single peer the reverse exposure reaches into; empty when nobody holds a
	// valid grant (then nothing is rendered for it).
	Grantee string `json:"grantee,omitempty"`
	// ServiceIP is the ClusterIP of the exposure's <gateway>-<exposure> Service, once it has
	// one. A host-network gateway translates it itself for clients on its own node: their
	// node's kube-proxy would translate it to the node's own address, after which no second
	// translation into the tunnel is possible.
	ServiceIP netip.Addr `json:"serviceIP,omitzero"`
}

// IPsecGateway holds gateway-wide IKE settings with defaults applied.
type IPsecGateway struct {
	IKEVersion   int32         `json:"ikeVersion"`
	IKEProposals []string      `json:"ikeProposals"`
	LocalID      string        `json:"localID,omitempty"`
	DPDDelay     time.Duration `json:"dpdDelay"`
	DPDAction    string        `json:"dpdAction"`
	// DPDTimeout is IKEv1's dead peer timeout (0: charon's default).
	DPDTimeout time.Duration `json:"dpdTimeout,omitempty"`
	RekeyTime  time.Duration `json:"rekeyTime"`
	ReauthTime time.Duration `json:"reauthTime"`
	// ForceEncap UDP-encapsulates ESP even without a NAT (spec.ipsec.forceEncapsulation).
	ForceEncap bool `json:"forceEncap,omitempty"`
	// TunnelMTU clamps the MSS of TCP through the tunnels to TunnelMTU-40; 0 means
	// DefaultIPsecMTU.
	TunnelMTU int32 `json:"tunnelMTU,omitempty"`
}

// IKE are an IKE SA's settings: the gateway's (IPsecGateway.IKESettings), or a peer's own
// (IPsecPeer.IKE).
type IKE struct {
	IKEVersion   int32         `json:"ikeVersion"`
	IKEProposals []string      `json:"ikeProposals"`
	DPDDelay     time.Duration `json:"dpdDelay"`
	DPDAction    string        `json:"dpdAction"`
	// DPDTimeout is IKEv1's dead peer timeout (0: charon's default).
	DPDTimeout time.Duration `json:"dpdTimeout,omitempty"`
	RekeyTime  time.Duration `json:"rekeyTime"`
	ReauthTime time.Duration `json:"reauthTime"`
}

// IKESettings are the gateway's IKE SA settings.
func (g *IPsecGateway) IKESettings() IKE {
	return IKE{IKEVersion: g.IKEVersion, IKEProposals: slices.Clone(g.IKEProposals), DPDDelay: g.DPDDelay,
		DPDAction: g.DPDAction, DPDTimeout: g.DPDTimeout, RekeyTime: g.RekeyTime, ReauthTime: g.ReauthTime}
}

// IKEFor is the IKE SA settings of peer p: its own, or the gateway's.
func (g *IPsecGateway) IKEFor(p *IPsecPeer) IKE {
	if p != nil && p.IKE != nil {
		return *p.IKE
	}
	return g.IKESettings()
}

// DefaultIPsecMTU is an IPsec gateway's tunnel MTU unless spec.ipsec.mtu says otherwise: a
// 1500-byte path carrying ESP in UDP.
const DefaultIPsecMTU = 1400

// MTU is the gateway's tunnel MTU (TunnelMTU or DefaultIPsecMTU).
func (g *IPsecGateway) MTU() int {
	if g == nil || g.TunnelMTU == 0 {
		return DefaultIPsecMTU
	}
	return int(g.TunnelMTU)
}

// WireGuardGateway holds device settings with defaults applied.
type WireGuardGateway struct {
	ListenPort uint16 `json:"listenPort"`
	MTU        int32  `json:"mtu"`
	// PrivateKey is where the device key lives (never the key itself).
	PrivateKey SecretKeyRef `json:"privateKey"`
}

// SecretKeyRef points at secret data; the model never holds secret values.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Peer is one remote party with its authorization decision.
type Peer struct {
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	// SourceCIDRs are the subnets the peer's tunnel carries (IPsec remote_ts / WireGuard
	// allowed IPs): across the peers of a gateway they are pairwise disjoint (one source, one
	// tunnel). Empty: the peer has no tunnel at all.
	SourceCIDRs []netip.Prefix `json:"sourceCIDRs"`
	// WithheldCIDRs are subnets the peer declared that no tunnel of it carries: they overlap
	// an older peer's, the gateway's service CIDR or the cluster's own ranges.
	WithheldCIDRs []netip.Prefix `json:"withheldCIDRs,omitempty"`
	// Authorization is the decision; when not Authorized the peer is dark and the grant lists are empty.
	Authorization Decision `json:"authorization"`
	// Exposures and ReverseExposures granted, by name, sorted (all of them under DefaultAllow).
	Exposures        []string `json:"exposures,omitempty"`
	ReverseExposures []string `json:"reverseExposures,omitempty"`

	IPsec     *IPsecPeer     `json:"ipsec,omitempty"`
	WireGuard *WireGuardPeer `json:"wireguard,omitempty"`
}

// IPsecPeer is the remote IPsec device, defaults applied.
type IPsecPeer struct {
	RemoteAddress string        `json:"remoteAddress"`
	RemoteID      string        `json:"remoteID"`
	ESPProposals  []string      `json:"espProposals"`
	RekeyTime     time.Duration `json:"rekeyTime"`
	PSK           SecretKeyRef  `json:"psk"`
	// IKE, when the peer sets any IKE setting of its own, are its IKE SA's settings: the
	// gateway's with the peer's in their place (IPsecGateway.IKEFor).
	IKE *IKE `json:"ike,omitempty"`
	// Reqid is the fixed reqid of the peer's CHILD_SAs in kernel-ESP mode (see FirstReqid):
	// the ruleset grants what arrives through an SA with this reqid only.
	Reqid uint32 `json:"reqid,omitempty"`
	// SubnetReqids, for a peer with more than one subnet, are the fixed reqids of its
	// per-subnet CHILD_SAs, one per Peer.SourceCIDRs entry in that order: a site that
	// negotiates one CHILD_SA per subnet (as FortiGate, PAN-OS and MikroTik do) gets each its
	// own reqid. SAs sharing a reqid are interchangeable to the kernel, which sends through the
	// newest, so one reqid for all of them would send every subnet's traffic through one
	// subnet's SA.
	SubnetReqids []uint32 `json:"subnetReqids,omitempty"`
}

// Reqids are all of the peer's reqids: Reqid, then SubnetReqids (none without a Reqid).
func (p *IPsecPeer) Reqids() []uint32 {
	if p == nil || p.Reqid == 0 {
		return nil
	}
	return append([]uint32{p.Reqid}, p.SubnetReqids...)
}

// WireGuardPeer is the remote WireGuard device.
type WireGuardPeer struct {
	PublicKey           string        `json:"publicKey"`
	Endpoint            string        `json:"endpoint,omitempty"`
	PresharedKey        *SecretKeyRef `json:"presharedKey,omitempty"`
	PersistentKeepalive uint16        `json:"persistentKeepalive,omitempty"`
}

// Decision is a peer's Authorized condition: Authorized true/false with reason and message.
type Decision struct {
	Authorized bool   `json:"authorized"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
}

// Reasons of the Authorized condition.
const (
	ReasonDefaultAllow     = "DefaultAllow"
	ReasonAuthorized       = "Authorized"
	ReasonNoGrants         = "NoGrants"
	ReasonUnknownGrant     = "UnknownGrant"
	ReasonProtocolMismatch = "ProtocolMismatch"
	ReasonGatewayNotFound  = "GatewayNotFound"
	// ReasonReverseExposureOutsideSubnets: the peer is granted a reverse exposure whose target
	// is not inside its own subnets (reverse exposures are single-grantee).
	ReasonReverseExposureOutsideSubnets = "ReverseExposureOutsideSubnets"
	// ReasonSubnetConflict: the peer's subnets overlap an older peer's on the same gateway.
	ReasonSubnetConflict = "SubnetConflict"
	// ReasonSubnetOverlapsServiceCIDR: a subnet of the peer overlaps the gateway's own service
	// CIDR (the client's view of us cannot also be the client's LAN).
	ReasonSubnetOverlapsServiceCIDR = "SubnetOverlapsServiceCIDR"
	// ReasonSubnetOverlapsClusterRange: a subnet of the peer overlaps one of the cluster's own
	// ranges the operator is told about (pod, service and node CIDRs, internal sources).
	ReasonSubnetOverlapsClusterRange = "SubnetOverlapsClusterRange"
	// ReasonDuplicateIdentity: the peer's IKE identity (or WireGuard public key) is an older
	// peer's or the gateway's own; a PSK proves one identity, so only the older one is kept.
	ReasonDuplicateIdentity = "DuplicateIdentity"
	// ReasonCredentialsRefused: a Secret the peer's tunnel would authenticate with is not fit
	// for it (a ServiceAccount token, a TLS key, registry credentials, ...): the gateway neither
	// reads it nor derives an AUTH payload from it; the peer gets no tunnel.
	ReasonCredentialsRefused = "CredentialsRefused"
	// ReasonInvalidIdentity: the peer's identity is a wildcard (refused at admission; kept
	// here for objects admitted before the rule).
	ReasonInvalidIdentity = "InvalidIdentity"
	// ReasonIKEv1AnyAddress: the peer's address is %any and its IKE version (its own or the
	// gateway's) is 1: IKEv1 main mode chooses the pre-shared key by the peer's address before
	// it knows the identity, so the key could not be bound to the peer; it gets no tunnel.
	ReasonIKEv1AnyAddress = "IKEv1AnyAddress"
	// ReasonDPDTimeoutNeedsIKEv1: the peer sets its own DPD timeout while its IKE version (its
	// own or the gateway's) is 2, which has none; it gets no tunnel rather than another
	// liveness check than the one it asked for.
	ReasonDPDTimeoutNeedsIKEv1 = "DPDTimeoutNeedsIKEv1"
)

// The exact messages of docs/design.md for the NoGrants outcomes.
const (
	MessageNoBlockMultiPeer = "multi-peer gateway (default-deny) and this peer has no authorization block"
	MessageEmptyBlock       = "authorization block is present but grants nothing"
)

// Problem is a gateway-level finding that did not stop the build.
type Problem struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// PeerPrefix is one subnet of one peer.
type PeerPrefix struct {
	Peer   string
	Prefix netip.Prefix
}

// FirstOverlap finds two subnets of different peers that overlap, in O(n log n): sorted by
// first address, a subnet overlaps an earlier one exactly when it starts before the furthest
// end seen so far.
func FirstOverlap(ps []PeerPrefix) (a, b PeerPrefix, found bool) {
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(x, y PeerPrefix) int { return comparePrefix(x.Prefix, y.Prefix) })
	var reach PeerPrefix // the subnet reaching furthest so far
	for i, p := range sorted {
		if i > 0 && p.Prefix.Addr().Compare(lastAddr(reach.Prefix)) <= 0 {
			if p.Peer != reach.Peer {
				return reach, p, true
			}
		}
		if i == 0 || lastAddr(p.Prefix).Compare(lastAddr(reach.Prefix)) > 0 {
			reach = p
		}
	}
	return PeerPrefix{}, PeerPrefix{}, false
}

// lastAddr is the last address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		a[i/8] |= 1 << (7 - i%8)
	}
	out := netip.AddrFrom16(a)
	if p.Addr().Is4() {
		return out.Unmap()
	}
	return out
}

// CredentialSecretTypes are the Secret types a peer's pre-shared key or a WireGuard key may be
// kept in: Opaque (also written as no type at all). Anything else — a ServiceAccount token,
// TLS or registry credentials — exists for another purpose, and a gateway that authenticated
// with it would hand a peer's author an offline oracle for it.
var CredentialSecretTypes = []string{"", "Opaque"}

// CredentialSecretAllowed reports whether a Secret of this type may hold tunnel credentials.
func CredentialSecretAllowed(secretType string) bool {
	return slices.Contains(CredentialSecretTypes, secretType)
}

// HasTunnel reports whether the peer has a tunnel at all (some subnet to carry).
func (p Peer) HasTunnel() bool { return len(p.SourceCIDRs) > 0 }

// Gateway problem reasons.
const (
	ReasonReverseExposureConflict = "ReverseExposureConflict"
	ReasonNoInternalSources       = "NoInternalSourceCIDRs"
	ReasonSubnetOverlap           = "PeerSubnetOverlap"
	ReasonIdentityConflict        = "PeerIdentityConflict"
)

// Error is why a gateway cannot be built at all: a field and a condition reason.
type Error struct {
	Reason string `json:"reason"`
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

func (e Error) Error() string { return e.Field + ": " + e.Detail }

// Reasons of gateway build errors (the ConfigValid condition).
const (
	ReasonInvalidSpec            = "InvalidSpec"
	ReasonModeNotImplemented     = "ModeNotImplemented"
	ReasonVirtualIPOutsideCIDR   = "VirtualIPOutsideServiceCIDR"
	ReasonVirtualIPConflict      = "VirtualIPConflict"
	ReasonServiceCIDRExhausted   = "ServiceCIDRExhausted"
	ReasonTargetServiceNotFound  = "TargetServiceNotFound"
	ReasonTargetServiceNoAddress = "TargetServiceHasNoClusterIP"
	// ReasonTargetServiceNoEndpoints: a host-network gateway's target Service has no ready
	// endpoint to send to.
	ReasonTargetServiceNoEndpoints = "TargetServiceHasNoEndpoints"
	// ReasonTargetServicePortNotFound: an exposure's target port is not a port of the Service.
	ReasonTargetServicePortNotFound = "TargetServicePortNotFound"
	// ReasonTargetReserved: a target (as resolved) is loopback, link-local, multicast,
	// unspecified or broadcast.
	ReasonTargetReserved = "TargetReserved"
	// ReasonTargetIsNodeAddress: a target is one of the cluster's nodes.
	ReasonTargetIsNodeAddress = "TargetIsNodeAddress"
	// ReasonTargetInServiceCIDR: a target lies in this or another gateway's service CIDR.
	ReasonTargetInServiceCIDR = "TargetInServiceCIDR"
	// ReasonTargetNotAllowed: a target lies outside the admin's allowed target ranges.
	ReasonTargetNotAllowed = "TargetNotAllowed"
)
