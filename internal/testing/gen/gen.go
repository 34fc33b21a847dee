// Package gen builds the API objects tests create on the API server or hand to the model:
// VPNGateway, VPNPeer and the Secrets that hold their keys. A builder takes the namespace, the
// name and modifiers, each named for what it sets:
//
//	gen.VPNPeer(ns, "branch", gen.OnGateway("edge"), gen.RemoteSubnets("10.20.0.0/16"), gen.Grants("web"))
//
// Without modifiers a builder returns an object the CRDs' validation accepts (VPNGateway and
// VPNPeer say which defaults they fill in), so a test writes only what it is about. Modifiers
// apply in order; one that sets a list sets it to the values given, and those that add one
// entry (Exposure, ReverseExposure, SecretData) say so.
//
// ReconciledIPsecGateway is the exception: one fixed legacy IPsecGateway, acme/acme, with the
// status the operator writes, for the tests of migrating it; it takes only its tunnels' names.
//
// The model's objects (model.Gateway, model.Peer), which the renderers' tests write by hand,
// have their builders in gen/modelgen.
//
// Only tests import this package: hack/layout_test.go fails when a shipped binary links it.
package gen

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// A GatewayMod changes a VPNGateway being built: a modifier of this package, a MetaMod, or a
// GatewayFunc for what none of them sets.
type GatewayMod interface {
	applyToGateway(*vpnv1.VPNGateway)
}

// A PeerMod changes a VPNPeer being built: a modifier of this package, a MetaMod, or a
// PeerFunc.
type PeerMod interface {
	applyToPeer(*vpnv1.VPNPeer)
}

// A SecretMod changes a Secret being built: SecretData, a MetaMod, or a SecretFunc.
type SecretMod interface {
	applyToSecret(*corev1.Secret)
}

// GatewayFunc is a GatewayMod written in place.
type GatewayFunc func(*vpnv1.VPNGateway)

// PeerFunc is a PeerMod written in place.
type PeerFunc func(*vpnv1.VPNPeer)

// SecretFunc is a SecretMod written in place.
type SecretFunc func(*corev1.Secret)

func (f GatewayFunc) applyToGateway(g *vpnv1.VPNGateway) { f(g) }
func (f PeerFunc) applyToPeer(p *vpnv1.VPNPeer)          { f(p) }
func (f SecretFunc) applyToSecret(s *corev1.Secret)      { f(s) }

// MetaMod changes an object's metadata; every builder of the package takes it.
type MetaMod func(*metav1.ObjectMeta)

func (m MetaMod) applyToGateway(g *vpnv1.VPNGateway) { m(&g.ObjectMeta) }
func (m MetaMod) applyToPeer(p *vpnv1.VPNPeer)       { m(&p.ObjectMeta) }
func (m MetaMod) applyToSecret(s *corev1.Secret)     { m(&s.ObjectMeta) }

// UID sets metadata.uid: the API server sets it on create; an object handed to the model
// directly needs one of its own.
func UID(uid types.UID) MetaMod {
	return func(m *metav1.ObjectMeta) { m.UID = uid }
}

// Generation sets metadata.generation.
func Generation(generation int64) MetaMod {
	return func(m *metav1.ObjectMeta) { m.Generation = generation }
}

// CreatedAt sets metadata.creationTimestamp, by which the model orders peers (the older keeps
// a contested subnet or identity).
func CreatedAt(t time.Time) MetaMod {
	return func(m *metav1.ObjectMeta) { m.CreationTimestamp = metav1.NewTime(t) }
}

// Secret is a Secret without data; SecretData adds its keys.
func Secret(namespace, name string, mods ...SecretMod) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	for _, m := range mods {
		m.applyToSecret(s)
	}
	return s
}

// SecretData adds key, with value, to the Secret's data.
func SecretData(key, value string) SecretFunc {
	return func(s *corev1.Secret) {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[key] = []byte(value)
	}
}

// PSKSecret is the Secret a VPNPeer built here refers to by default (PSKSecretRef): named
// <peer>-psk, the key under "psk".
func PSKSecret(namespace, peer, psk string, mods ...SecretMod) *corev1.Secret {
	return Secret(namespace, peer+"-psk", append([]SecretMod{SecretData(PSKKey, psk)}, mods...)...)
}

// WireGuardKeySecret is a Secret holding a WireGuard private key under "privateKey", the key
// a gateway names with WireGuardPrivateKey(name, "privateKey") and the operator writes when it
// generates one.
func WireGuardKeySecret(namespace, name, privateKey string, mods ...SecretMod) *corev1.Secret {
	return Secret(namespace, name, append([]SecretMod{SecretData("privateKey", privateKey)}, mods...)...)
}
