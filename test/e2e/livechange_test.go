package e2e

import (
	"fmt"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// A third site is added while two others stream traffic through an exposure: the running
// peers lose nothing — not one UDP request of a numbered stream every 10 ms, not one line of
// a TCP stream on one connection — and the new site's tunnel carries traffic within a second
// of the agent applying the change. The new site's device is configured before its VPNPeer
// exists, as a customer's would be.
func TestLiveChangeDoesNotDisturbOtherPeers(t *testing.T) {
	t.Run("WireGuard", func(t *testing.T) { testLiveChange(t, vpnv1.ProtocolWireGuard, "e2e-livechange-wg") })
	t.Run("IPsec", func(t *testing.T) { testLiveChange(t, vpnv1.ProtocolIPsec, "e2e-livechange-ipsec") })
}

// newPeerUpBound is how soon after the agent applied the change the new peer must carry
// traffic (the "within a second of the change reaching the agent").
const newPeerUpBound = time.Second

func testLiveChange(t *testing.T, proto vpnv1.Protocol, namespace string) {
	l := newLab(t, proto, uniqueNamespace(namespace), "blc")
	agent := l.startAgent()
	a, b := l.newSite("site-a"), l.newSite("site-b")
	for _, s := range []*labSite{a, b} {
		l.configureDevice(s)
		l.createPeer(s, "web")
	}
	l.waitAgentReady(agent, 30*time.Second)
	for _, s := range []*labSite{a, b} {
		waitFor(t, s.name+" through the exposure", 60*time.Second, func() error {
			if err := s.tcpRequest(l.web(80), time.Second); err != nil {
				return fmt.Errorf("%v (agent: %s)", err, tail(agent.Output()))
			}
			return s.request(l.web(53), time.Second)
		})
		waitFor(t, s.name+" Connected", 30*time.Second, func() error { _, err := peerConnected(l.k8sNS, s.name); return err })
	}

	// The new site is ready on its side before anyone tells the gateway about it.
	c := l.newSite("site-c")
	l.configureDevice(c)

	// A and B stream; C keeps asking (it gets answers once its tunnel is up).
	aUDP := startUDPStream(t, a.ns.Name, a.addr, l.web(53), 10*time.Millisecond)
	aTCP := startTCPStream(t, a.ns.Name, a.addr, l.web(80), 10*time.Millisecond)
	bUDP := startUDPStream(t, b.ns.Name, b.addr, l.web(53), 10*time.Millisecond)
	cUDP := startUDPStream(t, c.ns.Name, c.addr, l.web(53), 10*time.Millisecond)
	waitFor(t, "streams flowing", 10*time.Second, func() error {
		if n, m := aUDP.answeredCount(), bUDP.answeredCount(); n < 50 || m < 50 {
			return fmt.Errorf("answers so far: a %d, b %d", n, m)
		}
		return nil
	})
	if n := cUDP.answeredCount(); n != 0 {
		t.Fatalf("site-c got %d answers before its VPNPeer existed", n)
	}

	appliedBefore := len(agentLogTimes(agent.Output(), "configuration applied"))
	created := l.createPeer(c, "web")
	var cUp time.Time
	waitFor(t, "site-c's first answer through its new tunnel", 30*time.Second, func() error {
		if cUp = cUDP.firstAnswer(); cUp.IsZero() {
			return fmt.Errorf("no answer yet (agent: %s)", tail(agent.Output()))
		}
		return nil
	})
	var applied time.Time
	waitFor(t, "the agent logs the change applied", 10*time.Second, func() error {
		times := agentLogTimes(agent.Output(), "configuration applied")
		if len(times) <= appliedBefore {
			return fmt.Errorf("%d applies logged, as before the change", len(times))
		}
		applied = times[appliedBefore]
		return nil
	})
	var connectedAt time.Time
	waitFor(t, "site-c Connected", 30*time.Second, func() error {
		if _, err := peerConnected(l.k8sNS, c.name); err != nil {
			return err
		}
		connectedAt = time.Now()
		return nil
	})
	// Keep streaming a while after the change, so that anything it set off later (a status
	// write, a refresh, a rekey of the new peer) happens under traffic too.
	aSoFar := aUDP.answeredCount()
	waitFor(t, "streams continuing after the change", 20*time.Second, func() error {
		if n := aUDP.answeredCount(); n < aSoFar+200 {
			return fmt.Errorf("%d answers since, want 200", n-aSoFar)
		}
		return nil
	})

	ra, rb := aUDP.finish(3*time.Second), bUDP.finish(3*time.Second)
	sent, echoed, gap, err := aTCP.finish(5 * time.Second)
	cUDP.finish(0)
	t.Logf("site-a UDP: %s", ra)
	t.Logf("site-b UDP: %s", rb)
	t.Logf("site-a TCP: %d lines sent, %d echoed in order, longest gap between echoes %s, error %v", sent, echoed, gap.Round(time.Millisecond), err)
	t.Logf("VPNPeer created -> agent applied the change: %s", applied.Sub(created).Round(time.Millisecond))
	t.Logf("VPNPeer created -> site-c's first answer: %s", cUp.Sub(created).Round(time.Millisecond))
	t.Logf("agent applied -> site-c's first answer: %s", cUp.Sub(applied).Round(time.Millisecond))
	t.Logf("VPNPeer created -> Connected seen: %s", connectedAt.Sub(created).Round(time.Millisecond))

	for _, r := range []struct {
		site string
		rep  streamReport
	}{{"site-a", ra}, {"site-b", rb}} {
		if len(r.rep.Lost) > 0 || r.rep.Answered != r.rep.Sent || r.rep.SendErrs > 0 {
			t.Errorf("%s was disturbed by the change: %s", r.site, r.rep)
		}
	}
	if err != nil || echoed != sent {
		t.Errorf("site-a's TCP stream was disturbed by the change: %d of %d lines echoed, error %v", echoed, sent, err)
	}
	if d := cUp.Sub(applied); d > newPeerUpBound {
		t.Errorf("site-c carried traffic %s after the agent applied the change, want at most %s", d.Round(time.Millisecond), newPeerUpBound)
	}
}
