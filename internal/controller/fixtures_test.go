package controller_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// ipsecGateway is a host-network IPsec gateway with two exposures and one reverse exposure.
func ipsecGateway(ns, name string) *vpnv1.VPNGateway {
	return &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: "198.51.100.10"}},
			Exposures: []vpnv1.Exposure{
				{Name: "api", Target: vpnv1.ExposureTarget{Address: "192.0.2.10", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 443})}},
				{Name: "db", Target: vpnv1.ExposureTarget{Address: "192.0.2.11", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 5432})}},
			},
			ReverseExposures: []vpnv1.ReverseExposure{
				{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 1433})}},
			},
		},
	}
}

// ipsecPeer is an IPsec peer with the given subnets and optional authorization.
func ipsecPeer(ns, name, gateway string, subnets []string, authz *vpnv1.Authorization) *vpnv1.VPNPeer {
	return &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: gateway,
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: "203.0.113.9", ID: name + ".example.com"},
				RemoteSubnets: subnets,
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			},
			Authorization: authz,
		},
	}
}

func wireguardPeer(ns, name, gateway string, subnets []string) *vpnv1.VPNPeer {
	return &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: gateway,
			WireGuard:  &vpnv1.WireGuardPeer{PublicKey: "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=", Subnets: subnets},
		},
	}
}

func pskSecret(ns, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-psk"},
		Data:       map[string][]byte{"psk": []byte("test-psk-" + name)},
	}
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}
