package labnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestAdmitScriptReplacesReusedPortsAndAddresses(t *testing.T) {
	cur := []Source{{"vethA", addr("100.64.7.2")}, {"vethB", addr("100.64.7.3")}, {"vethC", addr("100.64.7.9")}}
	got := AdmitScript(cur, "vethB", []netip.Addr{addr("100.64.7.2")})
	want := "delete element bridge bnerd-lab-srcguard pod_sources { \"vethA\" . 100.64.7.2 }\n" +
		"delete element bridge bnerd-lab-srcguard pod_sources { \"vethB\" . 100.64.7.3 }\n" +
		"add element bridge bnerd-lab-srcguard guarded_ports { \"vethB\" }\n" +
		"add element bridge bnerd-lab-srcguard pod_sources { \"vethB\" . 100.64.7.2 }\n"
	if got != want {
		t.Fatalf("AdmitScript:\n%s\nwant:\n%s", got, want)
	}
	if got := RevokeScript(cur, "vethC"); got != "delete element bridge bnerd-lab-srcguard pod_sources { \"vethC\" . 100.64.7.9 }\n" {
		t.Fatalf("RevokeScript: %q", got)
	}
	if got := RevokeScript(cur, "vethZ"); got != "" {
		t.Fatalf("RevokeScript of an unknown port: %q", got)
	}
}

func TestPodSources(t *testing.T) {
	ipnet := func(s string) net.IPNet { ip, n, _ := net.ParseCIDR(s); n.IP = ip; return *n }
	res := &current.Result{
		Interfaces: []*current.Interface{{Name: "labbr0"}, {Name: "veth1234"}, {Name: "eth0", Sandbox: "/var/run/netns/cni-1"}},
		IPs:        []*current.IPConfig{{Address: ipnet("100.96.0.7/24")}},
	}
	port, addrs, err := PodSources(res, "labbr0")
	if err != nil || port != "veth1234" || len(addrs) != 1 || addrs[0] != addr("100.96.0.7") {
		t.Fatalf("PodSources = %q %v %v, want veth1234 [100.96.0.7]", port, addrs, err)
	}
	for name, bad := range map[string]*current.Result{
		"no result":      nil,
		"no host veth":   {Interfaces: []*current.Interface{{Name: "labbr0"}}, IPs: res.IPs},
		"two host sides": {Interfaces: []*current.Interface{{Name: "veth1"}, {Name: "veth2"}}, IPs: res.IPs},
		"no address":     {Interfaces: res.Interfaces},
	} {
		if _, _, err := PodSources(bad, "labbr0"); err == nil {
			t.Errorf("%s: PodSources accepted it", name)
		}
	}
}

func TestParseSources(t *testing.T) {
	out := `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"set": {"family": "bridge", "name": "pod_sources", "table": "bnerd-lab-srcguard", "type": ["ifname", "ipv4_addr"], "handle": 2, "elem": [{"concat": ["vethA", "100.64.7.2"]}]}}]}`
	got, err := parseSources([]byte(out))
	if err != nil || len(got) != 1 || got[0] != (Source{"vethA", addr("100.64.7.2")}) {
		t.Fatalf("parseSources = %v, %v", got, err)
	}
}

// A pod bridge in a namespace of its own, two "pods" on it (a: 100.64.7.2, b: 100.64.7.3) and
// a UDP receiver on the bridge's address: the node's side of the lab's pod network, with the
// guard's real table.
type podBridge struct {
	node, a, b *netns.NS
	guard      Guard
}

