package strongswan

import (
	"crypto/ecdh"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// floodChildren is the site's swanctl.conf with n more children than its device needs, each
// narrowed to one address of its subnet: every one fits the gateway's configuration for the
// peer, so charon would accept them all.
func (s *site) floodChildren(n int) string {
	conf := s.conf()
	var extra strings.Builder
	for i := range n {
		fmt.Fprintf(&extra, `      flood-%d {
        local_ts = 203.0.113.%d/32
        remote_ts = %s
        esp_proposals = %s
        start_action = none
      }
`, i, i, serviceCIDR, espProposal)
	}
	// The extra children go into the one connection, beside its own child.
	return strings.Replace(conf, "    children {\n", "    children {\n"+extra.String(), 1)
}

// twoPeersUp configures sites a (the flooding one) and b (the probing one) as the gateway's
// peers and waits until both tunnels are up and b's carries traffic.
func (f *fixture) twoPeersUp() (a, b *site) {
	f.t.Helper()
	a = f.addSite("site-a", 0, randomPSK(f.t))
	b = f.addSite("site-b", 1, randomPSK(f.t))
	f.secrets.set(a.secret, a.psk)
	f.secrets.set(b.secret, b.psk)
	f.apply(f.bundle(a, b))
	f.waitPeer(a.name, 30*time.Second, inState(agent.StateEstablished))
	f.waitPeer(b.name, 30*time.Second, inState(agent.StateEstablished))
	f.pingThrough(b, "before the flood")
	return a, b
}

// TestChildSAsBoundedPerPeer: a peer with a valid key negotiates many CHILD_SAs, each narrowed
// to one address of its subnet. The gateway holds at most two per configured child (the rest
// are terminated and counted in ChildSAsRefused), and another peer's tunnel carries traffic
// throughout.
func TestChildSAsBoundedPerPeer(t *testing.T) {
	f := newFixture(t)
	a, b := f.twoPeersUp()

	const flood = 12
	if err := a.charon.LoadSwanctlConf(a.floodChildren(flood)); err != nil {
		t.Fatal(err)
	}
	for i := range flood {
		// Each initiation waits for its CREATE_CHILD_SA exchange; a terminated CHILD_SA may
		// report failure to the site: only what the gateway holds counts.
		_, _ = a.charon.Swanctl("--initiate", "--child", fmt.Sprintf("flood-%d", i), "--timeout", "5")
	}
	limit := 2 // one configured child for the peer
	// A child the site's own kernel-libipsec could not install (a route it failed to add, on a
	// loaded machine) is deleted by the site itself: the gateway has nothing to refuse.
	siteFailed := uint64(strings.Count(a.charon.Log(), "unable to install IPsec policies"))
	p := f.waitPeer(a.name, 30*time.Second, func(p agent.PeerState) error {
		if p.ChildSAsRefused+siteFailed < flood+1-uint64(limit) {
			return fmt.Errorf("%d CHILD_SAs refused (%d failed at the site)", p.ChildSAsRefused, siteFailed)
		}
		return nil
	})
	err := charontest.Eventually(15*time.Second, func() error {
		for _, sa := range f.listSAs()[a.name] {
			live := 0
			for _, c := range sa.Children {
				if liveChild(c.State) {
					live++
				}
			}
			if live > limit {
				return fmt.Errorf("the gateway holds %d CHILD_SAs of %s's IKE_SA %s, limit %d", live, a.name, sa.UniqueID, limit)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	t.Logf("%s: %d CHILD_SAs refused, state %s", a.name, p.ChildSAsRefused, p.State)
	f.pingThrough(b, "after the flood")
	if q, err := f.peers(); err != nil || q[b.name].ChildSAsRefused != 0 {
		t.Errorf("the other peer was refused CHILD_SAs: %+v (%v)", q[b.name], err)
	}
}

// imageDoSSettings are the flood limits of the gateway image's strongswan.conf (cookie and
// block thresholds, the half-open limit and timeout): the lines as a strongswan.conf fragment,
// and their values.
func imageDoSSettings(t *testing.T) (string, map[string]int) {
	t.Helper()
	conf, err := os.ReadFile("../../../hack/lab/image/strongswan.conf")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"cookie_threshold", "block_threshold", "init_limit_half_open", "half_open_timeout"}
	var lines []string
	values := map[string]int{}
	for _, line := range strings.Split(string(conf), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if k = strings.TrimSpace(k); ok && slices.Contains(keys, k) {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("gateway image's strongswan.conf: %s: %v", k, err)
			}
			values[k] = n
			lines = append(lines, fmt.Sprintf("  %s = %d", k, n))
		}
	}
	if len(values) != len(keys) {
		t.Fatalf("gateway image's strongswan.conf sets %v, want all of %v", values, keys)
	}
	return strings.Join(lines, "\n"), values
}

// floodResult is what a flood of IKE_SA_INIT requests got back.
type floodResult struct {
	sent, cookies, answered, other int
}

// floodIKEInit sends IKE_SA_INIT requests for the fixture's IKE proposal from every address of
// srcs in turn (sockets in ns) to dst, one per tick of every, until stop is closed, and counts
// the answers.
func floodIKEInit(t *testing.T, ns *charontest.Netns, srcs []netip.Addr, dst netip.AddrPort, every time.Duration, stop <-chan struct{}) floodResult {
	t.Helper()
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ke := key.PublicKey().Bytes()[1:]                                              // ecp256 (group 19): x || y, without the uncompressed-point tag
	proposal := charontest.IKEProposal{Encr: 20, EncrKeyBits: 256, PRF: 5, DH: 19} // aes256gcm16-prfsha256-ecp256
	conns := make([]*net.UDPConn, len(srcs))
	err = netns.Do(ns.Name, func() error {
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

	var res floodResult
	var mu sync.Mutex
	var readers sync.WaitGroup
	for _, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return // past the deadline set at stop
				}
				kind, _ := charontest.ParseIKEInitAnswer(buf[:n])
				mu.Lock()
				switch kind {
				case charontest.AnswerCookie:
					res.cookies++
				case charontest.AnswerSA:
					res.answered++
				default:
					res.other++
				}
				mu.Unlock()
			}
		}()
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	to := net.UDPAddrFromAddrPort(dst)
	nonce := make([]byte, 32)
	for i := 0; ; i++ {
		select {
		case <-stop:
			// answers still on their way are counted until the sockets are quiet
			for _, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			}
			readers.Wait()
			mu.Lock()
			defer mu.Unlock()
			return res
		case <-tick.C:
		}
		var spi [8]byte
		_, _ = rand.Read(spi[:])
		_, _ = rand.Read(nonce)
		if _, err := conns[i%len(conns)].WriteToUDP(charontest.IKESAInit(spi, proposal, ke, nonce), to); err != nil {
			t.Errorf("sending IKE_SA_INIT: %v", err)
		}
		mu.Lock()
		res.sent++
		mu.Unlock()
	}
}

// halfOpen is the gateway charon's count of half-open IKE_SAs (VICI stats).
func (f *fixture) halfOpen() (int, error) {
	s, err := vici.NewSession(vici.WithSocketPath(f.gw.Socket))
	if err != nil {
		return 0, err
	}
	defer s.Close()
	m, err := s.CommandRequest("stats", nil)
	if err != nil {
		return 0, err
	}
	ikesas, ok := m.Get("ikesas").(*vici.Message)
	if !ok {
		return 0, fmt.Errorf("stats without ikesas: %v", m.Keys())
	}
	return strconv.Atoi(fmt.Sprint(ikesas.Get("half-open")))
}

// TestIKEInitFloodCostsOtherPeersNothing: peer a's site floods the gateway with IKE_SA_INIT
// requests (one every half millisecond at most) from its own address and a hundred more of its link, while peer b's
// site probes through its tunnel. With the gateway image's flood limits, the gateway holds at
// most its per-address limit of half-open IKE_SAs for a's address and stays under its cookie
// threshold in all (beyond it, a request gets a stateless COOKIE answer), and b's probes all
// come back.
func TestIKEInitFloodCostsOtherPeersNothing(t *testing.T) {
	extra, limits := imageDoSSettings(t)
	f := newFixtureWith(t, charontest.Config{Extra: extra})
	a, b := f.twoPeersUp()

	// the peer's own address (the gateway has an IKE config for it: a request from it makes a
	// half-open IKE_SA) and a hundred more of its link (no config: answered NO_PROPOSAL_CHOSEN)
	srcs := []netip.Addr{netip.MustParseAddr(a.addr)}
	for i := 10; i < 110; i++ {
		addr := netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", i))
		a.ns.MustRun("ip", "addr", "add", addr.String()+"/32", "dev", "veth-site")
		srcs = append(srcs, addr)
	}

	stop := make(chan struct{})
	flooded := make(chan floodResult, 1)
	go func() {
		flooded <- floodIKEInit(t, a.ns, srcs, netip.MustParseAddrPort(a.gwAddr+":500"), 500*time.Microsecond, stop)
	}()
	// the most half-open IKE_SAs the gateway held while the flood went on
	peak := 0
	sampled := make(chan error, 1)
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			n, err := f.halfOpen()
			if err != nil {
				sampled <- err
				return
			}
			peak = max(peak, n)
		}
	}()
	start := time.Now()
	probe := b.ping(t, 50, 100*time.Millisecond) // 5 s of probes, under the flood
	elapsed := time.Since(start)
	close(stop)
	res := <-flooded
	if err := <-sampled; err != nil {
		t.Fatal(err)
	}
	t.Logf("flood: %d IKE_SA_INIT requests from %d addresses in %s: %d answered (half-open), %d COOKIE answers, %d others; the gateway held at most %d half-open IKE_SAs",
		res.sent, len(srcs), elapsed.Round(time.Millisecond), res.answered, res.cookies, res.other, peak)
	t.Logf("%s's probes under the flood: %d sent, %d answered", b.name, probe.Transmitted, probe.Received)

	if res.answered == 0 {
		t.Errorf("no request was answered with an SA: the flood's requests are not ones the gateway accepts, so nothing was tested")
	}
	// one address holds at most block_threshold half-open IKE_SAs, all of them at most
	// cookie_threshold before the gateway demands cookies; charon counts a request once a
	// worker took it, so a few may pass a check together
	if bound := 2 * limits["block_threshold"]; res.answered > bound {
		t.Errorf("the gateway answered %d requests of one address in full, want at most %d (twice the per-address limit %d)", res.answered, bound, limits["block_threshold"])
	}
	if bound := 2 * limits["cookie_threshold"]; peak > bound {
		t.Errorf("the gateway held up to %d half-open IKE_SAs, want at most %d (twice the cookie threshold %d)", peak, bound, limits["cookie_threshold"])
	}
	if probe.Transmitted != 50 || probe.Received != probe.Transmitted {
		t.Errorf("%s lost %d of %d probes to a's flood: %s", b.name, probe.Transmitted-probe.Received, probe.Transmitted, probe.Output)
	}
	f.waitPeer(b.name, 10*time.Second, inState(agent.StateEstablished))
}
