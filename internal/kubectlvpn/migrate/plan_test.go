package migrate

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/legacy"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

func TestPlanMigration(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tunnels []string
		edit    func(*ipsecv1.IPsecGateway)
		names   Names
		check   func(t *testing.T, p *Plan)
		refused []string // each must appear in the error
	}{{
		name:    "one tunnel: no authorization block (DefaultAllow), everything pinned",
		tunnels: []string{"hq"},
		check: func(t *testing.T, p *Plan) {
			gw := p.Gateway
			if gw.Name != "acme" || gw.Namespace != "acme" || gw.Kind != "VPNGateway" || gw.APIVersion != "vpn.bnerd.net/v1alpha1" {
				t.Errorf("gateway %s %s/%s", gw.GroupVersionKind(), gw.Namespace, gw.Name)
			}
			if gw.UID != "" || gw.Generation != 0 || !reflect.DeepEqual(gw.Status, vpnv1.VPNGatewayStatus{}) {
				t.Errorf("server fields or status carried over: %+v %+v", gw.ObjectMeta, gw.Status)
			}
			if gw.Annotations[AnnotationMigratedFrom] != "acme" {
				t.Errorf("annotations %v", gw.Annotations)
			}
			if !reflect.DeepEqual(gw.Spec.Endpoint, vpnv1.Endpoint{FloatingIP: "198.51.100.7"}) {
				t.Errorf("endpoint %+v: the pool's floating IP is not pinned", gw.Spec.Endpoint)
			}
			if gw.Spec.ServiceCIDR != "100.64.7.0/24" {
				t.Errorf("service CIDR %q, want the allocated one from status", gw.Spec.ServiceCIDR)
			}
			if gw.Spec.IPsec.LocalID != "198.51.100.7" {
				t.Errorf("local ID %q, want the legacy gateway's (its public address)", gw.Spec.IPsec.LocalID)
			}
			if !reflect.DeepEqual(gw.Spec.IPsec.IKE, gen.ReconciledIPsecGateway().Spec.IKE) || gw.Spec.Protocol != vpnv1.ProtocolIPsec || gw.Spec.Mode != vpnv1.ModeSNAT {
				t.Errorf("ipsec %+v protocol %s mode %s", gw.Spec.IPsec, gw.Spec.Protocol, gw.Spec.Mode)
			}
			vips := map[string]string{}
			for _, e := range gw.Spec.Exposures {
				vips[e.Name] = e.VirtualIP
			}
			for _, r := range gw.Spec.ReverseExposures {
				vips[r.Name] = r.VirtualIP
			}
			if want := map[string]string{"web": "100.64.7.10", "db": "100.64.7.20", "printer": "100.64.7.200"}; !reflect.DeepEqual(vips, want) {
				t.Errorf("virtual IPs %v, want %v", vips, want)
			}
			if len(p.Peers) != 1 {
				t.Fatalf("%d peers", len(p.Peers))
			}
			peer := p.Peers[0]
			if peer.Name != "hq" || peer.Kind != "VPNPeer" || peer.Spec.GatewayRef != "acme" || peer.Spec.Authorization != nil {
				t.Errorf("peer %s gatewayRef %s authorization %+v: want hq on acme without a block (DefaultAllow)", peer.Name, peer.Spec.GatewayRef, peer.Spec.Authorization)
			}
			want := &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: "203.0.113.9", ID: "hq.acme.example"},
				RemoteSubnets: []string{"192.168.10.0/24"},
				ESP:           vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp256"}},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			}
			if !reflect.DeepEqual(peer.Spec.IPsec, want) {
				t.Errorf("peer ipsec %+v, want %+v", peer.Spec.IPsec, want)
			}
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "never releases it") {
				t.Errorf("warnings %q: want the adopted pool floating IP", p.Warnings)
			}
		},
	}, {
		name:    "two tunnels: every exposure to each, the reverse exposure to the tunnel holding its target",
		tunnels: []string{"hq", "branch"},
		check: func(t *testing.T, p *Plan) {
			got := map[string]vpnv1.Authorization{}
			for _, peer := range p.Peers {
				if peer.Spec.Authorization == nil {
					t.Fatalf("peer %s has no authorization block on a multi-peer gateway", peer.Name)
				}
				got[peer.Name] = *peer.Spec.Authorization
			}
			want := map[string]vpnv1.Authorization{
				"hq":     {Exposures: []string{"web", "db"}, ReverseExposures: []string{"printer"}},
				"branch": {Exposures: []string{"web", "db"}},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("grants %+v, want %+v", got, want)
			}
			if p.Peers[0].Name != "hq" || p.Peers[1].Name != "branch" {
				t.Errorf("peers not in tunnel order: %s, %s", p.Peers[0].Name, p.Peers[1].Name)
			}
		},
	}, {
		name:    "names: --gateway and --peer-prefix",
		tunnels: []string{"hq", "branch"},
		names:   Names{Gateway: "acme-vpn", PeerPrefix: "acme-"},
		check: func(t *testing.T, p *Plan) {
			if p.Gateway.Name != "acme-vpn" || p.Peers[0].Name != "acme-hq" || p.Peers[1].Name != "acme-branch" ||
				p.Peers[0].Spec.GatewayRef != "acme-vpn" || p.Peers[1].Annotations[AnnotationMigratedFrom] != "acme" {
				t.Errorf("names %s %s/%s %s/%s", p.Gateway.Name, p.Peers[0].Name, p.Peers[0].Spec.GatewayRef, p.Peers[1].Name, p.Peers[1].Spec.GatewayRef)
			}
		},
	}, {
		name:    "spec values win where set; a pinned floating IP and a host address stay",
		tunnels: []string{"hq"},
		edit: func(g *ipsecv1.IPsecGateway) {
			g.Spec.ServiceCIDR = "100.64.7.0/24"
			g.Spec.Endpoint = vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1"}}
		},
		check: func(t *testing.T, p *Plan) {
			if ep := p.Gateway.Spec.Endpoint; ep.HostNetwork == nil || !reflect.DeepEqual(*ep.HostNetwork, vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: "198.51.100.7"}) {
				t.Errorf("endpoint %+v: want node-1 pinned to the legacy address", ep.HostNetwork)
			}
			if len(p.Warnings) != 0 {
				t.Errorf("warnings %q", p.Warnings)
			}
		},
	}, {
		name:    "a pinned floating IP stays pinned",
		tunnels: []string{"hq"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: "198.51.100.7"} },
		check: func(t *testing.T, p *Plan) {
			if p.Gateway.Spec.Endpoint != (vpnv1.Endpoint{FloatingIP: "198.51.100.7"}) || p.Gateway.Spec.IPsec.LocalID != "198.51.100.7" {
				t.Errorf("endpoint %+v local ID %q", p.Gateway.Spec.Endpoint, p.Gateway.Spec.IPsec.LocalID)
			}
		},
	}, {
		name:    "a tunnel that is down is warned about",
		tunnels: []string{"hq", "branch"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Status.Tunnels[1].State = "Connecting" },
		check: func(t *testing.T, p *Plan) {
			if !strings.Contains(strings.Join(p.Warnings, "\n"), "tunnel branch is not Established on the legacy gateway (Connecting)") {
				t.Errorf("warnings %q", p.Warnings)
			}
		},
	}, {
		name:    "refused: a LoadBalancer endpoint",
		tunnels: []string{"hq"},
		edit: func(g *ipsecv1.IPsecGateway) {
			g.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}
		},
		refused: []string{"spec.endpoint.loadBalancer: a LoadBalancer Service's address cannot be pinned"},
	}, {
		name:    "refused: the service CIDR not allocated yet",
		tunnels: []string{"hq"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Status.ServiceCIDR = "" },
		refused: []string{"spec.serviceCIDR is empty and status.serviceCIDR is not allocated yet"},
	}, {
		name:    "refused: a service CIDR in status other than spec's",
		tunnels: []string{"hq"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Spec.ServiceCIDR = "100.64.8.0/24" },
		refused: []string{"status.serviceCIDR 100.64.7.0/24 is not spec.serviceCIDR 100.64.8.0/24"},
	}, {
		name:    "refused: virtual IPs not assigned yet, or other than spec's",
		tunnels: []string{"hq"},
		edit: func(g *ipsecv1.IPsecGateway) {
			g.Status.Exposures = []vpnv1.ExposureStatus{{Name: "db", VirtualIP: "100.64.7.21"}}
			g.Status.ReverseExposures = nil
		},
		refused: []string{
			`status.exposures["web"].virtualIP is not assigned yet`,
			`status.exposures["db"].virtualIP 100.64.7.21 is not spec.exposures["db"].virtualIP 100.64.7.20`,
			`status.reverseExposures["printer"].virtualIP is not assigned yet`,
		},
	}, {
		name:    "refused: no public address to pin yet (pool, node)",
		tunnels: []string{"hq"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Status.PublicAddress = "" },
		refused: []string{`status.publicAddress is empty: the floating IP allocated from spec.endpoint.floatingIPPool "public" is not known yet`},
	}, {
		name:    "refused: a pinned floating IP the legacy gateway does not hold",
		tunnels: []string{"hq"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: "198.51.100.8"} },
		refused: []string{"status.publicAddress 198.51.100.7 is not spec.endpoint.floatingIP 198.51.100.8"},
	}, {
		name:    "refused: a status behind its spec",
		tunnels: []string{"hq"},
		edit:    func(g *ipsecv1.IPsecGateway) { g.Generation = 4 },
		refused: []string{"status.observedGeneration: the status describes generation 3, the spec is at generation 4"},
	}, {
		name:    "refused: handed over to another gateway, being deleted, names too long",
		tunnels: []string{"hq"},
		names:   Names{PeerPrefix: strings.Repeat("p", 62)},
		edit: func(g *ipsecv1.IPsecGateway) {
			g.Annotations = map[string]string{ipsecv1.AnnotationMigratedTo: "elsewhere"}
			now := metav1.Now()
			g.DeletionTimestamp = &now
		},
		refused: []string{
			`metadata.annotations[vpn.bnerd.net/migrated-to]: already handed over to VPNGateway "elsewhere", not "acme"`,
			"metadata.deletionTimestamp: the IPsecGateway is being deleted",
			`spec.tunnels["hq"]: the VPNPeer name "` + strings.Repeat("p", 62) + `hq" is not a DNS label of at most 63 characters`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := gen.ReconciledIPsecGateway(tc.tunnels...)
			if tc.edit != nil {
				tc.edit(g)
			}
			before := g.DeepCopy()
			p, err := NewPlan(g, tc.names)
			if !reflect.DeepEqual(g, before) {
				t.Errorf("NewPlan changed the IPsecGateway")
			}
			if len(tc.refused) > 0 {
				if err == nil {
					t.Fatalf("not refused")
				}
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("no %q in\n%v", want, err)
					}
				}
				if n := strings.Count(err.Error(), "\n  - "); n != len(tc.refused) {
					t.Errorf("%d reasons, want %d:\n%v", n, len(tc.refused), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

// The constant the reconciler honours is the one this command writes.
func TestMigratedToAnnotation(t *testing.T) {
	if ipsecv1.AnnotationMigratedTo != "vpn.bnerd.net/migrated-to" {
		t.Errorf("AnnotationMigratedTo is %q: docs/kubectl-vpn.md and docs/migration.md name vpn.bnerd.net/migrated-to", ipsecv1.AnnotationMigratedTo)
	}
}

// What the client sees of the migrated objects is what it saw of the legacy gateway: built and
// rendered as the operator does (the legacy object through its translation, with what the
// operator assigned it; the new objects with what is pinned in their spec), the strongSwan
// configuration is the same byte for byte, and so are the peers' decisions.
func TestMigratedRendersLikeTheLegacy(t *testing.T) {
	for _, tunnels := range [][]string{{"hq"}, {"hq", "branch"}} {
		g := gen.ReconciledIPsecGateway(tunnels...)
		g.Spec.Exposures[0].Target = vpnv1.ExposureTarget{Address: "10.0.0.8", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 443})}
		g.CreationTimestamp = metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
		p, err := NewPlan(g, Names{})
		if err != nil {
			t.Fatal(err)
		}
		build := func(kind string, gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer, serviceCIDR, public string) (*model.Gateway, map[string]string) {
			t.Helper()
			m, errs := model.Build(model.Input{Gateway: gw, Kind: kind, Peers: peers,
				Config:      model.Config{PoolCIDR: model.DefaultPoolCIDR, InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
				ServiceCIDR: netip.MustParsePrefix(serviceCIDR), PublicAddress: public})
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
		lgw, lpeers := legacy.Translate(g)
		lm, ltext := build(model.KindIPsecGateway, lgw, lpeers, g.Status.ServiceCIDR, g.Status.PublicAddress)

		// as the API server stores them: new UIDs, created in apply order within one second
		ugw := p.Gateway.DeepCopy()
		ugw.UID, ugw.Generation, ugw.CreationTimestamp = "new-gw", 1, metav1.NewTime(time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC))
		var upeers []vpnv1.VPNPeer
		for i, peer := range p.Peers {
			peer.UID, peer.Generation, peer.CreationTimestamp = types.UID(fmt.Sprintf("new-peer-%d", i)), 1, ugw.CreationTimestamp
			upeers = append(upeers, peer)
		}
		um, utext := build("", ugw, upeers, ugw.Spec.ServiceCIDR, ugw.Spec.Endpoint.FloatingIP)

		if ltext[render.KeySwanctlConf] != utext[render.KeySwanctlConf] {
			t.Errorf("%v: swanctl.conf differs:\n%s", tunnels, golden.Diff(ltext[render.KeySwanctlConf], utext[render.KeySwanctlConf]))
		}
		if ltext[render.KeyRuleset] != utext[render.KeyRuleset] {
			t.Errorf("%v: ruleset differs:\n%s", tunnels, golden.Diff(ltext[render.KeyRuleset], utext[render.KeyRuleset]))
		}
		// the peers' decisions and parameters; their object identity (uid, generation) is new
		lj, uj := withoutIdentity(t, lm.Peers), withoutIdentity(t, um.Peers)
		if lj != uj {
			t.Errorf("%v: peers differ:\nlegacy   %s\nmigrated %s", tunnels, lj, uj)
		}
		lx, _ := json.Marshal([]any{lm.Exposures, lm.ReverseExposures})
		ux, _ := json.Marshal([]any{um.Exposures, um.ReverseExposures})
		if string(lx) != string(ux) {
			t.Errorf("%v: exposures differ:\nlegacy   %s\nmigrated %s", tunnels, lx, ux)
		}
	}
}

func withoutIdentity(t *testing.T, peers []model.Peer) string {
	t.Helper()
	b, err := json.Marshal(peers)
	if err != nil {
		t.Fatal(err)
	}
	var ps []map[string]any
	if err := json.Unmarshal(b, &ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		delete(p, "uid")
		delete(p, "generation")
	}
	b, _ = json.Marshal(ps)
	return string(b)
}
