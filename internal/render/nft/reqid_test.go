package nft

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Kernel ESP binds the ruleset to the gateway's own SAs: every tunnel match names the
// gateway's reqids (never "meta ipsec"/"rt ipsec", which another IPsec user's packets
// satisfy too), and every peer subnet is paired with its peer's reqid in tunnel_sources, which
// the spoof check consults. kernel-libipsec (an interface) renders no reqid at all.
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
				reqids = append(reqids, p.IPsec.Reqid)
				for _, s := range p.SourceCIDRs {
					el := fmt.Sprintf("%d . %s", p.IPsec.Reqid, s)
					if !strings.Contains(kernel, el) {
						t.Errorf("kernel ESP: tunnel_sources lacks %s (peer %s)", el, p.Name)
					}
				}
			}
			slices.Sort(reqids)
			in, out := reqidMatch("in", reqids), reqidMatch("out", reqids)
			t.Logf("kernel ESP: from the tunnel = %q, into it = %q", in, out)
			for _, banned := range []string{"meta ipsec", "rt ipsec"} {
				if strings.Contains(kernel, banned) {
					t.Errorf("kernel ESP ruleset still matches %q (any SA of the node)", banned)
				}
			}
			spoof := in + " ipsec in reqid . ip saddr != @tunnel_sources counter name \"" + CounterSpoofed + "\" drop"
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

// Several peers: one set of reqids in every tunnel match; none: a reqid no SA has.
func TestKernelESPReqidSet(t *testing.T) {
	g := ipsecGateway("two", []model.Peer{
		ipsecPeer("a", allowed(model.ReasonAuthorized), nil, "198.51.100.0/25"),
		ipsecPeer("b", dark(model.ReasonNoGrants), nil, "198.51.100.128/25"),
	}, nil)
	text := mustRender(t, g, kernelESP(g))
	want := reqidMatch("in", []uint32{g.Peers[0].IPsec.Reqid, g.Peers[1].IPsec.Reqid})
	if g.Peers[0].IPsec.Reqid > g.Peers[1].IPsec.Reqid {
		want = reqidMatch("in", []uint32{g.Peers[1].IPsec.Reqid, g.Peers[0].IPsec.Reqid})
	}
	if !strings.HasPrefix(want, "ipsec in reqid { ") || !strings.Contains(text, "\t\t"+want+" counter name ip saddr map @peer_in drop\n") {
		t.Errorf("no rule matches %q:\n%s", want, text)
	}
	none := ipsecGateway("none", nil, nil)
	if text := mustRender(t, none, kernelESP(none)); !strings.Contains(text, fmt.Sprintf("ipsec in reqid %d ", model.NoReqid)) {
		t.Errorf("a gateway without peers does not match the unused reqid %d:\n%s", model.NoReqid, text)
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
