package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// VPNGatewaySpec is one client's gateway: its protocol, public endpoint, service CIDR and
// what it exposes.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serviceCIDR) || (has(self.serviceCIDR) && self.serviceCIDR == oldSelf.serviceCIDR)",message="serviceCIDR cannot be changed or removed once set: clients configure it as their remote network",fieldPath=".serviceCIDR"
// +kubebuilder:validation:XValidation:rule="self.protocol != 'ipsec' || !has(self.wireguard)",message="wireguard settings are not allowed on an ipsec gateway",fieldPath=".wireguard"
// +kubebuilder:validation:XValidation:rule="self.protocol != 'wireguard' || !has(self.ipsec)",message="ipsec settings are not allowed on a wireguard gateway",fieldPath=".ipsec"
// +kubebuilder:validation:XValidation:rule="!has(self.exposures) || !has(self.reverseExposures) || self.exposures.all(e, self.reverseExposures.all(r, r.name != e.name))",message="exposure and reverse exposure names must be distinct",fieldPath=".reverseExposures"
// +kubebuilder:validation:XValidation:rule="!has(self.availability) || !has(self.availability.standby) || !self.availability.standby || !has(self.endpoint.hostNetwork) || has(self.endpoint.hostNetwork.nodes)",message="a host-network gateway with a standby needs endpoint.hostNetwork.nodes (the nodes its two pods may run on) and endpoint.hostNetwork.address (the VIP that moves to the active pod's node) instead of nodeName",fieldPath=".availability.standby"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint.hostNetwork) || !has(self.endpoint.hostNetwork.nodes) || (has(self.availability) && has(self.availability.standby) && self.availability.standby)",message="endpoint.hostNetwork.nodes is for a gateway with a standby: set availability.standby to true, or name one node with nodeName",fieldPath=".endpoint.hostNetwork.nodes"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint.hostNetwork) || !has(self.endpoint.hostNetwork.nodes) || self.protocol != 'wireguard'",message="a WireGuard gateway cannot move its address between nodes yet (the WireGuard device cannot bind to the VIP): use nodeName, or a loadBalancer endpoint for a standby",fieldPath=".endpoint.hostNetwork.nodes"
// +kubebuilder:validation:XValidation:rule="!has(self.availability) || !has(self.availability.standby) || !self.availability.standby || !(has(self.endpoint.floatingIP) || has(self.endpoint.floatingIPPool))",message="a floating-IP gateway cannot have a standby yet (the floating IP does not follow the active pod); use a loadBalancer endpoint",fieldPath=".availability.standby"
type VPNGatewaySpec struct {
	// Protocol of the gateway and all its peers. Immutable: switching protocol is delete and recreate.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="protocol is immutable; delete and recreate the gateway to change it"
	Protocol Protocol `json:"protocol"`

	// Mode: snat (default) hides the cluster behind the service CIDR; routed is not yet implemented.
	// +kubebuilder:default=snat
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// Endpoint is where the gateway's public address comes from.
	Endpoint Endpoint `json:"endpoint"`

	// ServiceCIDR is the client's view of us (its "remote network"). When empty the operator
	// allocates a /24 from its pool. Must lie in 100.64.0.0/10. Cannot change once set.
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="serviceCIDR must be an IPv4 CIDR such as 100.64.12.0/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="serviceCIDR must be a network address (no host bits set)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr('100.64.0.0/10').containsCIDR(self)",message="serviceCIDR must lie inside 100.64.0.0/10"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || (cidr(self).prefixLength() >= 16 && cidr(self).prefixLength() <= 28)",message="serviceCIDR prefix length must be between /16 and /28"
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// Exposures: internal targets a peer reaches through a virtual IP in the service CIDR.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Exposures []Exposure `json:"exposures,omitempty"`

	// ReverseExposures: targets inside one peer's subnets that internal services reach.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ReverseExposures []ReverseExposure `json:"reverseExposures,omitempty"`

	// ReverseExposureNamespaces selects namespaces, besides the gateway's own, whose pods may
	// reach the reverse exposures (through each one's <gateway>-<exposure> Service). Unset:
	// only pods of the gateway's own namespace. Enforced by the gateway's NetworkPolicy and by
	// its ruleset (which admits exactly those pods' addresses, inside the operator's
	// internalSourceCIDRs); host-network pods are never admitted.
	// +optional
	ReverseExposureNamespaces *metav1.LabelSelector `json:"reverseExposureNamespaces,omitempty"`

	// IPsec settings (protocol ipsec).
	// +optional
	IPsec *IPsecGatewaySettings `json:"ipsec,omitempty"`

	// WireGuard settings (protocol wireguard).
	// +optional
	WireGuard *WireGuardGatewaySettings `json:"wireguard,omitempty"`

	// Availability: how the gateway survives the loss of its pod.
	// +optional
	Availability *Availability `json:"availability,omitempty"`
}

