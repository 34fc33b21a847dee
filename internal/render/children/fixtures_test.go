package children

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Hand-built models (model.Build is not used here: the renderer only consumes its output).

const (
	testAgentImage      = "registry.example.net/bnerd/gateway-agent:v0.1.0"
	testStrongSwanImage = "registry.example.net/bnerd/strongswan:5.9.8"
)

type renderCase struct {
	name string
	gw   func() *model.Gateway
	opts Options
	// Expected least-privilege resource names, written out by hand.
	wantSecrets []string
	wantPeers   []string
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func ownerOf(gw *model.Gateway) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion:         "vpn.bnerd.net/v1alpha1",
		Kind:               "VPNGateway",
		Name:               gw.Name,
		UID:                gw.UID,
		Controller:         &t,
		BlockOwnerDeletion: &t,
	}
}

func defaultIKE() *model.IPsecGateway {
	return &model.IPsecGateway{
		IKEVersion:   2,
		IKEProposals: []string{"aes256gcm16-prfsha384-ecp384"},
		DPDDelay:     30 * time.Second,
		DPDAction:    "restart",
		RekeyTime:    4 * time.Hour,
	}
}

// ipsecSingleSNAT: one IPsec peer (default allow), one forward exposure, pod network.
func ipsecSingleSNAT() *model.Gateway {
	ike := defaultIKE()
	ike.LocalID = "gw.acme.example.net"
	return &model.Gateway{
		Namespace:           "client-acme",
		Name:                "acme",
		UID:                 types.UID("0b6c1d1e-0000-4000-8000-00000000a001"),
		Generation:          3,
		Protocol:            model.ProtocolIPsec,
		Mode:                model.ModeSNAT,
		Endpoint:            model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: "public"},
		PublicAddress:       "203.0.113.10",
		ServiceCIDR:         pfx("100.64.0.0/24"),
		LocalAddress:        addr("100.64.0.1"),
		InternalSourceCIDRs: []netip.Prefix{pfx("10.244.0.0/16")},
		Exposures: []model.Exposure{{
			Name:          "web",
			VirtualIP:     addr("100.64.0.10"),
			Target:        addr("10.96.0.20"),
			TargetService: "web",
			Ports:         []model.Port{{Protocol: "tcp", Port: 443, TargetPort: 8443}},
			GrantedTo:     []string{"hq"},
		}},
		IPsec: ike,
		Peers: []model.Peer{{
			Name:          "hq",
			UID:           types.UID("0b6c1d1e-0000-4000-8000-00000000b001"),
			Generation:    1,
			SourceCIDRs:   []netip.Prefix{pfx("192.168.10.0/24")},
			Authorization: model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow, Message: "single peer without authorization block reaches everything"},
			Exposures:     []string{"web"},
			IPsec: &model.IPsecPeer{
				RemoteAddress: "198.51.100.7",
				RemoteID:      "198.51.100.7",
				ESPProposals:  []string{"aes256gcm16-ecp384"},
				RekeyTime:     time.Hour,
				PSK:           model.SecretKeyRef{Name: "acme-hq-psk", Key: "psk"},
			},
		}},
	}
}

