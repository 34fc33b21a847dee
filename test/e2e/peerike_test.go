package e2e

import (
	"regexp"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// One gateway serves an IKEv1 site beside an IKEv2 site of the same client: the IKEv1 peer
// sets its own IKE version and proposals (spec.ipsec.ike), the other keeps the gateway's. Both
// real charon sites reach their granted exposure, each over the IKE version it speaks, and
// neither reaches the exposure it is not granted.
func TestIKEv1BesideIKEv2(t *testing.T) {
	l := newLab(t, vpnv1.ProtocolIPsec, uniqueNamespace("e2e-ikev1"), "")
	agent := l.startAgent()
	v2 := l.newSite("site-v2")
	v1 := l.newSite("site-v1")
	v1.conn.IKEVersion = 1
	l.createPeerWith(v2, []string{v2.subnet.String()}, &vpnv1.Authorization{Exposures: []string{"web"}})
	l.createPeerWith(v1, []string{v1.subnet.String()}, &vpnv1.Authorization{Exposures: []string{"web"}},
		gen.PeerIKE(vpnv1.PeerIKESettings{Version: 1, Proposals: []string{charontest.IKEv1Proposal}}))
	l.waitAgentReady(agent, 30*time.Second)
	for _, s := range []*labSite{v2, v1} {
		waitGatewayConnection(t, l, s.name)
		l.configureDevice(s)
	}
	for _, s := range []*labSite{v2, v1} {
		l.waitThroughWeb(s, agent)
	}
	sas := l.tunnelSelectors()
	for _, c := range []struct {
		peer, version string
	}{{v2.name, "IKEv2"}, {v1.name, "IKEv1"}} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(c.peer) + `: #[0-9]+, ESTABLISHED, ` + c.version + `,`).MatchString(sas) {
			t.Errorf("the gateway has no %s SA with %s:\n%s", c.version, c.peer, sas)
		}
	}
	for _, s := range []*labSite{v2, v1} {
		if err := s.request(l.otherAddr(53), time.Second); err == nil {
			t.Errorf("%s reached the exposure it is not granted", s.name)
		}
	}
	t.Logf("one gateway: %s over IKEv2 (the gateway's settings), %s over IKEv1 (its own), each reaching web only", v2.name, v1.name)
}
