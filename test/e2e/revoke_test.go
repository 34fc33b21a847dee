package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Revoking a grant ends the peer's established connections, not only its new ones: a TCP
// connection through the exposure stops carrying data once the agent has applied the change,
// while another peer's connection to the same exposure goes on.
func TestRevokedGrantEndsEstablishedConnections(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, vpnv1.ProtocolIPsec, "e2e-revoke", "")
	keep, lose := l.newSite("keep"), l.newSite("lose")
	l.createPeer(keep, "web")
	l.createPeer(lose, "web")
	l.configureDevice(keep)
	l.configureDevice(lose)
	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	for _, s := range []*labSite{keep, lose} {
		waitFor(t, s.name+" through web", 60*time.Second, func() error { return s.request(l.web(53), time.Second) })
	}
	kept := startTCPStream(t, keep.ns.Name, keep.addr, l.web(80), 20*time.Millisecond)
	cut := startTCPStream(t, lose.ns.Name, lose.addr, l.web(80), 20*time.Millisecond)
	waitFor(t, "both connections echoing", 10*time.Second, func() error {
		if a, b := kept.echoes(), cut.echoes(); a < 10 || b < 10 {
			return fmt.Errorf("echoes: keep %d, lose %d", a, b)
		}
		return nil
	})

	peer := &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.k8sNS, Name: "lose"}, peer); err != nil {
		t.Fatal(err)
	}
	peer.Spec.Authorization = &vpnv1.Authorization{} // present and empty: grants nothing
	if err := env.Client.Update(ctx, peer); err != nil {
		t.Fatal(err)
	}
	dark := regexp.MustCompile(`(?m)^bnerd_vpn_peer_authorized\{[^}]*peer="lose"[^}]*\} 0$`)
	waitFor(t, "the agent applying the revocation", 30*time.Second, func() error {
		_, body, err := l.agentGet("/metrics")
		if err != nil {
			return err
		}
		if !dark.MatchString(body) {
			return fmt.Errorf("peer lose still authorized in the agent's metrics")
		}
		return nil
	})

	// From now on the revoked connection carries nothing (one line may have been in flight),
	// while the other one goes on: 50 more of its echoes are the clock.
	after := cut.echoes()
	from := kept.echoes()
	waitFor(t, "the other peer's connection going on", 20*time.Second, func() error {
		if n := kept.echoes(); n < from+50 {
			return fmt.Errorf("%d echoes since the revocation", n-from)
		}
		return nil
	})
	if n := cut.echoes(); n > after+1 {
		t.Errorf("the revoked peer's connection carried %d more lines after the agent applied the revocation", n-after)
	}
	if _, _, _, err := kept.finish(2 * time.Second); err != nil {
		t.Errorf("the other peer's connection: %v", err)
	}
}
