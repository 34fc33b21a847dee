package model

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// A peer's own IKE settings replace the gateway's for that peer alone, each one that is set:
// the rest are the gateway's; a peer without any keeps the model unchanged (no ike section).
func TestPeerIKESettings(t *testing.T) {
	in := testInput(
		ipsecPeer("modern", []string{"10.20.0.0/24"}, gen.Grants("metrics"), age(1)),
		ipsecPeer("legacy", []string{"10.30.0.0/24"}, gen.Grants("metrics"), age(2), gen.PeerIKE(vpnv1.PeerIKESettings{
			Version: 1, Proposals: []string{"aes256-sha256-modp2048"}, RekeyTime: &metav1.Duration{Duration: 8 * time.Hour}})),
	)
	in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Version: 2, Proposals: []string{"aes256gcm16-prfsha256-ecp256"},
		DPD: &vpnv1.DPDSettings{Delay: &metav1.Duration{Duration: 10 * time.Second}, Action: "clear"}}}
	g, errs := Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	if err := Verify(g); err != nil {
		t.Fatal(err)
	}
	for _, p := range g.Peers {
		ike := g.IPsec.IKEFor(p.IPsec)
		t.Logf("peer %s: IKEv%d %v, DPD %s %s, rekey %s", p.Name, ike.IKEVersion, ike.IKEProposals, ike.DPDDelay, ike.DPDAction, ike.RekeyTime)
		switch p.Name {
		case "modern":
			if p.IPsec.IKE != nil {
				t.Errorf("a peer without IKE settings has an ike section: %+v", *p.IPsec.IKE)
			}
		case "legacy":
			want := IKE{IKEVersion: 1, IKEProposals: []string{"aes256-sha256-modp2048"}, DPDDelay: 10 * time.Second, DPDAction: "clear",
				RekeyTime: 8 * time.Hour, ReauthTime: g.IPsec.ReauthTime}
			if p.IPsec.IKE == nil || p.IPsec.IKE.IKEVersion != want.IKEVersion || !slices.Equal(p.IPsec.IKE.IKEProposals, want.IKEProposals) ||
				p.IPsec.IKE.DPDDelay != want.DPDDelay || p.IPsec.IKE.DPDAction != want.DPDAction || p.IPsec.IKE.RekeyTime != want.RekeyTime ||
				p.IPsec.IKE.ReauthTime != want.ReauthTime {
				t.Errorf("legacy's IKE settings %+v, want %+v", p.IPsec.IKE, want)
			}
		}
	}
	if g.IPsec.IKEVersion != 2 {
		t.Errorf("the gateway's IKE version became %d", g.IPsec.IKEVersion)
	}
}

// IKEv1 main mode picks the pre-shared key by the peer's address before it learns the
// identity: a peer at %any whose IKE version is 1 — the gateway's, or its own — gets no tunnel
// (the API refuses the peer's own version 1 at %any; the gateway's it cannot see).
func TestIKEv1AtAnyAddressGetsNoTunnel(t *testing.T) {
	anyAddr := gen.IPsecPeer("%any", "roadwarrior.example.com")
	for _, tc := range []struct {
		name       string
		gwVersion  int32
		peer       []gen.PeerMod
		wantTunnel bool
	}{
		{"gateway IKEv1", 1, []gen.PeerMod{anyAddr}, false},
		{"peer's own IKEv1", 2, []gen.PeerMod{anyAddr, gen.PeerIKE(vpnv1.PeerIKESettings{Version: 1})}, false},
		{"peer's own IKEv2 on an IKEv1 gateway", 1, []gen.PeerMod{anyAddr, gen.PeerIKE(vpnv1.PeerIKESettings{Version: 2})}, true},
		{"IKEv1 at an address", 1, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput(ipsecPeer("site", []string{"10.20.0.0/24"}, tc.peer...))
			in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Version: tc.gwVersion, Proposals: []string{"aes256-sha256-modp2048"}}}
			g, errs := Build(in)
			if errs != nil {
				t.Fatal(errs)
			}
			p := g.Peers[0]
			if p.HasTunnel() != tc.wantTunnel {
				t.Errorf("tunnel %v, want %v (%s: %s)", p.HasTunnel(), tc.wantTunnel, p.Authorization.Reason, p.Authorization.Message)
			}
			if !tc.wantTunnel && p.Authorization.Reason != ReasonIKEv1AnyAddress {
				t.Errorf("reason %s, want %s", p.Authorization.Reason, ReasonIKEv1AnyAddress)
			}
		})
	}
}

// A DPD timeout is IKEv1's (charon's dpd_timeout): an IKEv1 peer gets its own or the
// gateway's; an IKEv2 peer that sets one gets no tunnel (DPDTimeoutNeedsIKEv1) rather than
// another liveness check than it asked for, and one inherited from an IKEv1 gateway does not
// apply to it. (An IKEv2 gateway with a timeout is invalid: TestBuildErrors.)
func TestDPDTimeoutIsIKEv1s(t *testing.T) {
	timeout := func(d time.Duration) *vpnv1.DPDSettings {
		return &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: d}}
	}
	for _, tc := range []struct {
		name       string
		gw         vpnv1.IKESettings
		peer       *vpnv1.PeerIKESettings
		wantReason string        // "" = a tunnel
		want       time.Duration // its DPD timeout
	}{
		{"IKEv1 gateway's timeout", vpnv1.IKESettings{Version: 1, DPD: timeout(40 * time.Second)}, nil, "", 40 * time.Second},
		{"IKEv1 peer's own", vpnv1.IKESettings{Version: 1, DPD: timeout(40 * time.Second)}, &vpnv1.PeerIKESettings{DPD: timeout(20 * time.Second)}, "", 20 * time.Second},
		{"IKEv1 peer on an IKEv2 gateway", vpnv1.IKESettings{Version: 2}, &vpnv1.PeerIKESettings{Version: 1, DPD: timeout(20 * time.Second)}, "", 20 * time.Second},
		{"IKEv2 peer on an IKEv1 gateway with a timeout", vpnv1.IKESettings{Version: 1, DPD: timeout(40 * time.Second)}, &vpnv1.PeerIKESettings{Version: 2}, "", 0},
		{"IKEv2 peer's own timeout", vpnv1.IKESettings{Version: 2}, &vpnv1.PeerIKESettings{DPD: timeout(20 * time.Second)}, ReasonDPDTimeoutNeedsIKEv1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mods []gen.PeerMod
			if tc.peer != nil {
				mods = append(mods, gen.PeerIKE(*tc.peer))
			}
			in := testInput(ipsecPeer("site", []string{"10.20.0.0/24"}, mods...))
			tc.gw.Proposals = []string{"aes256-sha256-modp2048"}
			in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: tc.gw}
			g, errs := Build(in)
			if errs != nil {
				t.Fatal(errs)
			}
			p := g.Peers[0]
			if tc.wantReason != "" {
				if p.HasTunnel() || p.Authorization.Reason != tc.wantReason {
					t.Fatalf("tunnel %v, reason %s (%s); want none, %s", p.HasTunnel(), p.Authorization.Reason, p.Authorization.Message, tc.wantReason)
				}
				return
			}
			if !p.HasTunnel() {
				t.Fatalf("no tunnel: %s: %s", p.Authorization.Reason, p.Authorization.Message)
			}
			if got := g.IPsec.IKEFor(p.IPsec).DPDTimeout; got != tc.want {
				t.Errorf("DPD timeout %s, want %s", got, tc.want)
			}
			if err := Verify(g); err != nil {
				t.Fatal(err)
			}
		})
	}
}
