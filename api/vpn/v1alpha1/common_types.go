package v1alpha1

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

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

// PortSpec is one port a peer (or an internal client) connects to, as ParsePort reads it from
// the API's int-or-string form (see Ports).
type PortSpec struct {
	// Port the connecting side uses.
	Port int32
	// Protocol of the port (TCP when empty).
	Protocol PortProtocol
	// TargetPort on the target; defaults to Port.
	TargetPort int32
}

// portPattern is the string form of a port: "port[:targetPort][/tcp|/udp]".
var portPattern = regexp.MustCompile(`^([0-9]{1,5})(?::([0-9]{1,5}))?(?:/(tcp|udp|TCP|UDP))?$`)

// ParsePort reads one entry of a ports list as users write it: 443 (TCP), "514/udp",
// "8443:443" (port : target port), "8443:443/tcp".
func ParsePort(v intstr.IntOrString) (PortSpec, error) {
	if v.Type == intstr.Int {
		if v.IntVal < 1 || v.IntVal > 65535 {
			return PortSpec{}, fmt.Errorf("port %d is not between 1 and 65535", v.IntVal)
		}
		return PortSpec{Port: v.IntVal, Protocol: PortProtocolTCP, TargetPort: v.IntVal}, nil
	}
	m := portPattern.FindStringSubmatch(v.StrVal)
	if m == nil {
		return PortSpec{}, fmt.Errorf("%q is not a port such as 443, \"514/udp\", \"8443:443\" or \"8443:443/tcp\"", v.StrVal)
	}
	port, _ := strconv.Atoi(m[1])
	target := port
	if m[2] != "" {
		target, _ = strconv.Atoi(m[2])
	}
	if port < 1 || port > 65535 || target < 1 || target > 65535 {
		return PortSpec{}, fmt.Errorf("%q: ports must be between 1 and 65535", v.StrVal)
	}
	proto := PortProtocolTCP
	if strings.EqualFold(m[3], "udp") {
		proto = PortProtocolUDP
	}
	return PortSpec{Port: int32(port), Protocol: proto, TargetPort: int32(target)}, nil
}

// Value is the port in the API's form: a number for a TCP port to the same target port,
// "port[:targetPort][/udp]" otherwise.
func (p PortSpec) Value() intstr.IntOrString {
	udp := strings.EqualFold(string(p.Protocol), string(PortProtocolUDP))
	if !udp && (p.TargetPort == 0 || p.TargetPort == p.Port) && (p.Protocol == "" || strings.EqualFold(string(p.Protocol), "tcp")) {
		return intstr.FromInt32(p.Port)
	}
	s := strconv.Itoa(int(p.Port))
	if p.TargetPort != 0 && p.TargetPort != p.Port {
		s += ":" + strconv.Itoa(int(p.TargetPort))
	}
	switch {
	case udp:
		s += "/udp"
	case p.Protocol != "" && !strings.EqualFold(string(p.Protocol), "tcp"):
		s += "/" + strings.ToLower(string(p.Protocol))
	}
	return intstr.FromString(s)
}

// Ports writes ports in the API's form (for code and tests that build objects).
func Ports(ps ...PortSpec) []intstr.IntOrString {
	out := make([]intstr.IntOrString, len(ps))
	for i, p := range ps {
		out[i] = p.Value()
	}
	return out
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