// wireguardPSK: one WireGuard peer with a preshared key, behind a LoadBalancer Service.
func wireguardPSK() *model.Gateway {
	return &model.Gateway{
		Namespace:     "client-beta",
		Name:          "beta",
		UID:           types.UID("0b6c1d1e-0000-4000-8000-00000000a002"),
		Generation:    1,
		Protocol:      model.ProtocolWireGuard,
		Mode:          model.ModeSNAT,
		Endpoint:      model.Endpoint{Kind: model.EndpointLoadBalancer, LoadBalancerClass: "example.net/lb", Annotations: map[string]string{"lb.example.net/zone": "a", "lb.example.net/class": "public"}},
		PublicAddress: "203.0.113.20",
		ServiceCIDR:   pfx("100.64.1.0/24"),
		LocalAddress:  addr("100.64.1.1"),
		Exposures: []model.Exposure{{
			Name:      "db",
			VirtualIP: addr("100.64.1.10"),
			Target:    addr("10.0.5.4"),
			Ports:     []model.Port{{Protocol: "tcp", Port: 5432, TargetPort: 5432}, {Protocol: "udp", Port: 53, TargetPort: 53}},
			GrantedTo: []string{"office"},
		}},
		WireGuard: &model.WireGuardGateway{
			ListenPort: 51820,
			MTU:        1420,
			PrivateKey: model.SecretKeyRef{Name: "beta-wireguard-key", Key: "privateKey"},
		},
		Peers: []model.Peer{{
			Name:          "office",
			UID:           types.UID("0b6c1d1e-0000-4000-8000-00000000b002"),
			Generation:    2,
			SourceCIDRs:   []netip.Prefix{pfx("192.168.50.0/24"), pfx("192.168.51.0/24")},
			Authorization: model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow, Message: "single peer without authorization block reaches everything"},
			Exposures:     []string{"db"},
			WireGuard: &model.WireGuardPeer{
				PublicKey:           "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=",
				Endpoint:            "198.51.100.20:51820",
				PresharedKey:        &model.SecretKeyRef{Name: "beta-office-psk", Key: "presharedKey"},
				PersistentKeepalive: 25,
			},
		}},
	}
}

// ipsecHostNetworkTwoPeers: a multi-peer (default-deny) IPsec gateway on a node's address; one
// peer holds the reverse exposure, the other is dark. Both PSKs live in one Secret.
func ipsecHostNetworkTwoPeers() *model.Gateway {
	return &model.Gateway{
		Namespace:           "client-gamma",
		Name:                "gamma",
		UID:                 types.UID("0b6c1d1e-0000-4000-8000-00000000a003"),
		Generation:          7,
		Protocol:            model.ProtocolIPsec,
		Mode:                model.ModeSNAT,
		Endpoint:            model.Endpoint{Kind: model.EndpointHostNetwork, NodeName: "node-1", HostAddress: addr("203.0.113.5")},
		PublicAddress:       "203.0.113.5",
		ServiceCIDR:         pfx("100.64.2.0/24"),
		LocalAddress:        addr("100.64.2.1"),
		InternalSourceCIDRs: []netip.Prefix{pfx("10.244.0.0/16"), pfx("172.16.0.0/12")},
		// A ready ClusterLink: its range is an internal source and the NetworkPolicy admits it.
		Routes:         []model.Route{{CIDR: pfx("172.16.0.0/12"), Via: addr("198.51.100.202"), Link: "service-cluster"}},
		ReverseClients: []netip.Addr{addr("10.244.0.12"), addr("10.244.1.7")},
		ReverseClientNamespaces: &metav1.LabelSelector{
			MatchLabels:      map[string]string{"tenant": "gamma"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}}},
		},
		ReverseExposures: []model.ReverseExposure{{
			Name:      "erp",
			VirtualIP: addr("100.64.2.20"),
			Target:    addr("192.168.20.5"),
			Ports:     []model.Port{{Protocol: "tcp", Port: 1433, TargetPort: 1433, GatewayPort: 20000}, {Protocol: "udp", Port: 161, TargetPort: 1161, GatewayPort: 20001}},
			Grantee:   "branch-a",
		}},
		IPsec: defaultIKE(),
		Peers: []model.Peer{
			{
				Name:             "branch-a",
				UID:              types.UID("0b6c1d1e-0000-4000-8000-00000000b003"),
				Generation:       1,
				SourceCIDRs:      []netip.Prefix{pfx("192.168.20.0/24")},
				Authorization:    model.Decision{Authorized: true, Reason: model.ReasonAuthorized, Message: "granted 1 reverse exposure"},
				ReverseExposures: []string{"erp"},
				IPsec: &model.IPsecPeer{
					RemoteAddress: "198.51.100.30",
					RemoteID:      "branch-a.example.net",
					ESPProposals:  []string{"aes256gcm16-ecp384"},
					RekeyTime:     time.Hour,
					PSK:           model.SecretKeyRef{Name: "gamma-psks", Key: "branch-a"},
				},
			},
			{
				Name:          "branch-b",
				UID:           types.UID("0b6c1d1e-0000-4000-8000-00000000b004"),
				Generation:    4,
				SourceCIDRs:   []netip.Prefix{pfx("192.168.21.0/24")},
				Authorization: model.Decision{Authorized: false, Reason: model.ReasonNoGrants, Message: model.MessageNoBlockMultiPeer},
				IPsec: &model.IPsecPeer{
					RemoteAddress: "198.51.100.31",
					RemoteID:      "branch-b.example.net",
					ESPProposals:  []string{"aes128gcm16-modp2048"},
					RekeyTime:     time.Hour,
					PSK:           model.SecretKeyRef{Name: "gamma-psks", Key: "branch-b"},
				},
			},
		},
	}
}

