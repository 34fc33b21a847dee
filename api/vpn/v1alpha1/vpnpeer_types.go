package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VPNPeerSpec is one remote party of a gateway.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipsec) != has(self.wireguard)",message="exactly one of ipsec or wireguard must be set"
type VPNPeerSpec struct {
	// GatewayRef is the name of the VPNGateway in the same namespace. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="gatewayRef is immutable; delete and recreate the peer to move it"
	GatewayRef string `json:"gatewayRef"`

	// IPsec settings of the peer (gateway protocol ipsec).
	// +optional
	IPsec *IPsecPeer `json:"ipsec,omitempty"`

	// WireGuard settings of the peer (gateway protocol wireguard).
	// +optional
	WireGuard *WireGuardPeer `json:"wireguard,omitempty"`

	// Authorization names the exposures and reverse exposures this peer may reach. On a gateway
	// with one peer, leaving it out grants everything; with more peers, leaving it out grants nothing.
	// +optional
	Authorization *Authorization `json:"authorization,omitempty"`
}

// IPsecPeer is the remote IPsec device.
//
// +kubebuilder:validation:XValidation:rule="!has(self.ike) || !has(self.ike.version) || self.ike.version != 1 || self.peer.address != '%any'",message="IKE version 1 needs the peer's address, not %any: IKEv1 main mode picks the pre-shared key by the peer's address before it learns the peer's identity, so with %any one peer's key could be tried for another; give the address or use IKE version 2",fieldPath=".ike.version"
type IPsecPeer struct {
	// Peer is the remote device's address and identity.
	Peer IPsecRemote `json:"peer"`
	// RemoteSubnets behind the peer (its traffic selectors).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c).ip().family() == 4 && cidr(c) == cidr(c).masked())",message="remoteSubnets must be IPv4 network addresses in CIDR notation, e.g. 10.20.0.0/16"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || cidr(c).prefixLength() > 0)",message="remoteSubnets must not be or contain 0.0.0.0/0: a peer's subnets are its LAN, never the whole Internet"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || ['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].all(r, !cidr(r).containsCIDR(cidr(c)) && !cidr(c).containsCIDR(cidr(r))))",message="remoteSubnets must not cover 0.0.0.0/8, loopback (127.0.0.0/8), link-local (169.254.0.0/16), multicast (224.0.0.0/4) or reserved (240.0.0.0/4) addresses"
	// +listType=set
	RemoteSubnets []string `json:"remoteSubnets"`
	// IKE settings of this peer's IKE SA, each one that is set replacing the gateway's
	// (spec.ipsec.ike) for this peer alone: a client whose device needs another IKE version,
	// proposals, lifetimes or DPD than the gateway's other peers. A dpd block replaces the
	// gateway's whole (its action defaults to restart).
	// +optional
	IKE *PeerIKESettings `json:"ike,omitempty"`
	// ESP (CHILD SA) settings.
	// +optional
	ESP ESPSettings `json:"esp,omitempty"`
	// PSKSecretRef holds the pre-shared key.
	PSKSecretRef SecretKeyRef `json:"pskSecretRef"`
}

// IPsecRemote is the remote device's address and IKE identity.
//
// +kubebuilder:validation:XValidation:rule="self.address != '%any' || (has(self.id) && size(self.id) > 0)",message="id is required when address is %any: a pre-shared key must prove one specific identity",fieldPath=".id"
type IPsecRemote struct {
	// Address of the remote device: an IP, a DNS name, or %any for a peer behind dynamic addresses.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '%any' || isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="address must be an IP address, a DNS name or %any"
	Address string `json:"address"`
	// ID is the remote IKE identity (FQDN, IP, user@fqdn or a DN); defaults to the address.
	// Unique among the gateway's peers as strongSwan compares identities (type prefixes such as
	// fqdn: or email:, a leading @, case, DN spellings and IP notation folded); never a
	// wildcard, a subnet, a range or a key ID.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9@._:=,+/* -]+$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('*')",message="id must not contain wildcards (*): a pre-shared key must prove one specific identity"
	// +kubebuilder:validation:XValidation:rule="!self.lowerAscii().matches('^(ipv4|ipv6|ipv4net|ipv6net|ipv4range|ipv6range|asn1dn|asn1gn|xmppaddr|keyid|uri):')",message="id must not use strongSwan's ipv4:, ipv6:, ipv4net:, ipv6net:, ipv4range:, ipv6range:, asn1dn:, asn1gn:, xmppaddr:, keyid: or uri: prefix: write an FQDN, user@domain, an address or a DN (the fqdn:, dns:, email:, rfc822: and userfqdn: prefixes may be used)"
	// +kubebuilder:validation:XValidation:rule="self.contains('=') || !self.contains('/')",message="id names a subnet: outside a DN a '/' makes strongSwan read an address range, not one identity"
	// +kubebuilder:validation:XValidation:rule="self.contains('=') || self.contains('@') || !self.contains('-') || !isIP(self.split('-', 2)[0])",message="id names an address range: an address followed by '-' is not one identity"
	// +optional
	ID string `json:"id,omitempty"`
}

