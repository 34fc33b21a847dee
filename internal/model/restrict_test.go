package model

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// A gateway whose configuration turned invalid keeps its last good model only as far as the
// current spec still grants it: each revocation lands, nothing is added or widened, and the
// result verifies.
func TestRestrictAppliesEveryRevocation(t *testing.T) {
	// The last good model: two peers, a granted everything, b only internal-api.
	goodInput := func() Input {
		return testInput(
			ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("internal-api", "metrics"), gen.ReverseGrants("acme-erp")),
			ipsecPeer("b", []string{"10.30.0.0/16", "10.31.0.0/16"}, gen.Grants("internal-api")),
		)
	}
	last, errs := Build(goodInput())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	// Invalid now: an exposure whose target is refused (a loopback address).
	invalid := func(in Input) Input {
		in.Gateway.Spec.Exposures = append(in.Gateway.Spec.Exposures, vpnv1.Exposure{Name: "bad",
			Target: vpnv1.ExposureTarget{Address: "127.0.0.1", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 22})}})
		if _, errs := Build(in); len(errs) == 0 {
			t.Fatal("the input meant to be invalid builds")
		}
		return in
	}
	peer := func(g *Gateway, name string) *Peer {
		for i := range g.Peers {
			if g.Peers[i].Name == name {
				return &g.Peers[i]
			}
		}
		return nil
	}
	exposure := func(g *Gateway, name string) *Exposure {
		for i := range g.Exposures {
			if g.Exposures[i].Name == name {
				return &g.Exposures[i]
			}
		}
		return nil
	}

	cases := []struct {
		name    string
		change  func(in *Input)
		check   func(t *testing.T, got *Gateway)
		revoked string // a fragment of one revoked line; "" for nothing revoked
	}{
		{"nothing revoked", func(*Input) {}, func(t *testing.T, got *Gateway) {
			if a := peer(got, "a"); a == nil || len(a.Exposures) != 2 || len(a.ReverseExposures) != 1 {
				t.Errorf("peer a %+v", a)
			}
		}, ""},
		{"a grant removed", func(in *Input) { in.Peers[0].Spec.Authorization.Exposures = []string{"internal-api"} },
			func(t *testing.T, got *Gateway) {
				if a := peer(got, "a"); !slices.Equal(a.Exposures, []string{"internal-api"}) {
					t.Errorf("peer a's exposures %v", a.Exposures)
				}
				if e := exposure(got, "metrics"); len(e.GrantedTo) != 0 {
					t.Errorf("metrics still granted to %v", e.GrantedTo)
				}
			}, `peer "a": exposure "metrics"`},
		{"a peer deleted", func(in *Input) { in.Peers = in.Peers[1:] }, func(t *testing.T, got *Gateway) {
			if peer(got, "a") != nil {
				t.Error("peer a is still there")
			}
			if got.ReverseExposures[0].Grantee != "" {
				t.Errorf("acme-erp still reaches into %s", got.ReverseExposures[0].Grantee)
			}
		}, `peer "a": deleted`},
		{"a peer recreated", func(in *Input) { in.Peers[0].UID = types.UID("other") }, func(t *testing.T, got *Gateway) {
			if peer(got, "a") != nil {
				t.Error("peer a (another object now) is still there")
			}
		}, "replaced by another object"},
		{"a subnet withdrawn", func(in *Input) { in.Peers[1].Spec.IPsec.RemoteSubnets = []string{"10.30.0.0/16"} },
			func(t *testing.T, got *Gateway) {
				if b := peer(got, "b"); !slices.Equal(b.SourceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.30.0.0/16")}) {
					t.Errorf("peer b carries %v", b.SourceCIDRs)
				}
			}, "carries only 10.30.0.0/16"},
		{"a subnet narrowed", func(in *Input) { in.Peers[1].Spec.IPsec.RemoteSubnets = []string{"10.30.1.0/24", "10.31.0.0/16"} },
			func(t *testing.T, got *Gateway) {
				if b := peer(got, "b"); !slices.Equal(b.SourceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.30.1.0/24"), netip.MustParsePrefix("10.31.0.0/16")}) {
					t.Errorf("peer b carries %v", b.SourceCIDRs)
				}
			}, "carries only"},
		{"a subnet widened is not widened", func(in *Input) { in.Peers[1].Spec.IPsec.RemoteSubnets = []string{"10.30.0.0/15"} },
			func(t *testing.T, got *Gateway) {
				if b := peer(got, "b"); !slices.Equal(b.SourceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.30.0.0/16"), netip.MustParsePrefix("10.31.0.0/16")}) {
					t.Errorf("peer b carries %v", b.SourceCIDRs)
				}
			}, ""},
		{"a block removed on a multi-peer gateway", func(in *Input) { in.Peers[1].Spec.Authorization = nil },
			func(t *testing.T, got *Gateway) {
				if b := peer(got, "b"); b.Authorization.Authorized || len(b.Exposures) != 0 {
					t.Errorf("peer b %+v", b)
				}
			}, `peer "b": every grant (NoGrants`},
		{"a grant added is not added", func(in *Input) { in.Peers[1].Spec.Authorization.Exposures = []string{"internal-api", "metrics"} },
			func(t *testing.T, got *Gateway) {
				if b := peer(got, "b"); !slices.Equal(b.Exposures, []string{"internal-api"}) {
					t.Errorf("peer b's exposures %v", b.Exposures)
				}
			}, ""},
		{"a peer added is not added", func(in *Input) {
			in.Peers = append(in.Peers, ipsecPeer("c", []string{"10.40.0.0/16"}, gen.Grants("internal-api")))
		},
			func(t *testing.T, got *Gateway) {
				if peer(got, "c") != nil {
					t.Error("peer c was added")
				}
			}, ""},
		{"a peer's identity changed", func(in *Input) { in.Peers[1].Spec.IPsec.Peer.ID = "other.example.com" },
			func(t *testing.T, got *Gateway) {
				if peer(got, "b") != nil {
					t.Error("peer b keeps its old identity")
				}
			}, "tunnel settings changed"},
		{"an exposure removed", func(in *Input) { in.Gateway.Spec.Exposures = in.Gateway.Spec.Exposures[1:] },
			func(t *testing.T, got *Gateway) {
				if exposure(got, "internal-api") != nil || slices.Contains(peer(got, "b").Exposures, "internal-api") {
					t.Error("internal-api is still exposed")
				}
			}, `exposure "internal-api": no longer in the spec`},
		{"an exposure retargeted", func(in *Input) { in.Gateway.Spec.Exposures[0].Target.Address = "100.70.7.11" },
			func(t *testing.T, got *Gateway) {
				if exposure(got, "internal-api") != nil {
					t.Error("internal-api still leads to its old target")
				}
			}, "its target changed"},
		{"a port replaced", func(in *Input) {
			in.Gateway.Spec.Exposures[0].Target.Ports = vpnv1.Ports(vpnv1.PortSpec{Port: 8443})
		}, func(t *testing.T, got *Gateway) {
			if e := exposure(got, "internal-api"); e != nil {
				t.Errorf("internal-api keeps ports %+v (its port was replaced, and a port added is not added)", e.Ports)
			}
		}, `exposure "internal-api": ports no longer in the spec`},
		{"a reverse exposure removed", func(in *Input) { in.Gateway.Spec.ReverseExposures = nil },
			func(t *testing.T, got *Gateway) {
				if len(got.ReverseExposures) != 0 || len(peer(got, "a").ReverseExposures) != 0 {
					t.Error("acme-erp is still there")
				}
			}, `reverse exposure "acme-erp": no longer in the spec`},
		{"an internal source withdrawn", func(in *Input) { in.Config.InternalSourceCIDRs = nil },
			func(t *testing.T, got *Gateway) {
				if len(got.InternalSourceCIDRs) != 0 {
					t.Errorf("internal sources %v", got.InternalSourceCIDRs)
				}
			}, "internal source 10.244.0.0/16"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := goodInput()
			c.change(&in)
			in = invalid(in)
			got, revoked := Restrict(last, in)
			if err := Verify(got); err != nil {
				t.Fatalf("the restricted model does not verify: %v", err)
			}
			joined := strings.Join(revoked, "\n")
			switch {
			case c.revoked == "" && len(revoked) > 0:
				t.Errorf("revoked %q, want nothing", joined)
			case c.revoked != "" && !strings.Contains(joined, c.revoked):
				t.Errorf("revoked %q, want a line with %q", joined, c.revoked)
			}
			if peer(got, "bad") != nil || exposure(got, "bad") != nil {
				t.Error("the invalid exposure was added")
			}
			c.check(t, got)
			// Never more than the last model: every grant of the result was in it.
			for _, p := range got.Peers {
				lp := peer(last, p.Name)
				for _, n := range append(slices.Clone(p.Exposures), p.ReverseExposures...) {
					if !slices.Contains(lp.Exposures, n) && !slices.Contains(lp.ReverseExposures, n) {
						t.Errorf("peer %s gained %s", p.Name, n)
					}
				}
			}
		})
	}
}
