package nft

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// On the host network the ruleset lives in the node's namespace: every drop, MSS clamp and
// forward DNAT must match tunnel traffic (from or into the gateway's own device, or its IPsec
// policy in kernel-ESP mode), so the node's other flows never meet them.
func TestHostNetworkRulesMatchTheTunnelOnly(t *testing.T) {
	for _, tc := range renderCases() {
		g := tc.gw()
		if g.Endpoint.Kind != model.EndpointHostNetwork {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts(g)
			in, out := reqidMatch("in"), reqidMatch("out")
			if o.TunnelInterface != "" {
				in, out = `iifname "`+o.TunnelInterface+`"`, `oifname "`+o.TunnelInterface+`"`
			}
			rules, jumps := 0, 0
			chain := ""
			for _, line := range strings.Split(mustRender(t, g, o), "\n") {
				line = strings.TrimSpace(line)
				if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "type ") {
					continue
				}
				if name, ok := strings.CutPrefix(line, "chain "); ok {
					chain = strings.TrimSuffix(name, " {")
					continue
				}
				if strings.Contains(line, " jump ") {
					// The only way into input_tunnel and output_tunnel.
					jumps++
					if !strings.HasPrefix(line, in+" jump input_tunnel") && !strings.HasPrefix(line, out+" jump output_tunnel") {
						t.Errorf("jump not tied to the tunnel: %s", line)
					}
					continue
				}
				if !strings.HasSuffix(line, " drop") && !strings.Contains(line, "maxseg size set") && !strings.Contains(line, " dnat ip to ") {
					continue
				}
				rules++
				clamp := strings.TrimPrefix(line, "tcp flags syn ") // a clamp tests the flags first
				switch {
				case strings.HasPrefix(clamp, in+" "), strings.HasPrefix(clamp, out+" "):
				case chain == "input_tunnel" || chain == "output_tunnel":
					// Reached only through the jumps checked above.
				case strings.Contains(line, "fib daddr type local") && strings.Contains(line, "ip saddr @reverse_clients") && strings.Contains(line, "@rev_dnat"):
					// The reverse DNAT: the gateway's own ports on a local address, from the
					// tenant's pods; its flows go into the tunnel.
				case strings.Contains(line, "ip saddr @reverse_clients ip daddr . meta l4proto . th dport @rev_svc_keys"):
					// The same for the reverse exposures' Services, from the tenant's pods on
					// this node: only those (Service IP . port) pairs.
				default:
					t.Errorf("rule not tied to the tunnel: %s", line)
				}
			}
			if rules < 8 || jumps != 2 {
				t.Errorf("%d drop/clamp/DNAT rules and %d jumps seen, want 8 or more and 2", rules, jumps)
			}
			if !strings.Contains(mustRender(t, g, o), "hook forward priority filter; policy accept;") {
				t.Error("the forward chain's policy is not accept on the host network")
			}
		})
	}
}

func TestWireGuardDevice(t *testing.T) {
	hostGW := func(ns, name string) *model.Gateway {
		return &model.Gateway{Namespace: ns, Name: name, Protocol: model.ProtocolWireGuard,
			Endpoint: model.Endpoint{Kind: model.EndpointHostNetwork}}
	}
	if got := WireGuardDevice(&model.Gateway{Name: "gw", Endpoint: model.Endpoint{Kind: model.EndpointLoadBalancer}}); got != "wg0" {
		t.Errorf("pod network: %q, want wg0", got)
	}
	a := WireGuardDevice(hostGW("tenant-a", "edge"))
	if a != WireGuardDevice(hostGW("tenant-a", "edge")) {
		t.Error("not deterministic")
	}
	if !strings.HasPrefix(a, "wgedge-") || len(a) != len("wgedge-")+6 {
		t.Errorf("host network: %q, want wgedge-<6 hex>", a)
	}
	seen := map[string]string{}
	for _, g := range []*model.Gateway{
		hostGW("tenant-a", "edge"), hostGW("tenant-b", "edge"), hostGW("tenant-a", "edge2"),
		hostGW("a-very-long-namespace-name-of-sixty-three-characters-xxxxxxxxxx", "a.very-long.gateway-name-that-goes-on-and-on"),
		hostGW("x", "---"), hostGW("x", "0"),
	} {
		n := WireGuardDevice(g)
		if !ifname.MatchString(n) || len(n) > 15 || n == "wg0" {
			t.Errorf("%s/%s: %q is not a usable interface name", g.Namespace, g.Name, n)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%s/%s and %s share %q", g.Namespace, g.Name, other, n)
		}
		seen[n] = g.Namespace + "/" + g.Name
		if o := DefaultOptions(g, false); o.TunnelInterface != n {
			t.Errorf("DefaultOptions names %q, not the device %q", o.TunnelInterface, n)
		}
	}
}

// The gateway image's charon consults its routes into the tunnel (table 220) only for the
// packets the ruleset marks as the gateway's: the same mark on both sides.
func TestRouteMarkMatchesTheImagesFwmark(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "hack", "lab", "image", "strongswan.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("fwmark = %#x/%#x", RouteMark, RouteMark)
	if !strings.Contains(string(raw), want) {
		t.Errorf("hack/lab/image/strongswan.conf has no %q", want)
	}
	text := mustRender(t, labGateway(), DefaultOptions(labGateway(), true))
	if !strings.Contains(text, fmt.Sprintf("meta mark set meta mark | 0x%08x", RouteMark)) {
		t.Error("the ruleset does not mark the gateway's flows")
	}
}
