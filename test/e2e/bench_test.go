package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// Goals of the gateway-agent issue.
const (
	goalCRToConnected = 3 * time.Second
	goalPeerToTunnel  = time.Second
)

// BenchmarkTunnel measures, with the agent already running against its gateway (pod start
// excluded), how long a new peer takes from its VPNPeer being applied to the API server
//   - until the VPNPeer's Connected condition is True (goal ≤ 3 s), and
//   - until the first request through its tunnel is answered (goal ≤ 1 s),
//
// and, for the second, also from the moment the agent applied the change. Each iteration adds
// one site whose device is already configured (as a customer's is, from our parameter sheet),
// then creates its VPNPeer; a UDP request every 10 ms from the site through the exposure
// tells when the tunnel carries traffic, and the VPNPeer is read every 10 ms. `make bench`
// runs one iteration (-benchtime 1x); the figures are printed and reported as metrics.
func BenchmarkTunnel(b *testing.B) {
	b.Run("WireGuard", func(b *testing.B) { benchTunnel(b, vpnv1.ProtocolWireGuard) })
	b.Run("IPsec", func(b *testing.B) { benchTunnel(b, vpnv1.ProtocolIPsec) })
}

func benchTunnel(b *testing.B, proto vpnv1.Protocol) {
	if b.N > 16 {
		b.Fatalf("b.N = %d: one lab has room for 16 sites; run with -benchtime 1x (make bench) or at most 16x", b.N)
	}
	// Go may call a benchmark function more than once (growing b.N): uniqueNamespace.
	l := newLab(b, proto, uniqueNamespace("e2e-bench-"+strings.ToLower(string(proto))), "bbn")
	agent := l.startAgent()
	l.waitAgentReady(agent, 60*time.Second)

	var toConnected, toTunnel, appliedToTunnel time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := l.newSite(fmt.Sprintf("site-%d", i))
		l.configureDevice(s)
		stream := startUDPStream(b, s.ns.Name, s.addr, l.web(53), 10*time.Millisecond)
		applies := len(agentLogTimes(agent.Output(), "configuration applied"))
		b.StartTimer()

		created := l.createPeer(s, "web")
		var connected, up time.Time
		deadline := created.Add(30 * time.Second)
		for connected.IsZero() || up.IsZero() {
			if time.Now().After(deadline) {
				b.Fatalf("%s: not connected (%v) or no traffic (%v) within 30 s (agent: %s)", s.name, connected, up, tail(agent.Output()))
			}
			if connected.IsZero() {
				if _, err := peerConnected(l.k8sNS, s.name); err == nil {
					connected = time.Now()
				}
			}
			if up.IsZero() {
				up = stream.firstAnswer()
			}
			time.Sleep(10 * time.Millisecond) // the measurement's resolution: poll pacing, not synchronisation
		}
		b.StopTimer()
		stream.finish(0)
		var applied time.Time
		waitFor(b, "the agent's log of the change", 10*time.Second, func() error {
			times := agentLogTimes(agent.Output(), "configuration applied")
			if len(times) <= applies {
				return fmt.Errorf("no apply logged since the VPNPeer was created")
			}
			applied = times[applies]
			return nil
		})
		c, u, a := connected.Sub(created), up.Sub(created), up.Sub(applied)
		fmt.Printf("%s: %s: CR applied -> Connected %s (goal ≤ %s: %s); CR applied -> first request through the tunnel %s (goal ≤ %s: %s); agent applied the change -> tunnel up %s\n",
			b.Name(), s.name, c.Round(time.Millisecond), goalCRToConnected, verdict(c, goalCRToConnected),
			u.Round(time.Millisecond), goalPeerToTunnel, verdict(u, goalPeerToTunnel), a.Round(time.Millisecond))
		toConnected += c
		toTunnel += u
		appliedToTunnel += a
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(toConnected.Seconds()*1000/n, "ms-cr-to-connected")
	b.ReportMetric(toTunnel.Seconds()*1000/n, "ms-cr-to-tunnel")
	b.ReportMetric(appliedToTunnel.Seconds()*1000/n, "ms-applied-to-tunnel")
}

func verdict(d, goal time.Duration) string {
	if d <= goal {
		return "met"
	}
	return "MISSED"
}