// Availability is how a gateway survives the loss of its pod.
type Availability struct {
	// Standby runs a second, fully configured gateway pod on another node that takes over the
	// tunnels within about a second when the active pod fails, and when it is stopped (a
	// rollout, a drain). Unset: the operator's default (--gateway-standby). Needs a
	// loadBalancer endpoint, or a hostNetwork endpoint with nodes and address (the VIP that
	// moves to the active pod's node); a floating-IP gateway cannot have a standby yet.
	// +optional
	Standby *bool `json:"standby,omitempty"`
}

// Endpoint names exactly one source of the gateway's public address.
//
// +kubebuilder:validation:XValidation:rule="[has(self.floatingIPPool), has(self.floatingIP), has(self.loadBalancer), has(self.hostNetwork)].filter(x, x).size() == 1",message="exactly one of floatingIPPool, floatingIP, loadBalancer or hostNetwork must be set"
type Endpoint struct {
	// FloatingIPPool is an OpenStack external network (ID or name) to allocate a floating IP from.
	// It only ever reaches the OpenStack API as a value, never a configuration file.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[^\s"'\\]+$`
	// +optional
	FloatingIPPool string `json:"floatingIPPool,omitempty"`

	// FloatingIP is an existing OpenStack floating IP to adopt (the migration path). It is
	// disassociated but never released when the gateway is deleted.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="floatingIP must be an IPv4 address"
	// +optional
	FloatingIP string `json:"floatingIP,omitempty"`

	// LoadBalancer publishes the gateway through a Service of type LoadBalancer.
	// +optional
	LoadBalancer *LoadBalancerEndpoint `json:"loadBalancer,omitempty"`

	// HostNetwork runs the gateway pod in a node's network namespace.
	// +optional
	HostNetwork *HostNetworkEndpoint `json:"hostNetwork,omitempty"`
}

