package firewall

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// Packets keep meeting a whole ruleset while it changes: by deltas, and by whole loads into the
// table (the peer that comes and goes has a prefix length no other peer has, so its sets and
// rules come and go with it — a structural change, loaded whole by nft -f, nft.Reload).
func TestPacketsDuringChanges(t *testing.T) {
	t.Run("deltas", func(t *testing.T) {
		testPacketsDuringChanges(t, site{name: "z", subnets: []string{"203.0.113.32/28"}, grants: []string{"web", "db"}}, pathDelta)
	})
	t.Run("whole loads", func(t *testing.T) {
		testPacketsDuringChanges(t, site{name: "z", subnets: []string{"203.0.113.32/27"}, grants: []string{"web", "db"}}, pathReload)
	})
}

// Packets keep meeting a whole ruleset while changes are applied. A granted peer (a, granted the
// web exposure) and an ungranted one (x, granted db only) send UDP datagrams to web's virtual
// IP, each from a new source port — a new flow, so each one is looked up in the grants afresh
// — while peer z is added and removed again and again, each change applied by path. The backend owns the virtual
// IP too, so a datagram of x that slipped through, translated or not, would reach it.
//
//	peers (203.0.113.2 a, 203.0.113.18 x) ── ipsec0 [gw] eth0 ── backend 192.0.2.10, 100.64.7.10
//
// Every datagram of a arrives, none of x's does, a's drop counter stays 0 and x's counts every
// one of x's: no granted packet lost, no ungranted one passed, no drop uncounted.
//
// (When whole loads replaced the table, a new flow's first packet could meet the old and the
// new NAT chain on either side of the generation flip, be translated by neither and be dropped
// as ungranted — 1 of 21,529 granted datagrams in one CI run — and the drops between reading
// the old table's counters and the new table went uncounted.)
func testPacketsDuringChanges(t *testing.T, z site, path applyPath) {
	netns.Skip(t, "nft")
	run := netns.NewRun(t, "bfp")
	gw, peers, backend := run.NS("gw"), run.NS("peers"), run.NS("backend")
	f := &Firewall{NFT: writeWrapper(t, gw.Name), NetNS: filepath.Join("/run/netns", gw.Name)}
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()

	a := site{name: "a", subnets: []string{"203.0.113.0/28"}, grants: []string{"web"}}
	x := site{name: "x", subnets: []string{"203.0.113.16/28"}, grants: []string{"db"}}
	without, with := render(t, testGateway("192.0.2.20", nil, a, x)), render(t, testGateway("192.0.2.20", nil, a, x, z))
	if err := f.Apply(ctx, without); err != nil { // fail-closed: the ruleset before the links
		t.Fatal(err)
	}

	netns.Veth(gw, "ipsec0", peers, "eth0")
	netns.Veth(gw, "eth0", backend, "eth0")
	gw.MustRun("ip", "addr", "add", "100.64.7.1/32", "dev", "ipsec0")
	gw.MustRun("ip", "route", "add", "203.0.113.0/24", "dev", "ipsec0")
	gw.MustRun("ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
	gw.MustRun("ip", "route", "add", "100.64.7.0/24", "dev", "eth0") // untranslated packets go on
	gw.Sysctl("net.ipv4.ip_forward", "1")
	for _, addr := range []string{"203.0.113.2/28", "203.0.113.18/28"} {
		peers.MustRun("ip", "addr", "add", addr, "dev", "eth0")
	}
	peers.MustRun("ip", "route", "add", "100.64.7.0/24", "via", "100.64.7.1", "dev", "eth0", "onlink")
	backend.MustRun("ip", "addr", "add", "192.0.2.10/24", "dev", "eth0")
	backend.MustRun("ip", "addr", "add", "100.64.7.10/32", "dev", "eth0")

	// The backend's socket, opened in its namespace; what it receives, by sender.
	var listener *net.UDPConn
	if err := netns.Do(backend.Name, func() (err error) {
		listener, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 443})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Room for every datagram the test sends even when the reader falls behind: a datagram
	// lost to a full socket buffer would look like one the firewall lost.
	raw, err := listener.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	}); err != nil || sockErr != nil {
		t.Fatal(err, sockErr)
	}
	defer listener.Close()
	var mu sync.Mutex
	received := map[string]int{}
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := listener.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			received[strings.SplitN(string(buf[:n]), "-", 2)[0]]++
			mu.Unlock()
		}
	}()
	got := func(from string) int {
		mu.Lock()
		defer mu.Unlock()
		return received[from]
	}
	// send sends one datagram from a new socket (a new source port) of the peers' namespace.
	send := func(from, src string, i int) error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.ParseIP("100.64.7.10"), Port: 443})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = fmt.Fprintf(c, "%s-%d", from, i)
		return err
	}

	// The path works before anything changes (neighbours resolved).
	if err := netns.Do(peers.Name, func() error { return send("warm", "203.0.113.2", 0) }); err != nil {
		t.Fatal(err)
	}
	if err := netns.Eventually(5*time.Second, func() error {
		if got("warm") == 0 {
			return fmt.Errorf("nothing from peer a reached the backend")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Changes, all by path, while both peers send; the senders go on until the changes end.
	const changes = 40
	done := make(chan error, 1)
	go func() {
		for i := range changes {
			text := with
			if i%2 == 1 {
				text = without
			}
			f.last = pathNone
			if err := f.Apply(ctx, text); err != nil {
				done <- err
				return
			}
			if f.last != path {
				done <- fmt.Errorf("change %d was applied by path %d, want %d", i, f.last, path)
				return
			}
		}
		done <- nil
	}()
	sent := map[string]int{}
	var changeErr error
	if err := netns.Do(peers.Name, func() error {
		for finished := false; !finished || sent["a"] < 200; {
			select {
			case changeErr = <-done:
				finished = true
			default:
			}
			for _, p := range []struct{ name, src string }{{"a", "203.0.113.2"}, {"x", "203.0.113.18"}} {
				if err := send(p.name, p.src, sent[p.name]); err != nil {
					return err
				}
				sent[p.name]++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if changeErr != nil {
		t.Fatal(changeErr)
	}
	if err := netns.Eventually(10*time.Second, func() error {
		if n := got("a"); n != sent["a"] {
			return fmt.Errorf("%d of peer a's %d datagrams reached the backend", n, sent["a"])
		}
		return nil
	}); err != nil {
		if counters, cerr := f.Counters(ctx); cerr == nil {
			t.Logf("counters %v", counters)
		}
		t.Log(backend.MustRun("nstat", "-az", "UdpRcvbufErrors", "UdpInDatagrams"))
		t.Fatal(err)
	}
	counters, err := f.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := got("x"); n != 0 {
		t.Errorf("%d of peer x's datagrams reached the backend", n)
	}
	if c := counters[nft.DropName("drops_in_28", netip.MustParseAddr("203.0.113.0"))].Packets; c != 0 {
		t.Errorf("peer a's drop counter: %d", c)
	}
	if c := counters[nft.DropName("drops_in_28", netip.MustParseAddr("203.0.113.16"))].Packets; c != uint64(sent["x"]) {
		t.Errorf("peer x's drop counter: %d, peer x sent %d", c, sent["x"])
	}
	t.Logf("%d changes; peer a sent %d datagrams, %d received; peer x sent %d, none received", changes, sent["a"], got("a"), sent["x"])
}
