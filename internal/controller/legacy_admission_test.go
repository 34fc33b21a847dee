package controller_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// The legacy ipsec.bnerd.net objects go through the same admission rules as the unified ones
// (docs/design.md: the security model's rules apply to legacy tunnels too), on the real API server.
func TestLegacyAdmission(t *testing.T) {
	ns := namespace(t)
	base := func() *ipsecv1.IPsecGateway {
		return &ipsecv1.IPsecGateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme"},
			Spec: ipsecv1.IPsecGatewaySpec{
				Endpoint:  vpnv1.Endpoint{FloatingIPPool: "public"},
				Exposures: []vpnv1.Exposure{{Name: "api", Target: vpnv1.ExposureTarget{Address: "100.64.7.10", Ports: []intstr.IntOrString{intstr.FromInt32(443)}}}},
				Tunnels: []ipsecv1.Tunnel{{Name: "hq", Peer: vpnv1.IPsecRemote{Address: "203.0.113.9", ID: "hq.example.com"},
					RemoteSubnets: []string{"10.20.0.0/16"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"}}},
			},
		}
	}
	link := func() *ipsecv1.ClusterLink {
		return &ipsecv1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: "svc-" + ns},
			Spec: ipsecv1.ClusterLinkSpec{CIDRs: []string{"10.96.0.0/12"}, Via: "192.0.2.40"}}
	}
	tests := []struct {
		name       string
		obj        func() client.Object
		field, msg string // empty: accepted
	}{
		{"gateway/valid", func() client.Object { return base() }, "", ""},
		{"gateway/two-tunnels", func() client.Object {
			g := base()
			g.Spec.Tunnels = append(g.Spec.Tunnels, ipsecv1.Tunnel{Name: "branch", Peer: vpnv1.IPsecRemote{Address: "%any", ID: "branch.example.com"},
				RemoteSubnets: []string{"10.30.0.0/16"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "branch-psk", Key: "psk"}})
			return g
		}, "", ""},
		{"gateway/no-tunnels", func() client.Object { g := base(); g.Spec.Tunnels = nil; return g }, "spec.tunnels", "Required value"},
		{"gateway/duplicate-tunnels", func() client.Object {
			g := base()
			g.Spec.Tunnels = append(g.Spec.Tunnels, g.Spec.Tunnels[0])
			return g
		}, "spec.tunnels[1]", "Duplicate value"},
		{"gateway/tunnel-name-injection", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].Name = "hq\n  children {"
			return g
		}, "spec.tunnels[0].name", "should match"},
		{"gateway/tunnel-subnet-not-a-cidr", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].RemoteSubnets = []string{"10.20.0.0"}
			return g
		}, "spec.tunnels[0].remoteSubnets", "remoteSubnets must be IPv4 network addresses"},
		{"gateway/tunnel-subnet-default-route", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].RemoteSubnets = []string{"0.0.0.0/0"}
			return g
		}, "spec.tunnels[0].remoteSubnets", "must not be or contain 0.0.0.0/0"},
		{"gateway/tunnel-subnet-metadata", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].RemoteSubnets = []string{"169.254.169.254/32"}
			return g
		}, "spec.tunnels[0].remoteSubnets", "must not cover"},
		{"gateway/tunnel-id-wildcard", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].Peer.ID = "*.example.com"
			return g
		}, "spec.tunnels[0].peer.id", "must not contain wildcards"},
		{"gateway/tunnel-id-subnet-prefix", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].Peer.ID = "ipv4net:198.51.100.0/24"
			return g
		}, "spec.tunnels[0].peer.id", "must not use strongSwan's ipv4:"},
		{"gateway/tunnel-id-range", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].Peer.ID = "192.0.2.10-192.0.2.20"
			return g
		}, "spec.tunnels[0].peer.id", "names an address range"},
		{"gateway/tunnel-any-without-id", func() client.Object {
			g := base()
			g.Spec.Tunnels[0].Peer = vpnv1.IPsecRemote{Address: "%any"}
			return g
		}, "spec.tunnels[0].peer.id", "id is required when address is %any"},
		{"gateway/target-cloud-metadata", func() client.Object {
			g := base()
			g.Spec.Exposures[0].Target.Address = "169.254.169.254"
			return g
		}, "spec.exposures[0].target.address", "must be a unicast address"},
		{"gateway/service-cidr-outside-cgnat", func() client.Object { g := base(); g.Spec.ServiceCIDR = "10.0.0.0/24"; return g }, "spec.serviceCIDR", "must lie inside 100.64.0.0/10"},
		{"gateway/name-too-long", func() client.Object { g := base(); g.Name = strings.Repeat("a", 41); return g }, "", "at most 40 characters"},
		{"clusterlink/valid", func() client.Object { return link() }, "", ""},
		{"clusterlink/via-not-an-ip", func() client.Object { l := link(); l.Spec.Via = "gw.example"; return l }, "spec.via", "via must be a unicast IPv4 address"},
		{"clusterlink/cidr-default-route", func() client.Object { l := link(); l.Spec.CIDRs = []string{"0.0.0.0/0"}; return l }, "spec.cidrs", "must not be 0.0.0.0/0"},
		{"clusterlink/cidr-host-bits", func() client.Object { l := link(); l.Spec.CIDRs = []string{"10.96.0.1/12"}; return l }, "spec.cidrs", "IPv4 network addresses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), tt.obj(), client.DryRunAll)
			if tt.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %s: %s", tt.field, tt.msg)
			}
			if !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not name %s with %q", err, tt.field, tt.msg)
			}
		})
	}
}