// LoadBalancerEndpoint configures the LoadBalancer Service.
type LoadBalancerEndpoint struct {
	// LoadBalancerClass passed to the Service.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	LoadBalancerClass string `json:"loadBalancerClass,omitempty"`
	// Annotations passed to the Service (cloud-specific load balancer settings).
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// HostNetworkEndpoint pins the gateway to a node and uses that node's address; or, for a
// gateway with a standby, runs its two pods on two of the given nodes, and the active pod's
// node holds address (a VIP on the node network) and announces it.
//
// +kubebuilder:validation:XValidation:rule="has(self.nodeName) || has(self.nodes)",message="nodeName is required (or nodes, for a gateway with a standby)",fieldPath=".nodeName"
// +kubebuilder:validation:XValidation:rule="!has(self.nodeName) || !has(self.nodes)",message="nodes and nodeName are exclusive: nodes for a gateway with a standby, nodeName for one pod",fieldPath=".nodes"
// +kubebuilder:validation:XValidation:rule="!has(self.nodes) || has(self.address)",message="a host-network gateway on several nodes needs address: the VIP, on the nodes' network, that the active pod's node holds",fieldPath=".address"
// +kubebuilder:validation:XValidation:rule="!has(self.nodes) || !has(self.address) || (isIP(self.address) && ip(self.address).family() == 4 && ip(self.address).isGlobalUnicast())",message="with nodes, address is a VIP: an IPv4 unicast address (announced by ARP)",fieldPath=".address"
type HostNetworkEndpoint struct {
	// NodeName of the node to run on. Required unless nodes is set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Nodes the pods of a gateway with a standby may run on (spec.availability.standby: true),
	// two of them at a time, never both on one node; instead of nodeName. The nodes must share
	// the network address is on.
	// +kubebuilder:validation:MinItems=2
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=set
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// Address is the public address peers connect to; defaults to the node's address. With
	// nodes it is required: the VIP the active pod's agent adds to its node's interface on
	// the address's network and announces (gratuitous ARP), and removes when it steps down;
	// the tunnels use it as their local address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP address"
	// +optional
	Address string `json:"address,omitempty"`
}

// Exposure makes an internal target reachable to peers at a virtual IP.
type Exposure struct {
	// Name of the exposure, referenced from peers' authorization blocks.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Target the peer's traffic is forwarded to.
	Target ExposureTarget `json:"target"`
	// VirtualIP in the service CIDR that peers connect to; allocated when empty.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="virtualIP must be an IPv4 address"
	// +optional
	VirtualIP string `json:"virtualIP,omitempty"`
}

// ExposureTarget is an address or a Service in the gateway's namespace, and its ports.
//
// +kubebuilder:validation:XValidation:rule="has(self.address) != has(self.service)",message="exactly one of address or service must be set"
type ExposureTarget struct {
	// Address of the target.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="address must be an IPv4 address"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || ip(self).isGlobalUnicast()",message="address must be a unicast address: not loopback, link-local (e.g. cloud metadata 169.254.169.254), multicast, unspecified or broadcast"
	// +optional
	Address string `json:"address,omitempty"`
	// Service in the gateway's namespace; the operator resolves its ClusterIP.
	// +optional
	Service *ServiceRef `json:"service,omitempty"`
	// Ports exposed: 443 (TCP), "514/udp", "8443:443" (port : target port),
	// "8443:443/tcp". Unique per protocol: a duplicate is ConfigValid=False naming it (a CEL rule
	// comparing every pair of int-or-string entries exceeds the API server's cost budget).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:XIntOrString
	// +kubebuilder:validation:items:MaxLength=16
	// +kubebuilder:validation:items:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.matches('^[0-9]{1,5}(:[0-9]{1,5})?(/(tcp|udp|TCP|UDP))?$') && self.split('/', 2)[0].split(':', 2).all(n, int(n) >= 1 && int(n) <= 65535))",message="ports must be port numbers (443) or strings \"port[:targetPort][/tcp|/udp]\" such as \"514/udp\" or \"8443:443/tcp\", each port between 1 and 65535"
	Ports []intstr.IntOrString `json:"ports"`
}

// ServiceRef names a Service in the same namespace.
type ServiceRef struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// ReverseExposure lets internal services reach a target inside one peer's subnets.
type ReverseExposure struct {
	// Name of the reverse exposure, referenced from peers' authorization blocks.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Target inside the granting peer's subnets.
	Target ReverseExposureTarget `json:"target"`
	// VirtualIP in the service CIDR that the traffic is source-NATed to; allocated when empty.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="virtualIP must be an IPv4 address"
	// +optional
	VirtualIP string `json:"virtualIP,omitempty"`
}

// ReverseExposureTarget is an address in a peer's subnets and its ports.
type ReverseExposureTarget struct {
	// Address of the target, inside the granting peer's subnets.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="address must be an IPv4 address"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).family() != 4 || ip(self).isGlobalUnicast()",message="address must be a unicast address: not loopback, link-local (e.g. cloud metadata 169.254.169.254), multicast, unspecified or broadcast"
	Address string `json:"address"`
	// Ports exposed: 443 (TCP), "514/udp", "8443:443" (port : target port),
	// "8443:443/tcp". Unique per protocol: a duplicate is ConfigValid=False naming it (a CEL rule
	// comparing every pair of int-or-string entries exceeds the API server's cost budget).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:XIntOrString
	// +kubebuilder:validation:items:MaxLength=16
	// +kubebuilder:validation:items:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.matches('^[0-9]{1,5}(:[0-9]{1,5})?(/(tcp|udp|TCP|UDP))?$') && self.split('/', 2)[0].split(':', 2).all(n, int(n) >= 1 && int(n) <= 65535))",message="ports must be port numbers (443) or strings \"port[:targetPort][/tcp|/udp]\" such as \"514/udp\" or \"8443:443/tcp\", each port between 1 and 65535"
	Ports []intstr.IntOrString `json:"ports"`
}

// IPsecGatewaySettings are the gateway-wide IKE settings.
type IPsecGatewaySettings struct {
	// IKE settings.
	// +optional
	IKE IKESettings `json:"ike,omitempty"`
	// LocalID is our IKE identity; defaults to the public address.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9@._:=,+/* -]+$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('*')",message="localID must not contain wildcards (*)"
	// +kubebuilder:validation:XValidation:rule="!self.lowerAscii().matches('^(ipv4|ipv6|ipv4net|ipv6net|ipv4range|ipv6range|asn1dn|asn1gn|xmppaddr|keyid|uri):')",message="localID must not use strongSwan's ipv4:, ipv6:, ipv4net:, ipv6net:, ipv4range:, ipv6range:, asn1dn:, asn1gn:, xmppaddr:, keyid: or uri: prefix: write an FQDN, user@domain, an address or a DN (the fqdn:, dns:, email:, rfc822: and userfqdn: prefixes may be used)"
	// +kubebuilder:validation:XValidation:rule="self.contains('=') || !self.contains('/')",message="localID names a subnet: outside a DN a '/' makes strongSwan read an address range, not one identity"
	// +kubebuilder:validation:XValidation:rule="self.contains('=') || self.contains('@') || !self.contains('-') || !isIP(self.split('-', 2)[0])",message="localID names an address range: an address followed by '-' is not one identity"
	// +optional
	LocalID string `json:"localID,omitempty"`
	// ForceEncapsulation UDP-encapsulates ESP (port 4500) even when no NAT is detected, for
	// paths that drop ESP (IP protocol 50): the gateway pretends to be behind a NAT, so both
	// ends send ESP in UDP.
	// +optional
	ForceEncapsulation bool `json:"forceEncapsulation,omitempty"`
	// MTU of the tunnels: TCP connections through them have their MSS clamped to MTU-40.
	// Default 1400 (a 1500-byte path carrying ESP in UDP); lower it for paths with a smaller
	// MTU (PPPoE: 1392).
	// +kubebuilder:validation:Minimum=1280
	// +kubebuilder:validation:Maximum=9000
	// +optional
	MTU int32 `json:"mtu,omitempty"`
}

// IKESettings are IKE SA parameters.
// +kubebuilder:validation:XValidation:rule="!has(self.dpd) || !has(self.dpd.timeout) || (has(self.version) && self.version == 1)",message="dpd.timeout applies to IKEv1 only: IKEv2 declares a peer dead when its retransmissions of a liveness check run out (about 165 s), not after a timeout",fieldPath=".dpd.timeout"
type IKESettings struct {
	// Version of IKE.
	// +kubebuilder:validation:Enum=1;2
	// +kubebuilder:default=2
	// +optional
	Version int32 `json:"version,omitempty"`
	// Proposals in strongSwan notation, e.g. aes256gcm16-prfsha256-ecp256.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]+(-[a-z0-9_]+)*$`
	// +optional
	Proposals []string `json:"proposals,omitempty"`
	// DPD is dead peer detection.
	// +optional
	DPD *DPDSettings `json:"dpd,omitempty"`
	// RekeyTime of the IKE SA.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') && duration(self) <= duration('8760h')",message="must be a non-negative duration such as 30s, 1h or 4h30m, at most 8760h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') || duration(self) == duration('0s') || duration(self) >= duration('10s')",message="must be 0 or at least 10s: charon counts lifetimes in whole seconds and derives its rekey margins (10 %) from them, which vanish below 10s"
	// +optional
	RekeyTime *metav1.Duration `json:"rekeyTime,omitempty"`
	// ReauthTime of the IKE SA (0 disables reauthentication).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') && duration(self) <= duration('8760h')",message="must be a non-negative duration such as 30s, 1h or 4h30m, at most 8760h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') || duration(self) == duration('0s') || duration(self) >= duration('10s')",message="must be 0 or at least 10s: charon counts lifetimes in whole seconds and derives its rekey margins (10 %) from them, which vanish below 10s"
	// +optional
	ReauthTime *metav1.Duration `json:"reauthTime,omitempty"`
}

// DPDSettings configure dead peer detection.
type DPDSettings struct {
	// Delay between liveness checks.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') && duration(self) <= duration('8760h')",message="must be a non-negative duration such as 30s, 1h or 4h30m, at most 8760h"
	// +optional
	Delay *metav1.Duration `json:"delay,omitempty"`
	// Timeout after which an IKEv1 peer that answered no liveness check is declared dead
	// (charon's dpd_timeout; unset: as long as an IKE message's retransmissions, about 165s).
	// IKEv1 only: IKEv2 declares a peer dead when its retransmissions run out.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') && duration(self) <= duration('8760h')",message="must be a non-negative duration such as 30s, 1h or 4h30m, at most 8760h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') || duration(self) >= duration('1s')",message="must be at least 1s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Action when the peer is dead.
	// +kubebuilder:validation:Enum=restart;clear;trap
	// +kubebuilder:default=restart
	// +optional
	Action string `json:"action,omitempty"`
}

// DefaultWireGuardListenPort is ListenPort's default (its +kubebuilder:default marker), for
// code that reads a spec the API server has not defaulted.
const DefaultWireGuardListenPort = 51820

// WireGuardGatewaySettings are the gateway's WireGuard device settings.
type WireGuardGatewaySettings struct {
	// ListenPort of the device.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=51820
	// +optional
	ListenPort int32 `json:"listenPort,omitempty"`
	// PrivateKeySecretRef holds the device's private key; generated when absent.
	// +optional
	PrivateKeySecretRef *SecretKeyRef `json:"privateKeySecretRef,omitempty"`
	// MTU of the device.
	// +kubebuilder:validation:Minimum=1280
	// +kubebuilder:validation:Maximum=9000
	// +optional
	MTU int32 `json:"mtu,omitempty"`
}

// VPNGatewayStatus is what the operator observed and assigned.
type VPNGatewayStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ServiceCIDR in force (allocated or taken from spec).
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// PublicAddress peers connect to.
	// +optional
	PublicAddress string `json:"publicAddress,omitempty"`
	// Exposures with their assigned virtual IPs.
	// +listType=map
	// +listMapKey=name
	// +optional
	Exposures []ExposureStatus `json:"exposures,omitempty"`
	// ReverseExposures with their assigned virtual IPs.
	// +listType=map
	// +listMapKey=name
	// +optional
	ReverseExposures []ExposureStatus `json:"reverseExposures,omitempty"`
	// WireGuardPublicKey is the gateway's public key, for the client's device (WireGuard).
	// +optional
	WireGuardPublicKey string `json:"wireguardPublicKey,omitempty"`
	// Peers referencing this gateway.
	// +optional
	Peers int32 `json:"peers,omitempty"`
	// AuthorizedPeers is how many peers hold a valid grant.
	// +optional
	AuthorizedPeers int32 `json:"authorizedPeers,omitempty"`
	// Availability of a gateway with a standby: which pod is active, which stand by, and the
	// last takeover. Unset for a gateway without a standby.
	// +optional
	Availability *AvailabilityStatus `json:"availability,omitempty"`
	// Conditions: Ready and its causes.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AvailabilityStatus is the state of a gateway with a standby.
type AvailabilityStatus struct {
	// ActivePod is the gateway pod carrying the tunnels (the holder of the gateway's Lease);
	// empty while none is.
	// +optional
	ActivePod string `json:"activePod,omitempty"`
	// StandbyPods are the gateway's other running pods, ready to take over.
	// +optional
	StandbyPods []string `json:"standbyPods,omitempty"`
	// LastTakeover is the last time a pod became active, as its agent reported it.
	// +optional
	LastTakeover *Takeover `json:"lastTakeover,omitempty"`
}

// Takeover reasons (Takeover.Reason).
const (
	TakeoverActiveGone      = "ActiveGone"
	TakeoverActiveUnhealthy = "ActiveUnhealthy"
	TakeoverHandedOver      = "HandedOver"
	TakeoverInitial         = "Initial"
)

// Takeover is one pod becoming the gateway's active pod.
type Takeover struct {
	// Time the pod became active.
	Time metav1.MicroTime `json:"time"`
	// From is the pod that was active before (empty for the first).
	// +optional
	From string `json:"from,omitempty"`
	// To is the pod that became active.
	To string `json:"to"`
	// Reason: ActiveGone (the active stopped answering and renewing), ActiveUnhealthy (its
	// dataplane failed), HandedOver (it stopped and handed over) or Initial (no pod was active).
	Reason string `json:"reason"`
	// OutageMillis is how long, as the new active measured it, no pod carried the tunnels.
	// +optional
	OutageMillis int64 `json:"outageMillis,omitempty"`
}

// ExposureStatus is an exposure's assigned address.
type ExposureStatus struct {
	Name      string `json:"name"`
	VirtualIP string `json:"virtualIP,omitempty"`
	// Service (reverse exposures) is the ClusterIP Service in the gateway's namespace that
	// in-cluster clients connect to: <gateway>-<exposure>.
	// +optional
	Service string `json:"service,omitempty"`
	// Ports (reverse exposures) are the Service's ports, as "5432/TCP".
	// +optional
	Ports []string `json:"ports,omitempty"`
}

// VPNGateway is one client's VPN gateway pod.
//
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 40 characters (children are named after it)"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.reverseExposures) || self.spec.reverseExposures.all(r, self.metadata.name.size() + r.name.size() <= 62)",message="gateway name plus reverse exposure name must fit a 63-character Service name",fieldPath=".spec.reverseExposures"

// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vpngw,categories=vpn
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocol`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Public-Address",type=string,JSONPath=`.status.publicAddress`
// +kubebuilder:printcolumn:name="Service-CIDR",type=string,JSONPath=`.status.serviceCIDR`
// +kubebuilder:printcolumn:name="Peers",type=integer,JSONPath=`.status.peers`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VPNGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VPNGatewaySpec   `json:"spec"`
	Status VPNGatewayStatus `json:"status,omitempty"`
}

// VPNGatewayList is a list of VPNGateways.
//
// +kubebuilder:object:root=true
type VPNGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VPNGateway `json:"items"`
}
