package deviceconfig

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// ipsecGateway is an IPsec gateway with its status filled in, as the operator leaves it.
func ipsecGateway(settings *vpnv1.IPsecGatewaySettings) *vpnv1.VPNGateway {
	return &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: "acme"},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}},
			IPsec:    settings,
		},
		Status: vpnv1.VPNGatewayStatus{PublicAddress: "198.51.100.10", ServiceCIDR: "100.64.12.0/24"},
	}
}

func ipsecPeer(name, address, id string, esp vpnv1.ESPSettings, subnets ...string) *vpnv1.VPNPeer {
	return &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "acme"},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: "acme",
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: address, ID: id},
				RemoteSubnets: subnets,
				ESP:           esp,
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			},
		},
	}
}

type renderCase struct {
	name string
	in   Input
}

// cases are the peers every format is rendered for (testdata/<case>.<format>.golden).
func cases() []renderCase {
	return []renderCase{
		{
			// AEAD everywhere: AES-GCM in IKE (PRF-SHA-384 with aes256, as Junos ties them) and ESP
			// with PFS; an FQDN identity and two local networks.
			name: "ipsec-gcm",
			in: Input{
				Gateway: ipsecGateway(&vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{
					Version:   2,
					Proposals: []string{"aes256gcm16-prfsha384-ecp384", "aes128gcm16-prfsha256-ecp256"},
				}}),
				Peer: ipsecPeer("hq", "203.0.113.10", "hq.acme.example",
					vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp384", "aes128gcm16-ecp256"}},
					"192.168.10.0/24", "192.168.20.0/24"),
			},
		},
		{
			// Classic CBC + SHA-2, the gateway with an FQDN identity, the peer identified by its
			// address, custom DPD and lifetimes, NAT-T forced and a PPPoE path's MTU (1392); the
			// PSK included (--include-secrets).
			name: "ipsec-cbc",
			in: Input{
				Gateway: ipsecGateway(&vpnv1.IPsecGatewaySettings{
					LocalID:            "vpn.acme.example",
					ForceEncapsulation: true,
					MTU:                1392,
					IKE: vpnv1.IKESettings{
						Version:   2,
						Proposals: []string{"aes256-sha256-modp2048"},
						DPD:       &vpnv1.DPDSettings{Delay: dur(10 * time.Second), Action: "restart"},
						RekeyTime: dur(8 * time.Hour),
					},
				}),
				Peer: ipsecPeer("branch", "198.51.100.77", "",
					vpnv1.ESPSettings{Proposals: []string{"aes256-sha256-modp2048"}, RekeyTime: dur(30 * time.Minute)},
					"10.20.0.0/16"),
				PSK: "correct-horse-battery-staple",
			},
		},
		{
			// IKEv1 (CBC only: no AEAD for an IKEv1 SA) with two networks: one CHILD_SA per
			// network, as the gateway splits them; the IKEv2-only templates refuse.
			name: "ipsec-ikev1",
			in: Input{
				Gateway: ipsecGateway(&vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{
					Version:   1,
					Proposals: []string{"aes256-sha256-modp2048"},
					DPD:       &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
				}}),
				Peer: ipsecPeer("legacy", "192.0.2.80", "", vpnv1.ESPSettings{Proposals: []string{"aes128-sha1-modp2048"}},
					"10.1.0.0/24", "10.2.0.0/24"),
			},
		},
		{
			// The operator's defaults (a GCM and a CBC proposal in IKE and ESP): devices that
			// cannot do one of them get the other.
			name: "ipsec-defaults",
			in: Input{
				Gateway: ipsecGateway(nil),
				Peer:    ipsecPeer("roam", "%any", "roam@acme.example", vpnv1.ESPSettings{}, "172.16.5.0/24"),
			},
		},
	}
}

func wireguardGateway() *vpnv1.VPNGateway {
	return &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: "acme"},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol:  vpnv1.ProtocolWireGuard,
			Endpoint:  vpnv1.Endpoint{FloatingIPPool: "public"},
			WireGuard: &vpnv1.WireGuardGatewaySettings{ListenPort: 51821},
		},
		Status: vpnv1.VPNGatewayStatus{
			PublicAddress:      "198.51.100.20",
			ServiceCIDR:        "100.64.13.0/24",
			WireGuardPublicKey: "GW1aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaE=",
		},
	}
}

func wireguardPeer() *vpnv1.VPNPeer {
	keep := int32(15)
	return &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "acme"},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: "acme",
			WireGuard: &vpnv1.WireGuardPeer{
				PublicKey:             "PEERbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbE=",
				Subnets:               []string{"192.168.50.0/24"},
				PresharedKeySecretRef: &vpnv1.SecretKeyRef{Name: "shop-wg", Key: "psk"},
				PersistentKeepalive:   &keep,
			},
			Authorization: &vpnv1.Authorization{Exposures: []string{"web"}},
		},
	}
}
