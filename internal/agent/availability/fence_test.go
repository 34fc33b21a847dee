package availability

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/firewall"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// passes sends one datagram to 127.0.0.1:port inside the namespace and reports whether it
// arrived (a drop in the output hook refuses the send: EPERM). The sockets are made in the
// namespace by this thread, which then returns to its own.
func passes(t *testing.T, ns *netns.NS, port uint16) bool {
	t.Helper()
	return passesTo(t, ns, "127.0.0.1", port)
}

// passesTo is passes to another of lo's addresses.
func passesTo(t *testing.T, ns *netns.NS, host string, port uint16) bool {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	h, err := vnetns.GetFromName(ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := vnetns.Set(h); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	r, rerr := net.ListenPacket("udp4", addr)
	s, serr := net.Dial("udp4", addr)
	if err := vnetns.Set(own); err != nil {
		t.Fatal(err)
	}
	if rerr != nil || serr != nil {
		t.Fatal(rerr, serr)
	}
	defer r.Close()
	defer s.Close()
	if _, err := s.Write([]byte("x")); err != nil {
		return false
	}
	_ = r.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, _, err = r.ReadFrom(make([]byte, 16))
	return err == nil
}

// The fence drops IKE and the WireGuard port and nothing else, follows the port, goes away
// whole; and the agent's ruleset check neither reports nor removes it as drift of its table.
func TestFenceInNamespace(t *testing.T) {
	netns.Skip(t, "nft")
	ns := netns.NewRun(t, "bfence").NS("gw")
	nftBin := ns.Wrapper(t, "nft")
	ctx := context.Background()

	fw := &firewall.Firewall{NFT: nftBin}
	const ruleset = `table ip bnerd_vpn {}
delete table ip bnerd_vpn
table ip bnerd_vpn {
	chain input {
		type filter hook input priority filter; policy accept;
	}
}
`
	if err := fw.Apply(ctx, ruleset); err != nil {
		t.Fatal(err)
	}
	f := &Fence{NFT: nftBin}
	for _, p := range []uint16{500, 4500, 51820, 5353} {
		if !passes(t, ns, p) {
			t.Fatalf("port %d blocked before the fence", p)
		}
	}
	if err := f.Install(ctx, 51820); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[uint16]bool{500: false, 4500: false, 51820: false, 5353: true, 51821: true} {
		if got := passes(t, ns, p); got != want {
			t.Errorf("fenced: port %d passes %v, want %v", p, got, want)
		}
	}
	// The ruleset check sees its own table as applied and leaves the fence alone.
	for range 3 {
		d, err := fw.Verify(ctx)
		if err != nil || d.Drifted() {
			t.Fatalf("ruleset check with the fence: %+v %v", d, err)
		}
	}
	if out := ns.MustRun("nft", "list", "table", "inet", FenceTable); !strings.Contains(out, "udp dport 51820 drop") {
		t.Fatalf("fence after the ruleset check:\n%s", out)
	}
	// A new WireGuard port: the fence follows.
	if err := f.Follow(ctx, 51821); err != nil {
		t.Fatal(err)
	}
	if passes(t, ns, 51821) || !passes(t, ns, 51820) {
		t.Error("the fence did not follow the WireGuard port")
	}
	if err := f.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []uint16{500, 4500, 51821} {
		if !passes(t, ns, p) {
			t.Errorf("port %d blocked after the fence went", p)
		}
	}
	// Removing twice, or following while not installed, does nothing.
	if err := f.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Follow(ctx, 51820); err != nil || f.Installed() {
		t.Fatalf("follow while not installed: %v, installed %v", err, f.Installed())
	}
	if d, err := fw.Verify(ctx); err != nil || d.Drifted() {
		t.Fatalf("ruleset check after the fence went: %+v %v", d, err)
	}
}

// On the host network the fence is scoped to the VIP: IKE and ESP to and from the VIP are
// dropped, the same ports on the node's other addresses (the node's own IKE, another
// gateway) pass; the WireGuard listen port is the gateway's own and dropped on every address.
func TestScopedFenceInNamespace(t *testing.T) {
	netns.Skip(t, "nft")
	ns := netns.NewRun(t, "bfence").NS("node")
	f := &Fence{NFT: ns.Wrapper(t, "nft"), Scope: netip.MustParseAddr("127.0.0.5")}
	if err := f.Install(context.Background(), 51820); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port uint16
		want bool
	}{
		{"127.0.0.5", 500, false}, {"127.0.0.5", 4500, false}, {"127.0.0.5", 5353, true},
		{"127.0.0.1", 500, true}, {"127.0.0.1", 4500, true}, {"127.0.0.1", 51820, false},
	} {
		if got := passesTo(t, ns, c.host, c.port); got != c.want {
			t.Errorf("scoped fence: %s:%d passes %v, want %v", c.host, c.port, got, c.want)
		}
	}
	if err := f.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !passesTo(t, ns, "127.0.0.5", 500) {
		t.Error("the VIP's IKE is blocked after the fence went")
	}
}
