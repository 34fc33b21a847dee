package wireguard_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

// TestHandshakeFloodCostsOtherPeersNothing: a hostile site that knows the gateway's public key
// (every peer does) floods it with handshake initiations carrying a valid mac1, from a hundred
// addresses of its link, while a peer's site probes through its tunnel. Each costs the gateway
// a Diffie-Hellman unless it answers with a cookie; the peer's probes all come back.
func TestHandshakeFloodCostsOtherPeersNothing(t *testing.T) {
	netns.Skip(t, "ping")
	run := netns.NewRun(t, nsPrefix)
	gw, site, flooder := run.NS("gw"), run.NS("site"), run.NS("flood")
	netns.Veth(site, "vsite", gw, "vgw")
	site.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "vsite")
	gw.MustRun("ip", "addr", "add", "198.51.100.2/24", "dev", "vgw")
	netns.VethAddr(flooder, "vflood", "192.0.2.2/24", gw, "vgwf", "192.0.2.1/24")
	var srcs []netip.Addr
	for i := 10; i < 110; i++ {
		addr := netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i))
		flooder.MustRun("ip", "addr", "add", addr.String()+"/32", "dev", "vflood")
		srcs = append(srcs, addr)
	}

	gwKey, siteKey := wgtest.NewKey(t), wgtest.NewKey(t)
	secrets := wgtest.Secrets{gwKeyRef: []byte(gwKey.String()), siteKeyRef: []byte(siteKey.String())}
	gwNode := wgtest.Start(t, gw, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("g"), Mode: wireguard.ModeUserspace})
	siteNode := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s"), Mode: wireguard.ModeUserspace})
	connectRoamingSite(t, gwNode, siteNode, site, gwKey, siteKey, secrets)

	conns := make([]*net.UDPConn, len(srcs))
	err := netns.Do(flooder.Name, func() error {
		for i, src := range srcs {
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
			if err != nil {
				return err
			}
			conns[i] = c
		}
		return nil
	})
	for _, c := range conns {
		if c != nil {
			defer c.Close()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cookies := 0
	var readers sync.WaitGroup
	for _, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 256)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return // past the deadline set when the flood stops
				}
				if n >= 4 && binary.LittleEndian.Uint32(buf) == wgtest.MessageCookie {
					mu.Lock()
					cookies++
					mu.Unlock()
				}
			}
		}()
	}

	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:51820"))
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			case <-tick.C:
			}
			if _, err := conns[n%len(conns)].WriteToUDP(wgtest.HandshakeInitiation(gwKey.PublicKey()), to); err != nil {
				t.Errorf("sending a handshake initiation: %v", err)
			}
			n++
		}
	}()
	start := time.Now()
	probe, err := site.Ping("", "100.64.7.1", 50, 100*time.Millisecond, 2*time.Second) // 5 s of probes, under the flood
	elapsed := time.Since(start)
	close(stop)
	n := <-sent
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	}
	readers.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood: %d handshake initiations (valid mac1) from %d addresses in %s, %d cookie replies; the site's probes: %d sent, %d answered",
		n, len(srcs), elapsed.Round(time.Millisecond), cookies, probe.Transmitted, probe.Received)
	if n < 500 {
		t.Errorf("only %d initiations sent: not a flood", n)
	}
	if probe.Transmitted != 50 || probe.Received != probe.Transmitted {
		t.Errorf("the site lost %d of %d probes to the flood: %s", probe.Transmitted-probe.Received, probe.Transmitted, probe.Output)
	}
}
