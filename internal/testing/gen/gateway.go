package gen

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// DefaultFloatingIPPool is the endpoint of a VPNGateway built without an endpoint modifier.
const DefaultFloatingIPPool = "public"

// VPNGateway is an IPsec gateway with a floating IP from DefaultFloatingIPPool, no exposures
// and no settings of its own, changed by mods.
func VPNGateway(namespace, name string, mods ...GatewayMod) *vpnv1.VPNGateway {
	g := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{FloatingIPPool: DefaultFloatingIPPool},
		},
	}
	return VPNGatewayFrom(g, mods...)
}

// VPNGatewayFrom is a copy of g changed by mods (g stays as it is).
func VPNGatewayFrom(g *vpnv1.VPNGateway, mods ...GatewayMod) *vpnv1.VPNGateway {
	g = g.DeepCopy()
	for _, m := range mods {
		m.applyToGateway(g)
	}
	return g
}

// Protocol sets spec.protocol alone (a gateway's settings for the other protocol stay: the
// API server refuses that).
func Protocol(p vpnv1.Protocol) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { g.Spec.Protocol = p }
}

// Standby sets spec.availability.standby (the API server accepts true with a loadBalancer
// endpoint only).
func Standby(on bool) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { g.Spec.Availability = &vpnv1.Availability{Standby: &on} }
}

// The endpoint modifiers set spec.endpoint to the one kind they name.

// FloatingIPPool: a floating IP allocated from pool.
func FloatingIPPool(pool string) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { g.Spec.Endpoint = vpnv1.Endpoint{FloatingIPPool: pool} }
}

// FloatingIP: an existing floating IP.
func FloatingIP(address string) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { g.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: address} }
}

// LoadBalancer: a Service of type LoadBalancer with lb's class and annotations.
func LoadBalancer(lb vpnv1.LoadBalancerEndpoint) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		lb := lb // each gateway its own
		g.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &lb}
	}
}

// HostNetwork: the network of node, with address as the gateway's public address ("" leaves
// it to the node's addresses).
func HostNetwork(node, address string) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		g.Spec.Endpoint = vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: node, Address: address}}
	}
}

// Port is a TCP port to the same port on the target, the most common entry of a ports list.
func Port(port int32) vpnv1.PortSpec {
	return vpnv1.PortSpec{Port: port}
}

// Exposure adds an exposure of ports on the address target.
func Exposure(name, address string, ports ...vpnv1.PortSpec) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		g.Spec.Exposures = append(g.Spec.Exposures, vpnv1.Exposure{Name: name,
			Target: vpnv1.ExposureTarget{Address: address, Ports: vpnv1.Ports(ports...)}})
	}
}

// ServiceExposure adds an exposure of ports on the Service service of the gateway's namespace.
func ServiceExposure(name, service string, ports ...vpnv1.PortSpec) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		g.Spec.Exposures = append(g.Spec.Exposures, vpnv1.Exposure{Name: name,
			Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: service}, Ports: vpnv1.Ports(ports...)}})
	}
}

// ReverseExposure adds a reverse exposure of ports on address, a host behind a peer.
func ReverseExposure(name, address string, ports ...vpnv1.PortSpec) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		g.Spec.ReverseExposures = append(g.Spec.ReverseExposures, vpnv1.ReverseExposure{Name: name,
			Target: vpnv1.ReverseExposureTarget{Address: address, Ports: vpnv1.Ports(ports...)}})
	}
}

// The settings modifiers below set one field of spec.wireguard or spec.ipsec, and the
// protocol to the one the settings are for (the API server refuses the settings of the other).

// WireGuardListenPort sets spec.wireguard.listenPort.
func WireGuardListenPort(port int32) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { wireGuardSettings(g).ListenPort = port }
}

// WireGuardPrivateKey sets spec.wireguard.privateKeySecretRef: the gateway's private key is
// under key in the Secret secret.
func WireGuardPrivateKey(secret, key string) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		wireGuardSettings(g).PrivateKeySecretRef = &vpnv1.SecretKeyRef{Name: secret, Key: key}
	}
}

// IKEVersion sets spec.ipsec.ike.version and, when given, spec.ipsec.ike.proposals.
func IKEVersion(v int32, proposals ...string) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		ike := &ipsecSettings(g).IKE
		ike.Version = v
		if len(proposals) > 0 {
			ike.Proposals = proposals
		}
	}
}

// DPDDelay sets spec.ipsec.ike.dpd.delay.
func DPDDelay(d time.Duration) GatewayFunc {
	return func(g *vpnv1.VPNGateway) {
		ike := &ipsecSettings(g).IKE
		if ike.DPD == nil {
			ike.DPD = &vpnv1.DPDSettings{}
		}
		ike.DPD.Delay = &metav1.Duration{Duration: d}
	}
}

// IKERekeyTime sets spec.ipsec.ike.rekeyTime.
func IKERekeyTime(d time.Duration) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { ipsecSettings(g).IKE.RekeyTime = &metav1.Duration{Duration: d} }
}

// IKEReauthTime sets spec.ipsec.ike.reauthTime.
func IKEReauthTime(d time.Duration) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { ipsecSettings(g).IKE.ReauthTime = &metav1.Duration{Duration: d} }
}

// ForceEncapsulation makes the IPsec gateway UDP-encapsulate ESP even without a NAT.
func ForceEncapsulation() GatewayFunc {
	return func(g *vpnv1.VPNGateway) { ipsecSettings(g).ForceEncapsulation = true }
}

// IPsecMTU sets the IPsec gateway's tunnel MTU (the MSS clamp is MTU-40).
func IPsecMTU(mtu int32) GatewayFunc {
	return func(g *vpnv1.VPNGateway) { ipsecSettings(g).MTU = mtu }
}

func wireGuardSettings(g *vpnv1.VPNGateway) *vpnv1.WireGuardGatewaySettings {
	g.Spec.Protocol = vpnv1.ProtocolWireGuard
	if g.Spec.WireGuard == nil {
		g.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{}
	}
	return g.Spec.WireGuard
}

func ipsecSettings(g *vpnv1.VPNGateway) *vpnv1.IPsecGatewaySettings {
	g.Spec.Protocol = vpnv1.ProtocolIPsec
	if g.Spec.IPsec == nil {
		g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{}
	}
	return g.Spec.IPsec
}
