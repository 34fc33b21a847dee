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
