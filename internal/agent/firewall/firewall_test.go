package firewall

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// ruleset is a minimal table of the rendered shape: replaced atomically, with a named counter
// that counts every packet a ping sends to the namespace's own address.
func ruleset(extra string) string {
	return `table ip bnerd_vpn {}
delete table ip bnerd_vpn
table ip bnerd_vpn {
	counter peer_a_in {}
	chain input {
		type filter hook input priority filter; policy accept;
		icmp type echo-request counter name "peer_a_in"
		` + extra + `
	}
}
`
}

// Applies run in the namespace through `ip netns exec`, exactly as `nft` runs in the pod.
func TestApplyCountersAndFailure(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	ns := netns.NewRun(t, "bfw").NS("gw")
	ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
	f := &Firewall{NFT: "/usr/bin/nft"}
	f.NFT = writeWrapper(t, ns.Name)
	ctx := context.Background()

	if err := f.Apply(ctx, ruleset("")); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("ping", "-c", "3", "-i", "0.01", "-W", "1", "192.0.2.1")
	c, err := f.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := c["peer_a_in"].Packets; got != 3 {
		t.Fatalf("counter after 3 pings: %d", got)
	}

	// A changed ruleset re-creates the table; what the counter had counted is carried over.
	if err := f.Apply(ctx, ruleset("# v2")); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("ping", "-c", "2", "-i", "0.01", "-W", "1", "192.0.2.1")
	if c, _ = f.Counters(ctx); c["peer_a_in"].Packets != 5 {
		t.Fatalf("counter across a re-apply: %d, want 5", c["peer_a_in"].Packets)
	}

	// A broken ruleset is refused as a whole: the previous one stays in force.
	err = f.Apply(ctx, ruleset("this is not nft"))
	if err == nil || !strings.Contains(err.Error(), "applying nftables ruleset") {
		t.Fatalf("broken ruleset: %v", err)
	}
	ns.MustRun("ping", "-c", "1", "-W", "1", "192.0.2.1")
	if c, _ = f.Counters(ctx); c["peer_a_in"].Packets != 6 {
		t.Fatalf("counter after a refused apply: %d, want 6 (old ruleset still counting)", c["peer_a_in"].Packets)
	}
	if _, err := nft.ParseCounters([]byte(`{"nftables":[]}`)); err != nil {
		t.Fatal(err)
	}
}

// writeWrapper returns an "nft" that runs inside the namespace.
func writeWrapper(t *testing.T, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nft")
	script := "#!/bin/sh\nexec ip netns exec " + ns + " nft \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
