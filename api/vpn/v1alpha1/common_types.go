package v1alpha1

// Protocol is the tunnel protocol of a gateway and all its peers.
// +kubebuilder:validation:Enum=ipsec;wireguard
type Protocol string

const (
	ProtocolIPsec     Protocol = "ipsec"
	ProtocolWireGuard Protocol = "wireguard"
)

// Mode is how traffic between peers and the cluster is addressed.
// +kubebuilder:validation:Enum=snat;routed
type Mode string

const (
	// ModeSNAT: peers see only the gateway's service CIDR; traffic is NATed in the gateway pod.
	ModeSNAT Mode = "snat"
	// ModeRouted: no NAT; the cluster routes the peers' subnets to the gateway (not yet implemented).
	ModeRouted Mode = "routed"
)

// SecretKeyRef names one key of a Secret in the object's own namespace.
type SecretKeyRef struct {
	// Name of the Secret, in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key within the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// PortProtocol is the transport protocol of an exposed port.
// +kubebuilder:validation:Enum=TCP;UDP
type PortProtocol string

const (
	PortProtocolTCP PortProtocol = "TCP"
	PortProtocolUDP PortProtocol = "UDP"
)

// PortSpec is one port a peer (or an internal client) connects to.
type PortSpec struct {
	// Port the connecting side uses.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Protocol of the port.
	// +kubebuilder:default=TCP
	// +optional
	Protocol PortProtocol `json:"protocol,omitempty"`
	// TargetPort on the target; defaults to Port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	TargetPort int32 `json:"targetPort,omitempty"`
}

// Condition types and reasons shared by the API's consumers.
const (
	// ConditionReady summarises a gateway: True when every cause below is True.
	ConditionReady = "Ready"
	// ConditionConfigValid: the gateway and its peers form a valid model (addresses, grants).
	ConditionConfigValid = "ConfigValid"
	// ConditionAddressesAllocated: the service CIDR and every virtual IP are assigned.
	ConditionAddressesAllocated = "AddressesAllocated"
	// ConditionEndpointReady: the public endpoint exists and has an address.
	ConditionEndpointReady = "EndpointReady"
	// ConditionRendered: the gateway's children carry the current model.
	ConditionRendered = "Rendered"
	// ConditionGatewayAvailable: the gateway pod is running and ready.
	ConditionGatewayAvailable = "GatewayAvailable"

	// ConditionAuthorized is a peer's authorization decision.
	ConditionAuthorized = "Authorized"
	// ConditionConnected is a peer's tunnel state, written by the gateway agent.
	ConditionConnected = "Connected"
)