// ipsecNoPeers: a freshly created gateway with no peers yet, on a pinned floating IP.
func ipsecNoPeers() *model.Gateway {
	return &model.Gateway{
		Namespace:     "client-delta",
		Name:          "delta",
		UID:           types.UID("0b6c1d1e-0000-4000-8000-00000000a004"),
		Generation:    1,
		Protocol:      model.ProtocolIPsec,
		Mode:          model.ModeSNAT,
		Endpoint:      model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: addr("203.0.113.44")},
		PublicAddress: "203.0.113.44",
		ServiceCIDR:   pfx("100.64.3.0/24"),
		LocalAddress:  addr("100.64.3.1"),
		IPsec:         defaultIKE(),
	}
}

// ipsecStandby: ipsecSingleSNAT behind a LoadBalancer Service, with a standby pod.
func ipsecStandby() *model.Gateway {
	gw := ipsecSingleSNAT()
	gw.Endpoint = model.Endpoint{Kind: model.EndpointLoadBalancer}
	gw.Standby = true
	return gw
}

func renderCases() []renderCase {
	return []renderCase{
		{
			name:        "ipsec-snat-single-peer",
			gw:          ipsecSingleSNAT,
			opts:        Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, ImagePullPolicy: corev1.PullIfNotPresent, OperatorNamespace: "bnerd-vpn-system"},
			wantSecrets: []string{"acme-hq-psk"},
			wantPeers:   []string{"hq"},
		},
		{
			name:        "wireguard-psk-userspace",
			gw:          wireguardPSK,
			opts:        Options{AgentImage: testAgentImage, ImagePullPolicy: corev1.PullIfNotPresent, UserspaceDataplane: true, MetricsPort: 9100},
			wantSecrets: []string{"beta-office-psk", "beta-wireguard-key"},
			wantPeers:   []string{"office"},
		},
		{
			name:        "ipsec-hostnetwork-two-peers-reverse",
			gw:          ipsecHostNetworkTwoPeers,
			opts:        Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage},
			wantSecrets: []string{"gamma-psks"},
			wantPeers:   []string{"branch-a", "branch-b"},
		},
		{
			// the admin's placement and sizing of gateway pods (operator settings)
			name: "ipsec-snat-pod-settings",
			gw:   ipsecSingleSNAT,
			opts: Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, Pod: PodSettings{
				NodeSelector: map[string]string{"node-role.example.com/vpn": ""},
				Tolerations: []corev1.Toleration{
					{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vpn", Effect: corev1.TaintEffectNoSchedule},
					// the admin's own unreachable toleration wins over NodeLossToleration's
					{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
				},
				NodeLossToleration: 15 * time.Second,
				PriorityClassName:  "vpn-gateways",
				ImagePullSecrets:   []string{"registry-credentials"},
				Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				},
			}},
			wantSecrets: []string{"acme-hq-psk"},
			wantPeers:   []string{"hq"},
		},
		{
			name:        "ipsec-loadbalancer-standby",
			gw:          ipsecStandby,
			opts:        Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, OperatorNamespace: "bnerd-vpn-system"},
			wantSecrets: []string{"acme-hq-psk"},
			wantPeers:   []string{"hq"},
		},
		{
			name: "ipsec-no-peers-userspace",
			gw:   ipsecNoPeers,
			opts: Options{AgentImage: testAgentImage, StrongSwanImage: testStrongSwanImage, ImagePullPolicy: corev1.PullNever, UserspaceDataplane: true},
		},
	}
}
