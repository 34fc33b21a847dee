package render_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// webGateway is the gateway t/gw behind a load balancer with one exposure, web, of
// 198.51.100.80:443.
func webGateway(mods ...gen.GatewayMod) *vpnv1.VPNGateway {
	return gen.VPNGateway("t", "gw", append([]gen.GatewayMod{gen.UID("u"), gen.Generation(1),
		gen.LoadBalancer(vpnv1.LoadBalancerEndpoint{}), gen.Exposure("web", "198.51.100.80", gen.Port(443))}, mods...)...)
}

func builtGateway(t *testing.T, mods ...gen.GatewayMod) *model.Gateway {
	t.Helper()
	gw := webGateway(mods...)
	peers := []vpnv1.VPNPeer{*gen.VPNPeer("t", "hq", gen.UID("p"), gen.RemoteSubnets("10.20.0.0/16"))}
	m, errs := model.Build(model.Input{Gateway: gw, Peers: peers, Config: model.Config{PoolCIDR: model.DefaultPoolCIDR},
		ServiceCIDR: netip.MustParsePrefix("100.64.1.0/24"), PublicAddress: "192.0.2.1"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return m
}

// The ConfigMap carries the model alone; the agent renders the same dataplane from it as the
// operator would.
func TestConfigMapCarriesOnlyTheModel(t *testing.T) {
	m := builtGateway(t)
	b, err := render.Render(m, render.Options{UserspaceDataplane: true})
	if err != nil {
		t.Fatal(err)
	}
	data, err := b.ConfigMapData()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 1 || data[render.KeyModel] == "" {
		t.Fatalf("ConfigMap data keys: %v", keys(data))
	}
	back, err := render.FromConfigMapData(data, render.Options{UserspaceDataplane: true})
	if err != nil {
		t.Fatal(err)
	}
	if back.Ruleset != b.Ruleset || len(back.StrongSwan.Connections) != 1 {
		t.Errorf("the agent's rendering differs from the operator's")
	}
}

// Anything but a model that verifies is refused: the agent never loads text it did not render.
func TestConfigMapRefusals(t *testing.T) {
	m := builtGateway(t)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(f func(map[string]any)) string {
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		f(v)
		out, _ := json.Marshal(v)
		return string(out)
	}
	tests := []struct {
		name string
		data map[string]string
		want string
	}{
		{"an extra nft table", map[string]string{render.KeyModel: string(raw), render.KeyRuleset: "table ip evil { }"}, "besides model.json"},
		{"no model", map[string]string{"swanctl.conf": "connections {}"}, "besides model.json"},
		{"empty", map[string]string{}, "no model.json"},
		{"an unknown field", map[string]string{render.KeyModel: tamper(func(v map[string]any) { v["ruleset"] = "flush ruleset" })}, "unknown field"},
		{"trailing data", map[string]string{render.KeyModel: string(raw) + `{"x":1}`}, "data after the model"},
		{"a peer carrying the whole Internet", map[string]string{render.KeyModel: tamper(func(v map[string]any) {
			v["peers"].([]any)[0].(map[string]any)["sourceCIDRs"] = []any{"0.0.0.0/0"}
		})}, "whole Internet"},
		{"a target on cloud metadata", map[string]string{render.KeyModel: tamper(func(v map[string]any) {
			v["exposures"].([]any)[0].(map[string]any)["target"] = "169.254.169.254"
		})}, "not one the cluster may offer"},
		{"a grant to nobody", map[string]string{render.KeyModel: tamper(func(v map[string]any) {
			v["exposures"].([]any)[0].(map[string]any)["grantedTo"] = []any{"hq", "ghost"}
		})}, "not an authorized peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render.FromConfigMapData(tt.data, render.Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// spec.ipsec.forceEncapsulation and spec.ipsec.mtu reach the dataplane the agent renders from
// the ConfigMap: charon's connection forces UDP encapsulation, the ruleset clamps TCP's MSS to
// the MTU less 40; without them, NAT detection decides and the clamp is 1360 (MTU 1400), and
// the model carries neither field (an agent of an older release reads it unchanged).
func TestIPsecKnobsReachTheDataplane(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mods      []gen.GatewayMod
		encap     bool
		mss       string
		modelKeys []string
	}{
		{"defaults", nil, false, "maxseg size set 1360", nil},
		{"forced encapsulation, MTU 1300", []gen.GatewayMod{gen.ForceEncapsulation(), gen.IPsecMTU(1300)}, true, "maxseg size set 1260", []string{`"forceEncap": true`, `"tunnelMTU": 1300`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := render.Render(builtGateway(t, tc.mods...), render.Options{})
			if err != nil {
				t.Fatal(err)
			}
			data, err := b.ConfigMapData()
			if err != nil {
				t.Fatal(err)
			}
			agent, err := render.FromConfigMapData(data, render.Options{})
			if err != nil {
				t.Fatal(err)
			}
			conn := agent.StrongSwan.Connections[0]
			if got := conn.IKE.Encap != nil && *conn.IKE.Encap; got != tc.encap {
				t.Errorf("charon's encap %v, want %v", got, tc.encap)
			}
			if !strings.Contains(agent.Ruleset, tc.mss) {
				t.Errorf("the ruleset lacks %q", tc.mss)
			}
			for _, k := range []string{"forceEncap", "tunnelMTU"} {
				if want := len(tc.modelKeys) > 0; strings.Contains(data[render.KeyModel], k) != want {
					t.Errorf("the model carries %s: %v, want %v", k, !want, want)
				}
			}
			for _, k := range tc.modelKeys {
				if !strings.Contains(data[render.KeyModel], k) {
					t.Errorf("the model lacks %s", k)
				}
			}
		})
	}
}
