package e2e

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		gen.PeerIKE(vpnv1.PeerIKESettings{Version: 1, Proposals: []string{charontest.IKEv1Proposal},
			DPD: &vpnv1.DPDSettings{Delay: &metav1.Duration{Duration: time.Second}, Timeout: &metav1.Duration{Duration: 6 * time.Second}}}))
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

	// The IKEv1 peer's DPD timeout (6 s) reaches the gateway's charon: with the site cut off,
	// the gateway declares it dead after the timeout, not at the first unanswered check
	// (without one, this harness's charon — short retransmissions — would at about 1 s;
	// production charon's default is about 165 s), and leaves the IKEv2 site's SA alone.
	established := regexp.MustCompile(`(?m)^(` + regexp.QuoteMeta(v1.name) + `|` + regexp.QuoteMeta(v2.name) + `): (#[0-9]+), ESTABLISHED`)
	before := map[string][]string{}
	for _, m := range established.FindAllStringSubmatch(l.tunnelSelectors(), -1) {
		before[m[1]] = append(before[m[1]], m[2])
	}
	if len(before[v1.name]) == 0 || len(before[v2.name]) == 0 {
		t.Fatalf("established IKE_SAs %v", before)
	}
	cut := time.Now()
	v1.ns.MustRun("nft", `table inet e2e_cutoff {
  chain out { type filter hook output priority 0; ip daddr `+labGatewayAddr.String()+` drop; }
  chain in { type filter hook input priority 0; ip saddr `+labGatewayAddr.String()+` drop; }
}`)
	waitFor(t, "the gateway declaring the cut-off IKEv1 site dead", 30*time.Second, func() error {
		for _, m := range established.FindAllStringSubmatch(l.tunnelSelectors(), -1) {
			if m[1] == v1.name && slices.Contains(before[v1.name], m[2]) {
				return fmt.Errorf("IKE_SA %s of %s still established", m[2], v1.name)
			}
		}
		return nil
	})
	dead := time.Since(cut)
	t.Logf("%s cut off: its IKE_SA %v ended after %s (DPD every 1s, timeout 6s)", v1.name, before[v1.name], dead.Round(100*time.Millisecond))
	if dead < 4*time.Second {
		t.Errorf("the gateway declared %s dead after %s, before its DPD timeout of 6s", v1.name, dead.Round(100*time.Millisecond))
	}
	stayed := false
	for _, m := range established.FindAllStringSubmatch(l.tunnelSelectors(), -1) {
		stayed = stayed || m[1] == v2.name && slices.Contains(before[v2.name], m[2])
	}
	if !stayed {
		t.Errorf("none of the IKEv2 site's IKE_SAs %v stayed:\n%s", before[v2.name], l.tunnelSelectors())
	}
}
