package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

const (
	uplinkPortAddr = "198.51.100.2"
	uplinkClient   = "100.64.7.2"
)

// askUDP sends one datagram from ns and returns the answer ("" when none came within a second).
func askUDP(ns *netns.NS, addr string, port int) string {
	out, _, _ := ns.Exec("ping\n", "socat", "-T1", "-", fmt.Sprintf("UDP4:%s:%d", addr, port))
	return strings.TrimSpace(out)
}

// In real namespaces, a pod with two default paths: eth0 toward the cluster (its default
// route) and net1, the cloud port, toward the provider network's gateway, behind which the
// client site is. Without the uplink's policy routing, answers from the port's address leave
// through eth0 and never reach the client; with it, they leave through net1 (nft counters on
// both interfaces, in the pod's output path) and the client gets them. Until net1 is there the
// agent waits; without an uplink the rule and table go again.
func TestUplinkRepliesLeaveThroughNet1(t *testing.T) {
	netns.Skip(t, "nft", "socat")
	run := netns.NewRun(t, "bvup")
	pod, cluster, provider, client := run.NS("pod"), run.NS("cluster"), run.NS("provider"), run.NS("client")
	netns.VethAddr(pod, "eth0", "100.64.20.2/24", cluster, "c0", "100.64.20.1/24")
	pod.MustRun("ip", "route", "add", "default", "via", "100.64.20.1")
	netns.VethAddr(provider, "client", "100.64.7.1/30", client, "c0", uplinkClient+"/30")
	client.MustRun("ip", "route", "add", "198.51.100.0/24", "via", "100.64.7.1")
	provider.Sysctl("net.ipv4.ip_forward", "1")

	h := pod.Netlink()
	m := &model.Gateway{Uplink: &model.Uplink{Interface: "net1", Address: netip.MustParsePrefix(uplinkPortAddr + "/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}

	// The gateway waits for net1.
	if err := EnsureUplink(h, m); !errors.Is(err, ErrUplinkMissing) {
		t.Fatalf("without net1: %v, want it to wait", err)
	}
	netns.Veth(pod, "net1", provider, "p0")
	provider.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "p0")
	if err := EnsureUplink(h, m); !errors.Is(err, ErrUplinkMissing) {
		t.Fatalf("net1 without its address: %v, want it to wait", err)
	}
	pod.MustRun("ip", "addr", "add", uplinkPortAddr+"/24", "dev", "net1")

	sent := pod.OutputCounters(uplinkPortAddr, "eth0", "net1")
	pod.Start("socat", "-T2", "UDP4-LISTEN:500,bind="+uplinkPortAddr+",fork,reuseaddr", "SYSTEM:echo ike-$SOCAT_PEERADDR")
	want := "ike-" + uplinkClient

	// Without the policy routing the answer takes the default route: eth0, lost.
	if err := netns.Eventually(10*time.Second, func() error {
		if got := askUDP(client, uplinkPortAddr, 500); got != "" {
			return fmt.Errorf("answered %q through eth0", got)
		}
		if sent("eth0") == 0 {
			return errors.New("no answer left through eth0 yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	eth0, net1 := sent("eth0"), sent("net1")
	t.Logf("without the uplink's routing: no answer; answers via eth0 %d, via net1 %d", eth0, net1)
	if net1 != 0 {
		t.Fatalf("answers left through net1 without the routing: %d", net1)
	}

	if err := EnsureUplink(h, m); err != nil {
		t.Fatal(err)
	}
	if err := EnsureUplink(h, m); err != nil { // again: nothing changes
		t.Fatal(err)
	}
	rules := pod.MustRun("ip", "rule", "show")
	table := pod.MustRun("ip", "route", "show", "table", strconv.Itoa(UplinkTable))
	t.Logf("rules:\n%stable %d:\n%s", rules, UplinkTable, table)
	if strings.Count(rules, "from "+uplinkPortAddr+" lookup "+strconv.Itoa(UplinkTable)) != 1 || !strings.Contains(table, "default via 198.51.100.1 dev net1") ||
		strings.Count(rules, fmt.Sprintf("fwmark %#x lookup %d", model.UplinkMark, UplinkTable)) != 1 {
		t.Fatalf("want one rule from %s, one for the WireGuard mark, and a default route via net1", uplinkPortAddr)
	}
	// A packet without a bound source (a WireGuard handshake toward a peer's endpoint) takes
	// the uplink when it carries the device's mark, the default route (eth0) otherwise.
	if r, err := pod.Ping("", uplinkClient, 1, 200*time.Millisecond, time.Second); err != nil || r.Received != 0 {
		t.Fatalf("an unmarked ping to the client answered (%v %+v): the default route should not reach it", err, r)
	}
	if out, err := pod.Run("ping", "-n", "-c", "1", "-W", "2", "-m", strconv.Itoa(model.UplinkMark), uplinkClient); err != nil {
		t.Fatalf("a ping with the WireGuard mark did not take the uplink: %v\n%s", err, out)
	}
	const n = 5
	for i := 0; i < n; i++ { // socat re-opens its socket after each fork: a request may find none
		if err := netns.Eventually(10*time.Second, func() error {
			if got := askUDP(client, uplinkPortAddr, 500); got != want {
				return fmt.Errorf("with the uplink's routing, request %d: answer %q, want %q", i+1, got, want)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	eth0After, net1After := sent("eth0"), sent("net1")
	t.Logf("with the uplink's routing: %d/%d answered; answers via eth0 %d (+%d), via net1 %d (+%d)", n, n, eth0After, eth0After-eth0, net1After, net1After-net1)
	if eth0After != eth0 || net1After-net1 < n {
		t.Fatalf("answers via eth0 +%d, via net1 +%d: want 0 and at least %d", eth0After-eth0, net1After-net1, n)
	}

	// A new address (a new port) replaces the rule; no uplink removes rule and table.
	m2 := &model.Gateway{Uplink: &model.Uplink{Interface: "net1", Address: netip.MustParsePrefix("198.51.100.3/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}
	pod.MustRun("ip", "addr", "add", "198.51.100.3/24", "dev", "net1")
	if err := EnsureUplink(h, m2); err != nil {
		t.Fatal(err)
	}
	if rules := pod.MustRun("ip", "rule", "show"); strings.Contains(rules, uplinkPortAddr) || !strings.Contains(rules, "from 198.51.100.3 lookup") {
		t.Fatalf("rules after the address changed:\n%s", rules)
	}
	if err := EnsureUplink(h, &model.Gateway{}); err != nil {
		t.Fatal(err)
	}
	if rules, table := pod.MustRun("ip", "rule", "show"), pod.MustRun("ip", "route", "show", "table", strconv.Itoa(UplinkTable)); strings.Contains(rules, "lookup "+strconv.Itoa(UplinkTable)) || strings.TrimSpace(table) != "" {
		t.Fatalf("without an uplink, left behind:\n%s\n%s", rules, table)
	}
}

// The engine loads nothing into the dataplane and keeps the startup gate closed until the
// uplink is there with its address; then it sets up the return path and loads the peers.
func TestEngineWaitsForTheUplink(t *testing.T) {
	netns.Skip(t, "ip")
	run := netns.NewRun(t, "bvuw")
	pod, provider := run.NS("pod"), run.NS("provider")
	h := pod.Netlink()
	b := bundle()
	b.Model.LocalAddress = b.Model.ServiceCIDR.Addr().Next()
	b.Model.Uplink = &model.Uplink{Interface: "net1", Address: netip.MustParsePrefix(uplinkPortAddr + "/24"), Gateway: netip.MustParseAddr("198.51.100.1")}
	d, fw := &fakeDriver{}, &fakeFirewall{}
	e := &Engine{Driver: d, Firewall: fw, Log: logr.Discard(), Netlink: h}
	for i := 0; i < 2; i++ {
		if err := e.Apply(context.Background(), Update{Bundle: b}); !errors.Is(err, ErrUplinkMissing) {
			t.Fatalf("without net1: Apply %v, want it to wait for the uplink", err)
		}
		if i == 0 {
			netns.Veth(pod, "net1", provider, "p0") // the NIC comes, its address later
		}
	}
	if d.applied != 0 || fw.gateOpens != 0 {
		t.Fatalf("before net1: driver applied %d times, gate opened %d times", d.applied, fw.gateOpens)
	}
	pod.MustRun("ip", "addr", "add", uplinkPortAddr+"/24", "dev", "net1")
	if err := e.Apply(context.Background(), Update{Bundle: b}); err != nil {
		t.Fatal(err)
	}
	if d.applied != 1 || fw.gateOpens != 1 {
		t.Fatalf("with net1: driver applied %d times, gate opened %d times", d.applied, fw.gateOpens)
	}
	if rules := pod.MustRun("ip", "rule", "show"); !strings.Contains(rules, "from "+uplinkPortAddr+" lookup "+strconv.Itoa(UplinkTable)) {
		t.Fatalf("no uplink rule:\n%s", rules)
	}
}