func newPodBridge(t *testing.T) *podBridge {
	t.Helper()
	netns.Skip(t, "nft", "socat", "ping")
	run := netns.NewRun(t, "bguard")
	p := &podBridge{node: run.NS("node"), a: run.NS("a"), b: run.NS("b")}
	p.node.MustRun("ip", "link", "add", "br0", "type", "bridge")
	p.node.MustRun("ip", "addr", "add", "100.64.7.1/24", "dev", "br0")
	p.node.MustRun("ip", "link", "set", "br0", "up")
	for _, x := range []struct {
		port string
		pod  *netns.NS
		cidr string
	}{{"veth-a", p.a, "100.64.7.2/24"}, {"veth-b", p.b, "100.64.7.3/24"}} {
		netns.VethAddr(p.node, x.port, "", x.pod, "eth0", x.cidr)
		p.node.MustRun("ip", "link", "set", x.port, "master", "br0")
	}
	node := p.node
	p.guard = Guard{NFT: func(_ context.Context, stdin string, args ...string) (string, error) {
		out, err := node.RunInput(stdin, append([]string{"nft"}, args...)...)
		if err != nil {
			return out, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return out, nil
	}}
	if err := p.guard.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *podBridge) reaches(t *testing.T, pod *netns.NS) bool {
	t.Helper()
	res, err := pod.Ping("", "100.64.7.1", 2, 50*time.Millisecond, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return res.Received > 0
}

func (p *podBridge) spoofed(t *testing.T) uint64 {
	t.Helper()
	n, err := p.guard.Spoofed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A guarded port sends only from the addresses admitted for it: its own pod's, never another
// pod's, and nothing once revoked; a port the guard was never told of is left alone.
func TestGuardAdmitsOnlyAPodsOwnSources(t *testing.T) {
	p := newPodBridge(t)
	ctx := context.Background()

	if !p.reaches(t, p.a) {
		t.Fatal("a port the guard does not know was filtered")
	}
	if err := p.guard.Admit(ctx, "veth-a", []netip.Addr{addr("100.64.7.2")}); err != nil {
		t.Fatal(err)
	}
	if err := p.guard.Admit(ctx, "veth-b", []netip.Addr{addr("100.64.7.3")}); err != nil {
		t.Fatal(err)
	}
	if !p.reaches(t, p.a) || !p.reaches(t, p.b) {
		t.Fatal("an admitted pod does not reach the node")
	}

	// b forges a's address (it can: root in its pod, or NET_RAW); the receiver gets a's own
	// datagram, never b's, and the guard counts the forgery.
	recv := p.node.Start("socat", "-u", "UDP-RECV:5000,bind=100.64.7.1", "STDOUT")
	p.b.MustRun("ip", "addr", "add", "100.64.7.2/32", "dev", "eth0")
	before := p.spoofed(t)
	send := func(pod *netns.NS, payload string) {
		t.Helper()
		if out, err := pod.RunInput(payload+"\n", "socat", "-u", "STDIN", "UDP-SENDTO:100.64.7.1:5000,bind=100.64.7.2"); err != nil {
			t.Fatalf("%s: sending %q: %v: %s", pod.Name, payload, err, out)
		}
	}
	send(p.b, "forged")
	if err := netns.Eventually(10*time.Second, func() error {
		if p.spoofed(t) == before {
			return fmt.Errorf("the guard's spoofed counter stayed at %d", before)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	send(p.a, "genuine")
	if err := netns.Eventually(10*time.Second, func() error {
		if !strings.Contains(recv.Output(), "genuine") {
			return fmt.Errorf("received %q, want a's datagram", recv.Output())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(recv.Output(), "forged") {
		t.Fatalf("the node received b's datagram forged from a's address: %q", recv.Output())
	}

	if err := p.guard.Revoke(ctx, "veth-a"); err != nil {
		t.Fatal(err)
	}
	if p.reaches(t, p.a) {
		t.Fatal("a revoked pod still reaches the node")
	}
	srcs, err := p.guard.Sources(ctx)
	if err != nil || len(srcs) != 1 || srcs[0] != (Source{"veth-b", addr("100.64.7.3")}) {
		t.Fatalf("sources after revoking veth-a: %v, %v", srcs, err)
	}
}
