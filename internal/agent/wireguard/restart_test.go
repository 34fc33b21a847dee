package wireguard_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

// The gateway's userspace device dies with its process (SIGKILL) while a roaming site — no
// endpoint on the gateway's side, the site sends a keepalive every 25 s and pings — holds a
// session with it. A new driver with the same state file puts the endpoint the old device last
// saw back and initiates a handshake at once: the site's pings are answered again within a
// round trip of the new device's configuration, where the site alone would hold on to its dead
// session for 15 s (KEEPALIVE_TIMEOUT + REKEY_TIMEOUT) before it handshakes anew. The control:
// with the state file gone, the new device has no endpoint and the site's own retry brings the
// tunnel back (its time is logged). The state file holds public keys and addresses only.
// A new pod has no state file (its emptyDir is new): the endpoint the VPNPeer's status recorded
// (Options.LastSeen) serves as well.
func TestRestartReachesRoamingPeerAtOnce(t *testing.T) {
	netns.Skip(t, "ping")
	t.Run("remembered", func(t *testing.T) { testRestart(t, restartRemembered) })
	t.Run("forgotten", func(t *testing.T) { testRestart(t, restartForgotten) })
	t.Run("from the peer's status", func(t *testing.T) { testRestart(t, restartFromStatus) })
}

// What the restarted driver knows of the site's endpoint.
const (
	restartRemembered = iota // the state file
	restartForgotten         // nothing
	restartFromStatus        // no state file; the VPNPeer's status (Options.LastSeen)
)

