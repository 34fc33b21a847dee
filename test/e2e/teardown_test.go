package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// A host-network gateway's agent stopping with its pod (SIGTERM) takes the gateway off the node
// once its tunnels are gone — ruleset, startup gate, address on lo, and the WireGuard device,
// which the agent deletes itself — so a deleted gateway leaves no tunnel and no rules on the
// node. While charon still runs (the agent alone restarting), all of it stays in place and
// keeps guarding the tunnels.
func TestHostNetworkGatewayLeavesTheNodeClean(t *testing.T) {
	t.Run("IPsec", func(t *testing.T) {
		l, agent, site := teardownLab(t, vpnv1.ProtocolIPsec, "e2e-teardown-ipsec")
		stopAgent(t, agent)
		if got := nodeState(t, l); got != "table+address" {
			t.Fatalf("agent stopped while charon runs: node state %q, want the ruleset and address kept", got)
		}
		if err := site.request(l.web(53), time.Second); err != nil {
			t.Errorf("the tunnel stopped carrying granted traffic while the agent was away: %v", err)
		}

		agent = l.startAgent()
		l.waitAgentReady(agent, 30*time.Second)
		l.gwCharon.Stop() // the pod goes: both containers get SIGTERM
		stopAgent(t, agent)
		waitFor(t, "charon stopped", 10*time.Second, func() error {
			if l.gwCharon.Running() {
				return fmt.Errorf("charon still running")
			}
			return nil
		})
		if got := nodeState(t, l); got != "" {
			t.Errorf("after the pod went: node state %q, want nothing left", got)
		}
	})
	t.Run("WireGuard", func(t *testing.T) {
		l, agent, site := teardownLab(t, vpnv1.ProtocolWireGuard, "e2e-teardown-wg")
		stopAgent(t, agent)
		if got := nodeState(t, l); got != "" {
			t.Errorf("after the pod went: node state %q, want nothing left", got)
		}
		if err := site.request(l.web(53), time.Second); err == nil {
			t.Error("the site still reaches the exposure through the deleted gateway")
		}
	})
}

func teardownLab(t *testing.T, proto vpnv1.Protocol, namespace string) (*lab, *netns.Process, *labSite) {
	l := newLab(t, proto, uniqueNamespace(namespace), "btd")
	s := l.newSite("site")
	l.configureDevice(s)
	l.createPeer(s, "web")
	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	waitFor(t, "site through web", 60*time.Second, func() error { return s.request(l.web(53), time.Second) })
	want := map[vpnv1.Protocol]string{vpnv1.ProtocolIPsec: "table+address", vpnv1.ProtocolWireGuard: "table+wg"}[proto]
	if got := nodeState(t, l); got != want {
		t.Fatalf("running gateway: node state %q, want %q", got, want)
	}
	return l, agent, s
}

// stopAgent sends SIGTERM and waits for the agent to exit (it may wait for the tunnels).
func stopAgent(t *testing.T, agent *netns.Process) {
	t.Helper()
	if err := agent.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "agent exited", 15*time.Second, func() error {
		if !agent.Exited() {
			return fmt.Errorf("still running")
		}
		return nil
	})
}

// nodeState is what of the gateway is in its ("node's") network namespace: "table" (the
// ruleset), "gate", "address" (on lo) and "wg" (its WireGuard device), joined by "+".
func nodeState(t *testing.T, l *lab) string {
	t.Helper()
	var have []string
	tables := l.gw.MustRun("nft", "list", "tables")
	if strings.Contains(tables+"\n", "table ip bnerd_vpn\n") {
		have = append(have, "table")
	}
	if strings.Contains(tables, "bnerd_vpn_gate") {
		have = append(have, "gate")
	}
	if strings.TrimSpace(l.gw.MustRun("ip", "-4", "addr", "show", "dev", "lo", "label", "lo:bnerd-vpn")) != "" {
		have = append(have, "address")
	}
	if _, err := l.gw.Run("ip", "link", "show", l.wgDevice()); err == nil {
		have = append(have, "wg")
	}
	return strings.Join(have, "+")
}
