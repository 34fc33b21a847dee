package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// ipsecGateway is a host-network IPsec gateway with two exposures and one reverse exposure.
func ipsecGateway(ns, name string) *vpnv1.VPNGateway {
	return gen.VPNGateway(ns, name, gen.HostNetwork("node-1", "198.51.100.10"),
		gen.Exposure("api", "192.0.2.10", gen.Port(443)), gen.Exposure("db", "192.0.2.11", gen.Port(5432)),
		gen.ReverseExposure("erp", "10.20.0.5", gen.Port(1433)))
}

// testWGKey is the public key of this package's WireGuard peers.
const testWGKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="

// pskSecret is the Secret of the peer name's pre-shared key (the one gen.VPNPeer names),
// holding test-psk-<name>.
func pskSecret(ns, name string) *corev1.Secret {
	return gen.PSKSecret(ns, name, "test-psk-"+name)
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// The objects internal/testing/gen builds without modifiers, and with those that switch a
// peer's protocol, pass the CRDs' validation on the real API server.
func TestGenDefaultsPassValidation(t *testing.T) {
	ns := namespace(t)
	create(t,
		gen.VPNGateway(ns, "gw"),
		gen.VPNGateway(ns, "wg", gen.Protocol(vpnv1.ProtocolWireGuard)),
		gen.VPNGateway(ns, "wg-settings", gen.WireGuardListenPort(51820), gen.WireGuardPrivateKey("wg-key", "privateKey")),
		gen.PSKSecret(ns, "p", "test-psk"),
		gen.VPNPeer(ns, "p"),
		gen.VPNPeer(ns, "w", gen.OnGateway("wg"), gen.WireGuardPeer(gen.WireGuardKey("w"))),
		gen.VPNPeer(ns, "back", gen.WireGuardPeer(gen.WireGuardKey("back")), gen.RemoteID("back.example.net")),
	)
}
