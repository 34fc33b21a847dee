package nft

import (
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

func TestStartupGateGolden(t *testing.T) {
	gw := labGateway()
	golden.Assert(t, "startup-gate-ipsec", []byte(StartupGate(gw)))
	gw.Protocol = model.ProtocolWireGuard
	if got := StartupGate(gw); got != "" {
		t.Errorf("a WireGuard gateway got a startup gate:\n%s", got)
	}
}

// Real packets: with the ruleset and the gate loaded, IKE to the gateway is dropped and other
// traffic is not; opening the gate (twice: it is idempotent) lets IKE through, and the ruleset
// stays.
func TestStartupGateDropsIKEUntilOpened(t *testing.T) {
	netns.Skip(t, "nft", "socat")
	run := netns.NewRun(t, "bnftgate")
	gw, peer := run.NS("gw"), run.NS("peer")
	netns.VethAddr(gw, "eth0", "198.51.100.1/30", peer, "eth0", "198.51.100.2/30")
	ruleset := mustRender(t, labGateway(), DefaultOptions(labGateway(), true))
	if out, err := gw.RunInput(ruleset+StartupGate(labGateway()), "nft", "-f", "-"); err != nil {
		t.Fatalf("loading ruleset and gate: %v\n%s", err, out)
	}
	gw.Start("socat", "UDP-RECVFROM:500,fork", "SYSTEM:echo ike")
	gw.Start("socat", "UDP-RECVFROM:4500,fork", "SYSTEM:echo natt")
	gw.Start("socat", "UDP-RECVFROM:5000,fork", "SYSTEM:echo other")

	// Other traffic passes while the gate is closed (and proves the listeners are up).
	expectAnswer(t, udpAsk, peer, "198.51.100.1", 5000, "other")
	expectNoAnswer(t, udpAsk, peer, "198.51.100.1", 500)
	expectNoAnswer(t, udpAsk, peer, "198.51.100.1", 4500)

	for i := 0; i < 2; i++ {
		if out, err := gw.RunInput(OpenStartupGate, "nft", "-f", "-"); err != nil {
			t.Fatalf("opening the gate (%d): %v\n%s", i+1, err, out)
		}
	}
	expectAnswer(t, udpAsk, peer, "198.51.100.1", 500, "ike")
	expectAnswer(t, udpAsk, peer, "198.51.100.1", 4500, "natt")
	if out := gw.MustRun("nft", "list", "tables"); !strings.Contains(out, "table ip "+Table+"\n") || strings.Contains(out, GateTable) {
		t.Errorf("after opening the gate, tables:\n%s", out)
	}
}
