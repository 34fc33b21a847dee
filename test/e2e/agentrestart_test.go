package e2e

import (
	"fmt"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// The agent is killed (SIGKILL, as an OOM kill or a node problem would) and a new one started
// while peer B, which is not granted the exposure "web", tries every 50 ms to reach it and a
// service on the gateway itself (which only the ruleset protects) over TCP (a new connection
// each time) and UDP — before, while no agent runs, and after. Not one attempt gets through:
// the ruleset is kernel state that outlives the agent, and the new agent installs its
// identical successor in one transaction before it touches the tunnels. (At the end the
// ruleset is deleted by hand and B does get through: the probe can see a breach.) Peer A,
// granted "web", streams throughout: with IPsec (charon runs beside the agent) it loses
// nothing at all; with the embedded userspace WireGuard device (which ends with the agent's
// process) its tunnel is back within seconds of the new agent's start. The new agent reports
// both peers' status again and counts B's drops.
func TestAgentRestartKeepsRulesetEnforced(t *testing.T) {
	t.Run("WireGuard", func(t *testing.T) { testAgentRestart(t, vpnv1.ProtocolWireGuard, "e2e-agentrestart-wg") })
	t.Run("IPsec", func(t *testing.T) { testAgentRestart(t, vpnv1.ProtocolIPsec, "e2e-agentrestart-ipsec") })
}

// wireGuardBackBound bounds A's outage after the new agent starts (userspace WireGuard: the
// device is re-created and the gateway initiates the handshake to the site's endpoint).
const wireGuardBackBound = 10 * time.Second

func testAgentRestart(t *testing.T, proto vpnv1.Protocol, namespace string) {
	l := newLab(t, proto, uniqueNamespace(namespace), "bar")
	agent := l.startAgent()
	a, b := l.newSite("site-a"), l.newSite("site-b")
	l.configureDevice(a)
	l.configureDevice(b)
	l.createPeer(a, "web")
	l.createPeer(b, "other") // a tunnel, and a grant, but not to "web"
	l.waitAgentReady(agent, 30*time.Second)
	waitFor(t, "site-a through web", 60*time.Second, func() error {
		if err := a.tcpRequest(l.web(80), time.Second); err != nil {
			return fmt.Errorf("%v (agent: %s)", err, tail(agent.Output()))
		}
		return a.request(l.web(53), time.Second)
	})
	waitFor(t, "site-b through other", 60*time.Second, func() error { return b.request(l.otherAddr(53), time.Second) })
	for _, s := range []*labSite{a, b} {
		waitFor(t, s.name+" Connected", 30*time.Second, func() error { _, err := peerConnected(l.k8sNS, s.name); return err })
	}
	rulesBefore, err := l.nftState()
	if err != nil {
		t.Fatal(err)
	}

	// Traffic for the whole scenario: A streams through web; B probes web (every success a
	// breach) and, as a control that its packets do reach the gateway, streams through other.
	aUDP := startUDPStream(t, a.ns.Name, a.addr, l.web(53), 10*time.Millisecond)
	probe := startBreachProbe(t, b.ns.Name, b.addr, 50*time.Millisecond,
		"tcp:"+l.web(80), "udp:"+l.web(53), "tcp:"+l.gatewayService(labCanaryPort), "udp:"+l.gatewayService(labCanaryPort))
	bCtl := startUDPStream(t, b.ns.Name, b.addr, l.otherAddr(53), 50*time.Millisecond)
	waitFor(t, "streams flowing", 10*time.Second, func() error {
		if n, m := aUDP.answeredCount(), bCtl.answeredCount(); n < 100 || m < 20 {
			return fmt.Errorf("answers so far: a %d, b (control) %d", n, m)
		}
		return nil
	})

	// Kill the agent.
	rv := map[string]string{}
	for _, s := range []*labSite{a, b} {
		p, err := peerConnected(l.k8sNS, s.name)
		if err != nil {
			t.Fatal(err)
		}
		rv[s.name] = p.ResourceVersion
	}
	agent.Stop() // SIGKILL to its process group, and wait
	killed := time.Now()
	if !agent.Exited() {
		t.Fatal("the agent survived SIGKILL")
	}

	// No agent: the ruleset is still there, unchanged.
	rulesDown, err := l.nftState()
	if err != nil {
		t.Fatalf("the ruleset went with the agent: %v", err)
	}
	if rulesDown != rulesBefore {
		t.Errorf("the ruleset changed when the agent died:\nbefore:\n%s\nafter:\n%s", rulesBefore, rulesDown)
	}
	// Stay down for a while: at least a second, and, where the tunnels outlive the agent
	// (IPsec), until B's control stream shows its packets reach the agent-less gateway.
	aDown, ctlDown := aUDP.answeredCount(), bCtl.answeredCount()
	waitFor(t, "a second without an agent", 10*time.Second, func() error {
		if d := time.Since(killed); d < time.Second {
			return fmt.Errorf("down for %s", d)
		}
		if proto == vpnv1.ProtocolIPsec {
			if n := bCtl.answeredCount() - ctlDown; n < 10 {
				return fmt.Errorf("site-b's control stream: %d answers without an agent", n)
			}
			if n := aUDP.answeredCount() - aDown; n < 50 {
				return fmt.Errorf("site-a: %d answers without an agent", n)
			}
		}
		return nil
	})
	if proto == vpnv1.ProtocolWireGuard {
		if out, err := l.gw.Run("ip", "link", "show", l.wgDevice()); err == nil {
			t.Logf("the userspace WireGuard device outlived the agent: %s", out)
		}
	}
	t.Logf("without an agent: site-a %d answers, site-b's control stream %d answers, site-b's probes so far: %s",
		aUDP.answeredCount()-aDown, bCtl.answeredCount()-ctlDown, probe)

	// A new agent.
	restarted := time.Now()
	agent = l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	aAgain, ctlAgain := aUDP.answeredCount(), bCtl.answeredCount()
	var aBack time.Time
	waitFor(t, "site-a's stream answered after the restart", 30*time.Second, func() error {
		if aUDP.answeredCount() <= aAgain {
			return fmt.Errorf("no answer since the restart (agent: %s)", tail(agent.Output()))
		}
		aBack = time.Now()
		return nil
	})
	waitFor(t, "site-b's control stream answered after the restart", 30*time.Second, func() error {
		if bCtl.answeredCount() <= ctlAgain {
			return fmt.Errorf("no answer since the restart")
		}
		return nil
	})
	for _, s := range []*labSite{a, b} {
		waitFor(t, s.name+"'s status reported by the new agent", 30*time.Second, func() error {
			p, err := peerConnected(l.k8sNS, s.name)
			if err != nil {
				return err
			}
			if p.ResourceVersion == rv[s.name] || agentStatusWrite(p).Before(restarted.Truncate(time.Second)) {
				return fmt.Errorf("status not written since the restart (written %s)", agentStatusWrite(p))
			}
			return nil
		})
	}
	if proto == vpnv1.ProtocolWireGuard {
		t.Logf("new agent started -> site-a answered again: %s", aBack.Sub(restarted).Round(time.Millisecond))
	}
	// Keep probing a while with the new agent in charge.
	attempts := probe.attempts()
	waitFor(t, "a second of probes with the new agent", 20*time.Second, func() error {
		if n := probe.attempts() - attempts; n < 20 {
			return fmt.Errorf("%d probes since", n)
		}
		return nil
	})
	rulesAfter, err := l.nftState()
	if err != nil {
		t.Fatal(err)
	}
	// The new agent counts site-b's drops (its metrics follow the ruleset's counters, which
	// restarted with the re-applied table, at its next refresh).
	var drops float64
	waitFor(t, "site-b's drops counted by the new agent", 20*time.Second, func() error {
		if drops = dropCounter(t, l.gw, b.name); drops == 0 {
			return fmt.Errorf("no drops counted (ruleset: %s)", func() string { r, _ := l.gw.Run("nft", "list", "counters"); return r }())
		}
		return nil
	})

	probe.finish()
	ra := aUDP.finish(3 * time.Second)
	rc := bCtl.finish(3 * time.Second)
	t.Logf("site-b's probes of web and of the gateway itself: %s", probe)
	t.Logf("site-b's drops counted by the new agent: %v", drops)
	t.Logf("site-a's stream: %s", ra)
	t.Logf("site-b's control stream: %s", rc)

	if probe.breaches() > 0 {
		t.Errorf("site-b reached the exposure it is not granted: %s, at %v (killed %s, restarted %s)",
			probe, probe.breachTimes(), killed.Format(time.StampMilli), restarted.Format(time.StampMilli))
	}
	if rulesAfter != rulesBefore {
		t.Errorf("the new agent's ruleset differs from the old one's:\nbefore:\n%s\nafter:\n%s", rulesBefore, rulesAfter)
	}
	// The probe is not vacuous: without the ruleset, site-b's probes of the gateway itself
	// get through. (The agent re-applies a deleted ruleset within a second: each attempt
	// deletes it again right before it probes.)
	if out, err := l.gw.Run("nft", "delete", "table", "ip", "bnerd_vpn"); err != nil {
		t.Fatalf("deleting the ruleset: %v: %s", err, out)
	}
	waitFor(t, "site-b reaching the gateway once the ruleset is gone (the probe's control)", 10*time.Second, func() error {
		_, _ = l.gw.Run("nft", "delete", "table", "ip", "bnerd_vpn") // gone already, unless repaired
		return b.tcpRequest(l.gatewayService(labCanaryPort), time.Second)
	})
	switch proto {
	case vpnv1.ProtocolIPsec:
		// charon and its SAs never depended on the agent.
		if len(ra.Lost) > 0 || ra.SendErrs > 0 {
			t.Errorf("site-a lost traffic across the agent's restart: %s", ra)
		}
		if len(rc.Lost) > 0 || rc.SendErrs > 0 {
			t.Errorf("site-b's granted traffic was lost across the agent's restart: %s", rc)
		}
	case vpnv1.ProtocolWireGuard:
		if d := aBack.Sub(restarted); d > wireGuardBackBound {
			t.Errorf("site-a's tunnel came back %s after the new agent started, want at most %s", d.Round(time.Millisecond), wireGuardBackBound)
		}
	}
}
