package legacy

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func legacyGateway(tunnels ...ipsecv1.Tunnel) *ipsecv1.IPsecGateway {
	return &ipsecv1.IPsecGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme", UID: "u-acme", Generation: 2, CreationTimestamp: metav1.NewTime(t0)},
		Spec: ipsecv1.IPsecGatewaySpec{
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: "198.51.100.10"}},
			Exposures: []vpnv1.Exposure{
				{Name: "internal-api", Target: vpnv1.ExposureTarget{Address: "100.70.7.10", Ports: []intstr.IntOrString{intstr.FromInt32(443)}}},
				{Name: "syslog", Target: vpnv1.ExposureTarget{Address: "100.70.7.11", Ports: []intstr.IntOrString{intstr.FromString("514/udp")}}},
			},
			ReverseExposures: []vpnv1.ReverseExposure{
				{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: []intstr.IntOrString{intstr.FromInt32(1433)}}},
			},
			IKE:     vpnv1.IKESettings{Version: 2, Proposals: []string{"aes256gcm16-prfsha256-ecp256"}},
			Tunnels: tunnels,
		},
	}
}

func tunnel(name, id string, subnets ...string) ipsecv1.Tunnel {
	return ipsecv1.Tunnel{
		Name: name, Peer: vpnv1.IPsecRemote{Address: "203.0.113.9", ID: id}, RemoteSubnets: subnets,
		ESP: vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp256"}}, PSKSecretRef: vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
	}
}

func build(t *testing.T, gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer) (*model.Gateway, map[string]string) {
	t.Helper()
	m, errs := model.Build(model.Input{Gateway: gw, Peers: peers, Config: model.Config{PoolCIDR: model.DefaultPoolCIDR,
		InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		ServiceCIDR: netip.MustParsePrefix("100.64.5.0/24"), PublicAddress: "198.51.100.10"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	b, err := render.Render(m, render.Options{UserspaceDataplane: true})
	if err != nil {
		t.Fatal(err)
	}
	text, err := b.Text()
	if err != nil {
		t.Fatal(err)
	}
	return m, text
}

// One legacy gateway and the unified objects a person would write for it render the same
// dataplane, byte for byte (golden).
func TestLegacyRendersLikeTheUnifiedGateway(t *testing.T) {
	legacy := legacyGateway(tunnel("hq", "hq.acme.example", "10.20.0.0/16"), tunnel("branch", "branch.acme.example", "10.30.0.0/16"))
	lgw, lpeers := Translate(legacy)
	lm, ltext := build(t, lgw, lpeers)

	ugw := lgw.DeepCopy() // the unified gateway a person would write: the same spec
	unified := []vpnv1.VPNPeer{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "hq", UID: "u-acme/hq", Generation: 2, CreationTimestamp: metav1.NewTime(t0)},
			Spec: vpnv1.VPNPeerSpec{GatewayRef: "acme", IPsec: lpeers[0].Spec.IPsec.DeepCopy(),
				Authorization: &vpnv1.Authorization{Exposures: []string{"internal-api", "syslog"}, ReverseExposures: []string{"erp"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "branch", UID: "u-acme/branch", Generation: 2, CreationTimestamp: metav1.NewTime(t0.Add(time.Second))},
			Spec: vpnv1.VPNPeerSpec{GatewayRef: "acme", IPsec: lpeers[1].Spec.IPsec.DeepCopy(),
				Authorization: &vpnv1.Authorization{Exposures: []string{"internal-api", "syslog"}}}},
	}
	um, utext := build(t, ugw, unified)
	for _, k := range []string{render.KeySwanctlConf, render.KeyRuleset} {
		if ltext[k] != utext[k] {
			t.Errorf("%s differs between the legacy and the unified gateway:\n%s", k, golden.Diff(utext[k], ltext[k]))
		}
		golden.Assert(t, "two-tunnels."+k, []byte(ltext[k]))
	}
	lj, _ := json.Marshal(lm.Peers)
	uj, _ := json.Marshal(um.Peers)
	if string(lj) != string(uj) {
		t.Errorf("peers differ:\nlegacy  %s\nunified %s", lj, uj)
	}
	for _, p := range lm.Peers {
		if !p.Authorization.Authorized {
			t.Errorf("tunnel %s is not authorized: %+v", p.Name, p.Authorization)
		}
	}
	if g := lm.ReverseExposures[0].Grantee; g != "hq" {
		t.Errorf("reverse exposure erp goes to %q, want hq (its subnets contain the target)", g)
	}
}

// A single tunnel is the unified API's default-allow peer: no authorization block.
func TestSingleTunnelIsDefaultAllow(t *testing.T) {
	gw, peers := Translate(legacyGateway(tunnel("hq", "hq.acme.example", "10.20.0.0/16")))
	if len(peers) != 1 || peers[0].Spec.Authorization != nil {
		t.Fatalf("peers %+v", peers)
	}
	m, _ := build(t, gw, peers)
	if d := m.Peers[0].Authorization; d.Reason != model.ReasonDefaultAllow {
		t.Errorf("decision %+v", d)
	}
}

// The legacy object's hostile shapes meet the same model rules: tunnels are ordered oldest
// first, so a later tunnel overlapping an earlier one gets no tunnel for the overlap, and a
// shared remote ID keeps only the first.
func TestLegacyTunnelsMeetTheModelsRules(t *testing.T) {
	gw, peers := Translate(legacyGateway(
		tunnel("hq", "hq.acme.example", "10.20.0.0/16"),
		tunnel("copycat", "HQ.acme.example", "10.40.0.0/16"),
		tunnel("inside", "inside.acme.example", "10.20.5.0/24", "10.50.0.0/16"),
	))
	m, _ := build(t, gw, peers)
	by := map[string]model.Peer{}
	for _, p := range m.Peers {
		by[p.Name] = p
	}
	if d := by["copycat"].Authorization; d.Reason != model.ReasonDuplicateIdentity || by["copycat"].HasTunnel() {
		t.Errorf("copycat: %+v", d)
	}
	if d := by["inside"].Authorization; d.Reason != model.ReasonSubnetConflict || len(by["inside"].SourceCIDRs) != 1 {
		t.Errorf("inside: %+v %v", d, by["inside"].SourceCIDRs)
	}
	if !by["hq"].Authorization.Authorized {
		t.Errorf("hq: %+v", by["hq"].Authorization)
	}
}
