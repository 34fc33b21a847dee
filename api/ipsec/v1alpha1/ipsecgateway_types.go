package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// IPsecGatewaySpec is one client's gateway and all its tunnels. Every tunnel reaches every
// exposure; a reverse exposure goes to the tunnel whose subnets contain its target.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serviceCIDR) || (has(self.serviceCIDR) && self.serviceCIDR == oldSelf.serviceCIDR)",message="serviceCIDR cannot be changed or removed once set: clients configure it as their remote network",fieldPath=".serviceCIDR"
// +kubebuilder:validation:XValidation:rule="!has(self.exposures) || !has(self.reverseExposures) || self.exposures.all(e, self.reverseExposures.all(r, r.name != e.name))",message="exposure and reverse exposure names must be distinct",fieldPath=".reverseExposures"
// +kubebuilder:validation:XValidation:rule="!has(self.endpoint.hostNetwork) || !has(self.endpoint.hostNetwork.nodes)",message="an IPsecGateway has no standby: name its node with nodeName (a VPNGateway with a standby uses nodes)",fieldPath=".endpoint.hostNetwork.nodes"
type IPsecGatewaySpec struct {
	// Mode: snat (default); routed is not yet implemented.
	// +kubebuilder:default=snat
	// +optional
	Mode vpnv1.Mode `json:"mode,omitempty"`
	// Endpoint is where the gateway's public address comes from.
	Endpoint vpnv1.Endpoint `json:"endpoint"`
	// ServiceCIDR is the client's view of us; allocated from the operator's pool when empty.
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="serviceCIDR must be an IPv4 CIDR such as 100.64.12.0/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="serviceCIDR must be a network address (no host bits set)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr('100.64.0.0/10').containsCIDR(self)",message="serviceCIDR must lie inside 100.64.0.0/10"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || (cidr(self).prefixLength() >= 16 && cidr(self).prefixLength() <= 28)",message="serviceCIDR prefix length must be between /16 and /28"
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// Exposures: internal targets every tunnel reaches through a virtual IP.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Exposures []vpnv1.Exposure `json:"exposures,omitempty"`
	// ReverseExposures: targets inside one tunnel's subnets that internal services reach.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ReverseExposures []vpnv1.ReverseExposure `json:"reverseExposures,omitempty"`
	// IKE settings of every tunnel.
	// +optional
	IKE vpnv1.IKESettings `json:"ike,omitempty"`
	// Tunnels: the client's sites.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Tunnels []Tunnel `json:"tunnels"`
}

// Tunnel is one site of the client.
type Tunnel struct {
	// Name of the tunnel.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Peer is the remote device's address and identity.
	Peer vpnv1.IPsecRemote `json:"peer"`
	// RemoteSubnets behind the peer (its traffic selectors).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c).ip().family() == 4 && cidr(c) == cidr(c).masked())",message="remoteSubnets must be IPv4 network addresses in CIDR notation, e.g. 10.20.0.0/16"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || cidr(c).prefixLength() > 0)",message="remoteSubnets must not be or contain 0.0.0.0/0: a peer's subnets are its LAN, never the whole Internet"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || ['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].all(r, !cidr(r).containsCIDR(cidr(c)) && !cidr(c).containsCIDR(cidr(r))))",message="remoteSubnets must not cover 0.0.0.0/8, loopback (127.0.0.0/8), link-local (169.254.0.0/16), multicast (224.0.0.0/4) or reserved (240.0.0.0/4) addresses"
	// +listType=set
	RemoteSubnets []string `json:"remoteSubnets"`
	// ESP (CHILD SA) settings.
	// +optional
	ESP vpnv1.ESPSettings `json:"esp,omitempty"`
	// PSKSecretRef holds the pre-shared key.
	PSKSecretRef vpnv1.SecretKeyRef `json:"pskSecretRef"`
}

// IPsecGatewayStatus is what the operator observed and assigned, and the tunnels' state from
// the gateway's agent.
type IPsecGatewayStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// +optional
	PublicAddress string `json:"publicAddress,omitempty"`
	// +listType=map
	// +listMapKey=name
	// +optional
	Exposures []vpnv1.ExposureStatus `json:"exposures,omitempty"`
	// +listType=map
	// +listMapKey=name
	// +optional
	ReverseExposures []vpnv1.ExposureStatus `json:"reverseExposures,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// TunnelsUp is "<established>/<total>", for the printer column.
	// +optional
	TunnelsUp string `json:"tunnelsUp,omitempty"`
	// Tunnels' state, written by the gateway's agent.
	// +listType=map
	// +listMapKey=name
	// +optional
	Tunnels []TunnelStatus `json:"tunnels,omitempty"`
}

// TunnelStatus is one tunnel's live state.
type TunnelStatus struct {
	Name string `json:"name"`
	// State: Established, Connecting, Down.
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	EstablishedAt *metav1.Time `json:"establishedAt,omitempty"`
	// +optional
	BytesIn int64 `json:"bytesIn,omitempty"`
	// +optional
	BytesOut int64 `json:"bytesOut,omitempty"`
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// IPsecGateway is the legacy one-object form of a client's IPsec gateway (frozen).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ipsecgw,categories=vpn
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 40 characters (children are named after it)"
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Public-Address",type=string,JSONPath=`.status.publicAddress`
// +kubebuilder:printcolumn:name="Service-CIDR",type=string,JSONPath=`.status.serviceCIDR`
// +kubebuilder:printcolumn:name="Tunnels",type=string,JSONPath=`.status.tunnelsUp`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPsecGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPsecGatewaySpec   `json:"spec"`
	Status IPsecGatewayStatus `json:"status,omitempty"`
}

// IPsecGatewayList is a list of IPsecGateways.
//
// +kubebuilder:object:root=true
type IPsecGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPsecGateway `json:"items"`
}