func testRestart(t *testing.T, knows int) {
	remember := knows != restartForgotten
	run := netns.NewRun(t, nsPrefix)
	gw, site := run.NS("gw"), run.NS("site")
	netns.Veth(site, "vsite", gw, "vgw")
	site.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "vsite")
	gw.MustRun("ip", "addr", "add", "198.51.100.2/24", "dev", "vgw")

	gwKey, siteKey := wgtest.NewKey(t), wgtest.NewKey(t)
	keys := map[string]wgtypes.Key{"gateway private key": gwKey, "site private key": siteKey}
	secrets := wgtest.Secrets{gwKeyRef: []byte(gwKey.String()), siteKeyRef: []byte(siteKey.String())}
	state := filepath.Join(t.TempDir(), "wg0.endpoints.json")
	gwOpts := wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("g"), Mode: wireguard.ModeUserspace, StateFile: state}
	gwNode := wgtest.Start(t, gw, gwOpts)
	siteNode := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s"), Mode: wireguard.ModeUserspace})
	var gwNode2 *wgtest.Node
	defer expectNoKeysInLogs(t, keys, &gwNode, &gwNode2, &siteNode)

	roaming := connectRoamingSite(t, gwNode, siteNode, site, gwKey, siteKey, secrets)
	// The old device learnt the site's endpoint; the driver wrote it down.
	var saved map[string]any
	if err := netns.Eventually(10*time.Second, func() error {
		raw, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		if found := wgtest.FindKeys(string(raw), keys); len(found) > 0 {
			t.Fatalf("key material in the state file: %v", found)
		}
		var f struct {
			Device string `json:"device"`
			Peers  map[string]struct {
				Endpoint string `json:"endpoint"`
			} `json:"peers"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			return err
		}
		if f.Device != gwKey.PublicKey().String() || f.Peers[siteKey.PublicKey().String()].Endpoint != "198.51.100.1:51820" {
			return fmt.Errorf("state file %s", raw)
		}
		return json.Unmarshal(raw, &saved)
	}); err != nil {
		t.Fatal(err)
	}

	// The pinging site, then the gateway's process killed and a new one started.
	stream := startPings(site, "100.64.7.1", 100*time.Millisecond)
	defer stream.stop()
	if err := netns.Eventually(5*time.Second, func() error {
		if stream.answered() < 5 {
			return fmt.Errorf("%d answers", stream.answered())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	gwNode.Kill()
	killed := time.Now()
	if knows != restartRemembered {
		if err := os.Remove(state); err != nil {
			t.Fatal(err)
		}
	}
	if knows == restartFromStatus {
		gwOpts.LastSeen = map[string]string{roaming.Name: "198.51.100.1:51820"}
	}
	gwNode2 = wgtest.Start(t, gw, gwOpts)
	if err := gwNode2.Apply(gatewayConfig(roaming), secrets); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	p := devicePeer(t, gwNode2, siteKey.PublicKey())
	switch {
	case p == nil:
		t.Fatal("the new device has no peer for the site")
	case remember && (p.Endpoint == nil || p.Endpoint.String() != "198.51.100.1:51820"):
		t.Fatalf("the new device's endpoint for the site: %v, want the remembered 198.51.100.1:51820", p.Endpoint)
	case !remember && p.Endpoint != nil:
		t.Fatalf("the new device knows an endpoint without the state file: %v", p.Endpoint)
	}
	before := stream.answered()
	var back time.Time
	if err := netns.Eventually(30*time.Second, func() error {
		if at, ok := stream.answeredAfter(before); ok {
			back = at
			return nil
		}
		return fmt.Errorf("no answer since the restart")
	}); err != nil {
		t.Fatal(err)
	}
	gap := stream.finish()
	t.Logf("remembered endpoint %v: killed -> new device configured %s -> site's pings answered again %s after the configuration; longest gap between answers %s",
		remember, applied.Sub(killed).Round(time.Millisecond), back.Sub(applied).Round(time.Millisecond), gap.Round(time.Millisecond))
	// Generous: the site's own retry takes 15 s; the gateway's initiation one round trip.
	if remember && back.Sub(applied) > 5*time.Second {
		t.Errorf("the tunnel came back %s after the new device's configuration, want the gateway's handshake (well under the site's 15 s retry)", back.Sub(applied).Round(time.Millisecond))
	}
}

// expectNoKeysInLogs checks the nodes' logs for key material, and prints them when the test
// failed; a node may still be nil (started later, or never).
func expectNoKeysInLogs(t *testing.T, keys map[string]wgtypes.Key, nodes ...**wgtest.Node) {
	for _, p := range nodes {
		n := *p
		if n == nil {
			continue
		}
		if found := wgtest.FindKeys(n.Log(), keys); len(found) > 0 {
			t.Errorf("%s: key material in the log: %v", n.NS.Name, found)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", n.NS.Name, n.Log())
		}
	}
}

// connectRoamingSite configures the gateway with the site as a roaming peer (no endpoint on its
// side, site-a, 203.0.113.0/28) and the site with the gateway at 198.51.100.2:51820 (keepalive
// 25 s), waits for a ping through the tunnel, and returns the gateway's peer.
func connectRoamingSite(t *testing.T, gw, siteNode *wgtest.Node, site *netns.NS, gwKey, siteKey wgtypes.Key, secrets wgtest.Secrets) rwg.Peer {
	t.Helper()
	roaming := rwg.Peer{Name: "site-a", PublicKey: siteKey.PublicKey().String(), AllowedIPs: pfx("203.0.113.0/28")}
	if err := gw.Apply(gatewayConfig(roaming), secrets); err != nil {
		t.Fatal(err)
	}
	if err := siteNode.Apply(siteConfig(siteKeyRef, "203.0.113.1/28", rwg.Peer{
		Name: "gateway", PublicKey: gwKey.PublicKey().String(), AllowedIPs: pfx("100.64.7.0/24"),
		Endpoint: "198.51.100.2:51820", PersistentKeepalive: 25,
	}), secrets); err != nil {
		t.Fatal(err)
	}
	if err := netns.Eventually(10*time.Second, func() error { return quickPing(site, "100.64.7.1") }); err != nil {
		t.Fatal(err)
	}
	return roaming
}

// quickPing sends one ping and waits 300 ms for the answer.
func quickPing(ns *netns.NS, dst string) error {
	out, err := ns.Run("ping", "-n", "-c", "1", "-W", "0.3", dst)
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v: %s", dst, ns.Name, err, out)
	}
	return nil
}

// pings is a stream of pings, one every interval (each waiting up to 300 ms for its answer),
// recording when each was answered.
type pings struct {
	done     chan struct{}
	halt     chan struct{}
	times    chan time.Time
	inFlight sync.WaitGroup
	got      []time.Time
}

func startPings(ns *netns.NS, dst string, every time.Duration) *pings {
	p := &pings{done: make(chan struct{}), halt: make(chan struct{}), times: make(chan time.Time, 1024)}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			p.inFlight.Add(1)
			go func() {
				defer p.inFlight.Done()
				if quickPing(ns, dst) == nil {
					p.times <- time.Now()
				}
			}()
			select {
			case <-p.halt:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *pings) drain() {
	for {
		select {
		case at := <-p.times:
			p.got = append(p.got, at)
		default:
			return
		}
	}
}

func (p *pings) answered() int { p.drain(); return len(p.got) }

// answeredAfter is the first answer after the first n (and whether there is one).
func (p *pings) answeredAfter(n int) (time.Time, bool) {
	p.drain()
	if len(p.got) <= n {
		return time.Time{}, false
	}
	first := p.got[n]
	for _, at := range p.got[n:] {
		if at.Before(first) {
			first = at
		}
	}
	return first, true
}

func (p *pings) stop() {
	select {
	case <-p.halt:
	default:
		close(p.halt)
	}
	<-p.done
}

// finish stops the stream and returns the longest time between two answers.
func (p *pings) finish() time.Duration {
	p.stop()
	p.inFlight.Wait() // the last pings' answers (or their 300 ms timeouts)
	p.drain()
	slices.SortFunc(p.got, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	for i := 1; i < len(p.got); i++ {
		gap = max(gap, p.got[i].Sub(p.got[i-1]))
	}
	return gap
}
