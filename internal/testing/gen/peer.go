package gen

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// The defaults of a VPNPeer built here.
const (
	// DefaultGateway is the gateway a peer belongs to without OnGateway.
	DefaultGateway = "gw"
	// DefaultPeerAddress is an IPsec peer's address without IPsecPeer or RemoteAddress.
	DefaultPeerAddress = "203.0.113.9"
	// DefaultSubnet is the one subnet behind a peer without RemoteSubnets.
	DefaultSubnet = "10.20.0.0/16"
	// PSKKey is the key of the pre-shared key in its Secret (PSKSecret).
	PSKKey = "psk"
)

// VPNPeer is an IPsec peer of DefaultGateway at DefaultPeerAddress with the IKE identity
// <name>.example.com, DefaultSubnet behind it, its pre-shared key in the Secret <name>-psk
// (PSKSecret) and no authorization block, changed by mods.
func VPNPeer(namespace, name string, mods ...PeerMod) *vpnv1.VPNPeer {
	p := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: DefaultGateway,
			IPsec:      defaultIPsec(name, []string{DefaultSubnet}),
		},
	}
	return VPNPeerFrom(p, mods...)
}

// VPNPeerFrom is a copy of p changed by mods (p stays as it is).
func VPNPeerFrom(p *vpnv1.VPNPeer, mods ...PeerMod) *vpnv1.VPNPeer {
	p = p.DeepCopy()
	for _, m := range mods {
		m.applyToPeer(p)
	}
	return p
}

func defaultIPsec(name string, subnets []string) *vpnv1.IPsecPeer {
	return &vpnv1.IPsecPeer{
		Peer:          vpnv1.IPsecRemote{Address: DefaultPeerAddress, ID: name + ".example.com"},
		RemoteSubnets: subnets,
		PSKSecretRef:  vpnv1.SecretKeyRef{Name: name + "-psk", Key: PSKKey},
	}
}

// OnGateway sets spec.gatewayRef.
func OnGateway(gateway string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { p.Spec.GatewayRef = gateway }
}

// RemoteSubnets sets the subnets behind the peer: spec.ipsec.remoteSubnets or
// spec.wireguard.subnets, whichever the peer has.
func RemoteSubnets(cidrs ...string) PeerFunc {
	return func(p *vpnv1.VPNPeer) {
		switch {
		case p.Spec.IPsec != nil:
			p.Spec.IPsec.RemoteSubnets = cidrs
		case p.Spec.WireGuard != nil:
			p.Spec.WireGuard.Subnets = cidrs
		default:
			panic(fmt.Sprintf("gen.RemoteSubnets: peer %s has neither ipsec nor wireguard settings", p.Name))
		}
	}
}

// The protocol modifiers: IPsecPeer and WireGuardPeer make the peer one of their protocol
// (the other protocol's settings go, the subnets stay); the other modifiers of a protocol's
// settings do the same, with the defaults for what they do not set.

// IPsecPeer sets spec.ipsec.peer: the remote device's address and IKE identity.
func IPsecPeer(address, id string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { ipsecPeer(p).Peer = vpnv1.IPsecRemote{Address: address, ID: id} }
}

// ESPRekeyTime sets spec.ipsec.esp.rekeyTime.
func ESPRekeyTime(d time.Duration) PeerFunc {
	return func(p *vpnv1.VPNPeer) { ipsecPeer(p).ESP.RekeyTime = &metav1.Duration{Duration: d} }
}

// PeerIKE sets spec.ipsec.ike: the peer's own IKE settings.
func PeerIKE(ike vpnv1.PeerIKESettings) PeerFunc {
	return func(p *vpnv1.VPNPeer) { ipsecPeer(p).IKE = &ike }
}

// RemoteAddress sets spec.ipsec.peer.address.
func RemoteAddress(address string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { ipsecPeer(p).Peer.Address = address }
}

// RemoteID sets spec.ipsec.peer.id.
func RemoteID(id string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { ipsecPeer(p).Peer.ID = id }
}

// PSKSecretRef sets spec.ipsec.pskSecretRef: the pre-shared key is under key in the Secret
// secret.
func PSKSecretRef(secret, key string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { ipsecPeer(p).PSKSecretRef = vpnv1.SecretKeyRef{Name: secret, Key: key} }
}

// WireGuardPeer sets spec.wireguard.publicKey.
func WireGuardPeer(publicKey string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { wireGuardPeer(p).PublicKey = publicKey }
}

// WireGuardKey is a WireGuard public key (valid for the CRD's pattern) derived from seed:
// the same for the same seed, distinct for distinct seeds.
func WireGuardKey(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// WireGuardEndpoint sets spec.wireguard.endpoint (host:port).
func WireGuardEndpoint(endpoint string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { wireGuardPeer(p).Endpoint = endpoint }
}

// PersistentKeepalive sets spec.wireguard.persistentKeepalive, in seconds.
func PersistentKeepalive(seconds int32) PeerFunc {
	return func(p *vpnv1.VPNPeer) {
		s := seconds // each peer its own
		wireGuardPeer(p).PersistentKeepalive = &s
	}
}

// PresharedKeySecretRef sets spec.wireguard.presharedKeySecretRef.
func PresharedKeySecretRef(secret, key string) PeerFunc {
	return func(p *vpnv1.VPNPeer) {
		wireGuardPeer(p).PresharedKeySecretRef = &vpnv1.SecretKeyRef{Name: secret, Key: key}
	}
}

func subnets(p *vpnv1.VPNPeer) []string {
	switch {
	case p.Spec.IPsec != nil:
		return p.Spec.IPsec.RemoteSubnets
	case p.Spec.WireGuard != nil:
		return p.Spec.WireGuard.Subnets
	}
	return []string{DefaultSubnet}
}

func ipsecPeer(p *vpnv1.VPNPeer) *vpnv1.IPsecPeer {
	if p.Spec.IPsec == nil {
		p.Spec.IPsec = defaultIPsec(p.Name, subnets(p))
		p.Spec.WireGuard = nil
	}
	return p.Spec.IPsec
}

func wireGuardPeer(p *vpnv1.VPNPeer) *vpnv1.WireGuardPeer {
	if p.Spec.WireGuard == nil {
		p.Spec.WireGuard = &vpnv1.WireGuardPeer{Subnets: subnets(p)}
		p.Spec.IPsec = nil
	}
	return p.Spec.WireGuard
}

// Grants sets spec.authorization.exposures (the block is created when absent: Grants() with
// no names is a present, empty block).
func Grants(exposures ...string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { authorization(p).Exposures = exposures }
}

// ReverseGrants sets spec.authorization.reverseExposures (the block is created when absent).
func ReverseGrants(reverseExposures ...string) PeerFunc {
	return func(p *vpnv1.VPNPeer) { authorization(p).ReverseExposures = reverseExposures }
}

// Authorization sets spec.authorization to a (nil: no block).
func Authorization(a *vpnv1.Authorization) PeerFunc {
	return func(p *vpnv1.VPNPeer) { p.Spec.Authorization = a }
}

func authorization(p *vpnv1.VPNPeer) *vpnv1.Authorization {
	if p.Spec.Authorization == nil {
		p.Spec.Authorization = &vpnv1.Authorization{}
	}
	return p.Spec.Authorization
}