// PeerIKESettings are a peer's own IKE SA parameters; what is left out is the gateway's.
// +kubebuilder:validation:XValidation:rule="!has(self.dpd) || !has(self.dpd.timeout) || !has(self.version) || self.version == 1",message="dpd.timeout applies to IKEv1 only: IKEv2 declares a peer dead when its retransmissions of a liveness check run out (about 165 s), not after a timeout",fieldPath=".dpd.timeout"
type PeerIKESettings struct {
	// Version of IKE for this peer.
	// +kubebuilder:validation:Enum=1;2
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

// ESPSettings are CHILD SA parameters.
type ESPSettings struct {
	// Proposals in strongSwan notation, e.g. aes256gcm16-prfsha256-ecp256.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]+(-[a-z0-9_]+)*$`
	// +optional
	Proposals []string `json:"proposals,omitempty"`
	// RekeyTime of the CHILD SA.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') && duration(self) <= duration('8760h')",message="must be a non-negative duration such as 30s, 1h or 4h30m, at most 8760h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^(0|([0-9]{1,5}([.][0-9]{1,9})?(h|m|s|ms|us|µs|μs|ns)){1,3})$') || duration(self) == duration('0s') || duration(self) >= duration('10s')",message="must be 0 or at least 10s: charon counts lifetimes in whole seconds and derives its rekey margins (10 %) from them, which vanish below 10s"
	// +optional
	RekeyTime *metav1.Duration `json:"rekeyTime,omitempty"`
}

// WireGuardPeer is the remote WireGuard device.
type WireGuardPeer struct {
	// PublicKey of the peer, base64.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$`
	PublicKey string `json:"publicKey"`
	// Endpoint host:port of the peer, when it has a fixed address.
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+:[0-9]{1,5}$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z0-9.-]+:[0-9]{1,5}$') || (int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535)",message="endpoint port must be between 1 and 65535"
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// Subnets behind the peer (its allowed IPs).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c).ip().family() == 4 && cidr(c) == cidr(c).masked())",message="subnets must be IPv4 network addresses in CIDR notation, e.g. 10.20.0.0/16"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || cidr(c).prefixLength() > 0)",message="subnets must not be or contain 0.0.0.0/0: a peer's subnets are its LAN, never the whole Internet"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || ['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].all(r, !cidr(r).containsCIDR(cidr(c)) && !cidr(c).containsCIDR(cidr(r))))",message="subnets must not cover 0.0.0.0/8, loopback (127.0.0.0/8), link-local (169.254.0.0/16), multicast (224.0.0.0/4) or reserved (240.0.0.0/4) addresses"
	// +listType=set
	Subnets []string `json:"subnets"`
	// PresharedKeySecretRef holds an optional preshared key.
	// +optional
	PresharedKeySecretRef *SecretKeyRef `json:"presharedKeySecretRef,omitempty"`
	// PersistentKeepalive interval in seconds (0 disables).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	PersistentKeepalive *int32 `json:"persistentKeepalive,omitempty"`
}

// Authorization is what one peer may reach. Names must exist on the gateway.
type Authorization struct {
	// Exposures (by name) the peer may reach.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Exposures []string `json:"exposures,omitempty"`
	// ReverseExposures (by name) that internal services may use to reach into this peer.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ReverseExposures []string `json:"reverseExposures,omitempty"`
}

// VPNPeerStatus is the peer's authorization (from the operator) and tunnel (from the agent).
type VPNPeerStatus struct {
	// ObservedGeneration is the spec generation the Authorized condition describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Authorized (operator) and Connected (gateway agent).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Tunnel counters and times, from the gateway agent.
	// +optional
	Tunnel *TunnelStatus `json:"tunnel,omitempty"`
}

// TunnelStatus is the live state of a peer's tunnel.
type TunnelStatus struct {
	// EstablishedAt is when the current SA or session came up.
	// +optional
	EstablishedAt *metav1.Time `json:"establishedAt,omitempty"`
	// LastHandshake (WireGuard).
	// +optional
	LastHandshake *metav1.Time `json:"lastHandshake,omitempty"`
	// Endpoint is the address and port the peer's tunnel last came from, as the gateway saw it
	// (WireGuard: the source of its last authenticated packet). A gateway pod that starts
	// afresh sends the peer a handshake there at once instead of waiting for the peer to
	// retry. Public information, written by the gateway agent only.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// +optional
	BytesIn int64 `json:"bytesIn,omitempty"`
	// +optional
	BytesOut int64 `json:"bytesOut,omitempty"`
	// +optional
	PacketsIn int64 `json:"packetsIn,omitempty"`
	// +optional
	PacketsOut int64 `json:"packetsOut,omitempty"`
	// Rekeys of the peer's SAs (CHILD_SA and IKE_SA rekeys, reauthentications) the gateway pod
	// counted since it started (IPsec).
	// +optional
	Rekeys int64 `json:"rekeys,omitempty"`
}

// VPNPeer is one remote party of a VPNGateway.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vpnpeer,categories=vpn
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters"
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gatewayRef`
// +kubebuilder:printcolumn:name="Authorized",type=string,JSONPath=`.status.conditions[?(@.type=="Authorized")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Authorized")].reason`
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="Connected")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VPNPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VPNPeerSpec   `json:"spec"`
	Status VPNPeerStatus `json:"status,omitempty"`
}

// VPNPeerList is a list of VPNPeers.
//
// +kubebuilder:object:root=true
type VPNPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VPNPeer `json:"items"`
}
