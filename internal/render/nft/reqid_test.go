package nft

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

// Kernel ESP binds the ruleset to the gateway's own SAs: every tunnel match names the
// gateway's reqids (never "meta ipsec"/"rt ipsec", which another IPsec user's packets
// satisfy too), and every peer subnet is paired with its peer's reqid in tunnel_sources, which
// the spoof check consults, and with its own subnet reqid (a per-subnet CHILD_SA) — that one
// with no other subnet. kernel-libipsec (an interface) renders no reqid at all.
func TestKernelESPMatchesTheGatewaysReqidsOnly(t *testing.T) {
	for _, tc := range renderCases() {
		g := tc.gw()
		if g.Protocol != model.ProtocolIPsec {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			kernel := mustRender(t, g, kernelESP(g))
			user := mustRender(t, g, libipsec(g))
			var reqids []uint32
			for _, p := range g.Peers {
				if p.IPsec == nil || !p.HasTunnel() {
					continue
				}
				reqids = append(reqids, p.IPsec.Reqids()...)
				for i, s := range p.SourceCIDRs {
					set := lengthName(SetTunnelSources, s.Bits())
					el := fmt.Sprintf("%d . %s", p.IPsec.Reqid, s.Addr())
					if !slices.Contains(setElements(t, kernel, set), el) {
						t.Errorf("kernel ESP: %s lacks %s (peer %s, %s)", set, el, p.Name, s)
					}
					for j, r := range p.IPsec.SubnetReqids {
						other := p.SourceCIDRs[j]
						el := fmt.Sprintf("%d . %s", r, s.Addr())
						if has := slices.Contains(setElements(t, kernel, lengthName(SetTunnelSources, s.Bits())), el); has != (i == j) {
							t.Errorf("kernel ESP: %s holds %s: %v, want %v (the SAs of peer %s's subnet %s carrying %s)", set, el, has, i == j, p.Name, other, s)
						}
					}
					// its source is let in by the set of its length, and only by it
					accept := fmt.Sprintf("%s ipsec in reqid . %s @%s accept\n", reqidMatch("in"), masked("ip saddr", s.Bits()), set)
					if !strings.Contains(kernel, accept) {
						t.Errorf("kernel ESP ruleset lacks %q", accept)
					}
				}
			}
			slices.Sort(reqids)
			if got, want := setElements(t, kernel, SetReqids), fmt.Sprint(reqids); fmt.Sprint(got) != want {
				t.Errorf("kernel ESP: set %s holds %v, the peers' reqids are %s", SetReqids, got, want)
			}
			in, out := reqidMatch("in"), reqidMatch("out")
			t.Logf("kernel ESP: from the tunnel = %q, into it = %q", in, out)
			for _, banned := range []string{"meta ipsec", "rt ipsec"} {
				if strings.Contains(kernel, banned) {
					t.Errorf("kernel ESP ruleset still matches %q (any SA of the node)", banned)
				}
			}
			// every other source from the gateway's SAs: dropped and counted, last in its chain
			spoof := in + " counter name \"" + CounterSpoofed + "\" drop\n\t}"
			if !strings.Contains(kernel, spoof) {
				t.Errorf("kernel ESP ruleset lacks the spoof check %q", spoof)
			}
			if n := strings.Count(kernel, in+" "); n < 5 {
				t.Errorf("only %d rules match %q", n, in)
			}
			if strings.Contains(user, "reqid") || strings.Contains(user, CounterSpoofed) {
				t.Error("kernel-libipsec ruleset mentions reqids")
			}
		})
	}
}

// Several peers: their reqids, sorted, in the set every tunnel match names (a peer added or
// removed changes its elements only); none: the set is empty and the rules match nothing.
func TestKernelESPReqidSet(t *testing.T) {
	g := ipsecGateway("two", []model.Peer{
		ipsecPeer("a", modelgen.Authorized(), nil, "198.51.100.0/25"),
		ipsecPeer("b", modelgen.Dark(model.ReasonNoGrants, ""), nil, "198.51.100.128/25"),
	}, nil)
	text := mustRender(t, g, kernelESP(g))
	want := []uint32{g.Peers[0].IPsec.Reqid, g.Peers[1].IPsec.Reqid}
	slices.Sort(want)
	if got := setElements(t, text, SetReqids); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("set %s holds %v, want %v", SetReqids, got, want)
	}
	if match := reqidMatch("in"); !strings.Contains(text, "\t\t"+match+" meta mark set ip saddr & 255.255.255.128 map @peer_25 update @drops_in_25 { ip saddr & 255.255.255.128 } drop\n") {
		t.Errorf("no rule matches %q:\n%s", match, text)
	}
	none := ipsecGateway("none", nil, nil)
	text = mustRender(t, none, kernelESP(none))
	if got := setElements(t, text, SetReqids); len(got) != 0 || !strings.Contains(text, reqidMatch("in")+" ") {
		t.Errorf("a gateway without peers: set %s holds %v (want none, still named by the rules):\n%s", SetReqids, got, text)
	}
	g.Peers[1].IPsec.Reqid = 0
	if _, err := Render(g, kernelESP(g)); err == nil || !strings.Contains(err.Error(), "reqid") {
		t.Errorf("a peer without a reqid rendered for kernel ESP: %v", err)
	}
	g.Peers[1].IPsec.Reqid = g.Peers[0].IPsec.Reqid
	if _, err := Render(g, kernelESP(g)); err == nil {
		t.Error("two peers sharing a reqid rendered")
	}
	if _, err := Render(g, libipsec(g)); err != nil {
		t.Errorf("kernel-libipsec needs no reqids: %v", err)
	}
}

// setElements are the elements of the named set in a rendered ruleset, as Split reads them.
func setElements(t *testing.T, ruleset, name string) []string {
	t.Helper()
	l, err := Split(ruleset)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Sets {
		if s.Name == name {
			return s.Elements
		}
	}
	t.Fatalf("no set %s", name)
	return nil
}
