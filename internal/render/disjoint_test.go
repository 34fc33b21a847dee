package render_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// TestRenderedTunnelsPairwiseDisjoint is docs/design.md's "one source, one tunnel" as a property of
// what reaches the daemons: over random peer sets — random ages, overlapping subnets, with and
// without authorization blocks, shared identities — the rendered IPsec remote_ts and WireGuard
// allowed IPs of any two peers never overlap, and no two IPsec keys share an owner.
func TestRenderedTunnelsPairwiseDisjoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 10))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for iter := range 1500 {
		proto := vpnv1.ProtocolIPsec
		if iter%2 == 1 {
			proto = vpnv1.ProtocolWireGuard
		}
		gw := webGateway(gen.Protocol(proto))
		n := 1 + rng.IntN(8)
		var peers []vpnv1.VPNPeer
		for i := range n {
			var subnets []string
			for range 1 + rng.IntN(3) {
				a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(2)), byte(rng.IntN(4)), byte(rng.IntN(4) * 64)})
				subnets = append(subnets, netip.PrefixFrom(a, 8+rng.IntN(19)).Masked().String())
			}
			mods := []gen.PeerMod{gen.UID("u"), gen.CreatedAt(t0.Add(time.Duration(rng.IntN(3)) * time.Minute)),
				gen.RemoteSubnets(dedupe(subnets)...)}
			if rng.IntN(2) == 0 {
				mods = append(mods, gen.Grants("web"))
			}
			identity := fmt.Sprint(rng.IntN(n)) // sometimes shared with another peer
			if proto == vpnv1.ProtocolIPsec {
				mods = append(mods, gen.IPsecPeer("%any", "site"+identity+".example.com"))
			} else {
				mods = append(mods, gen.WireGuardPeer(gen.WireGuardKey(identity)))
			}
			peers = append(peers, *gen.VPNPeer("t", fmt.Sprintf("p%d", i), mods...))
		}
		m, errs := model.Build(model.Input{
			Gateway: gw, Peers: peers,
			Config:        model.Config{PoolCIDR: model.DefaultPoolCIDR},
			ServiceCIDR:   netip.MustParsePrefix("100.64.1.0/24"),
			PublicAddress: "192.0.2.1",
		})
		if len(errs) > 0 {
			t.Fatalf("iteration %d: build: %v", iter, errs)
		}
		var installed []model.PeerPrefix
		if proto == vpnv1.ProtocolIPsec {
			cfg, err := strongswan.Render(m, strongswan.Options{})
			if err != nil {
				t.Fatalf("iteration %d: render: %v", iter, err)
			}
			for _, c := range cfg.Connections {
				for _, ch := range c.IKE.Children {
					for _, ts := range ch.RemoteTS {
						installed = append(installed, model.PeerPrefix{Peer: c.Peer, Prefix: netip.MustParsePrefix(ts)})
					}
				}
			}
			owners := map[string]string{}
			for _, k := range cfg.SharedKeys {
				for _, o := range k.Owners {
					if other, dup := owners[o]; dup {
						t.Fatalf("iteration %d: keys %s and %s share the owner %q", iter, other, k.ID, o)
					}
					owners[o] = k.ID
				}
			}
		} else {
			cfg, err := wireguard.Render(m)
			if err != nil {
				t.Fatalf("iteration %d: render: %v", iter, err)
			}
			for _, p := range cfg.Peers {
				for _, a := range p.AllowedIPs {
					installed = append(installed, model.PeerPrefix{Peer: p.Name, Prefix: a})
				}
			}
		}
		// Pairwise, the plain way (not the renderers' own sweep).
		for i, a := range installed {
			for _, b := range installed[i+1:] {
				if a.Peer != b.Peer && a.Prefix.Overlaps(b.Prefix) {
					t.Fatalf("iteration %d (%s): %s of %s overlaps %s of %s", iter, proto, a.Prefix, a.Peer, b.Prefix, b.Peer)
				}
			}
		}
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
