package availability

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// The VIP goes onto the interface on its network, is announced so that a neighbour holding a
// stale entry for it moves that entry to this node, and goes away again; claiming or
// releasing twice changes nothing, and a VIP on no network of the node is refused.
func TestVIPClaimAnnounceRelease(t *testing.T) {
	netns.Skip(t)
	run := netns.NewRun(t, "bvip")
	node, peer := run.NS("node"), run.NS("peer")
	netns.VethAddr(node, "eth0", "198.51.100.11/24", peer, "eth0", "198.51.100.2/24")
	mac := strings.TrimSpace(node.MustRun("cat", "/sys/class/net/eth0/address"))
	// The neighbour last saw the VIP elsewhere (the node that held it before).
	peer.MustRun("ip", "neigh", "replace", "198.51.100.10", "lladdr", "02:00:00:00:00:99", "dev", "eth0", "nud", "stale")

	v := &VIP{Address: netip.MustParseAddr("198.51.100.10"), Netns: "/run/netns/" + node.Name, GARPs: 2, GARPInterval: 50 * time.Millisecond}
	t.Cleanup(v.Close)
	ctx := context.Background()
	for range 2 {
		if err := v.Claim(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if held, err := v.Held(); err != nil || !held {
		t.Fatalf("after Claim: held %v (%v)", held, err)
	}
	if out := node.MustRun("ip", "-4", "addr", "show", "dev", "eth0"); strings.Count(out, "198.51.100.10/32") != 1 {
		t.Fatalf("the VIP on eth0:\n%s", out)
	}
	if err := netns.Eventually(2*time.Second, func() error {
		if out := peer.MustRun("ip", "neigh", "show", "198.51.100.10", "dev", "eth0"); !strings.Contains(out, mac) {
			return &neighErr{out}
		}
		return nil
	}); err != nil {
		t.Fatalf("the neighbour's entry for the VIP did not move to %s: %v", mac, err)
	}
	for range 2 {
		if err := v.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if held, err := v.Held(); err != nil || held {
		t.Fatalf("after Release: held %v (%v)", held, err)
	}
	off := &VIP{Address: netip.MustParseAddr("192.0.2.10"), Netns: "/run/netns/" + node.Name}
	if err := off.Claim(ctx); err == nil || !strings.Contains(err.Error(), "no interface has an address on its network") {
		t.Fatalf("a VIP off the node's networks: %v", err)
	}
}

type neighErr struct{ out string }

func (e *neighErr) Error() string { return "neighbour entry: " + e.out }
