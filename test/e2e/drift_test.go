package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
)

// The gateway's ruleset is sabotaged inside its running gateway's namespace — the table
// deleted, the whole ruleset flushed (what a node's `systemctl restart nftables` does), and a
// changed table (an accept-all at the top of the forward chain and a DNAT and masquerade for
// the ungranted peer) — while that peer, site-b (a tunnel, no grant), probes every 20 ms what
// the sabotage opens to it. Each time the agent re-applies the rendered ruleset on its own:
// the table lists as it did before, the repair is counted in bnerd_vpn_ruleset_repairs_total,
// logged and evented on the VPNGateway, site-b's probes are refused again, a connection site-b
// opened through the hole stops carrying data, and site-a, granted "web", gets through. The
// window from the sabotage to the probe refused again is printed.
func TestRulesetDriftRepaired(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, vpnv1.ProtocolIPsec, uniqueNamespace("e2e-drift"), "")
	agentProc := l.startAgent()
	a, b := l.newSite("site-a"), l.newSite("site-b")
	l.configureDevice(a)
	l.configureDevice(b)
	l.createPeer(a, "web")
	l.createPeer(b) // a tunnel, no grant
	l.waitAgentReady(agentProc, 30*time.Second)
	waitFor(t, "site-a through web", 60*time.Second, func() error {
		if err := a.tcpRequest(l.web(80), time.Second); err != nil {
			return fmt.Errorf("%v (agent: %s)", err, tail(agentProc.Output()))
		}
		return nil
	})
	for _, s := range []*labSite{a, b} {
		waitFor(t, s.name+" Connected", 60*time.Second, func() error { _, err := peerConnected(l.k8sNS, s.name); return err })
	}
	applied, err := l.nftState()
	if err != nil {
		t.Fatal(err)
	}
	canary, web := l.gatewayService(labCanaryPort), l.web(80)
	for _, target := range []string{canary, web} {
		if err := b.tcpRequest(target, 300*time.Millisecond); err == nil {
			t.Fatalf("site-b reached %s before any sabotage", target)
		}
	}

	cases := []struct {
		name     string
		sabotage string // an nft script, one transaction in the gateway's namespace
		target   string // what it opens to site-b
		kind     string
	}{
		{"table deleted", "delete table ip bnerd_vpn\n", canary, agent.DriftMissing},
		{"ruleset flushed", "flush ruleset\n", canary, agent.DriftMissing},
		{"rules changed", fmt.Sprintf(`insert rule ip bnerd_vpn forward accept
insert rule ip bnerd_vpn prerouting ip saddr %[1]s ip daddr %[2]s tcp dport 80 dnat to %[3]s:%[4]d
insert rule ip bnerd_vpn postrouting ip saddr %[1]s masquerade
`, b.subnet, l.webVIP, labBackend, labWebPort), web, agent.DriftChanged},
	}
	var windows []string
	passedAny := false
	for _, c := range cases {
		repairs := l.rulesetRepairs()
		logged := len(agentLogTimes(agentProc.Output(), repairLogMsg))
		sabotaged := time.Now()
		if out, err := l.gw.RunInput(c.sabotage, "nft", "-f", "-"); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, out)
		}
		probe := startRefusalProbe(t, b, c.target, 20*time.Millisecond, 300*time.Millisecond)
		// A connection through the hole, if the hole is still open: it must not outlive the repair.
		held, heldErr := dialTCPStream(t, b.ns.Name, b.addr, c.target, 20*time.Millisecond)

		waitFor(t, c.name+": ruleset repaired and counted", 10*time.Second, func() error {
			if n := l.rulesetRepairs(); n <= repairs {
				return fmt.Errorf("repairs counted: %v (agent: %s)", n, tail(agentProc.Output()))
			}
			got, err := l.nftState()
			if err != nil {
				return err
			}
			if got != applied {
				return fmt.Errorf("the table lists\n%s\nwant\n%s", got, applied)
			}
			return nil
		})
		repairSeen := time.Now()
		// The probe is refused again: a second of probes sent after the repair, none passing.
		waitFor(t, c.name+": a second of probes after the repair", 10*time.Second, func() error {
			if n := probe.refusedSince(repairSeen); n < 1000/20 {
				return fmt.Errorf("%d probes sent since the repair answered", n)
			}
			return nil
		})
		probe.stop()
		if late := probe.passedSince(repairSeen); len(late) > 0 {
			t.Errorf("%s: site-b's probe of %s passed after the repair at %v", c.name, c.target, late)
		}
		passed, refusedAgain := probe.window()
		passedAny = passedAny || passed > 0
		window := "no probe passed (the repair came first)"
		if passed > 0 {
			window = fmt.Sprintf("refused again %s after the sabotage (%d probes passed before)",
				refusedAgain.Sub(sabotaged).Round(time.Millisecond), passed)
		}
		if ts := agentLogTimes(agentProc.Output(), repairLogMsg); len(ts) > logged {
			window += fmt.Sprintf(", repair logged by the agent after %s", ts[logged].Sub(sabotaged).Round(time.Millisecond))
		} else {
			t.Errorf("%s: the agent did not log the repair", c.name)
		}
		if !strings.Contains(agentProc.Output(), `"drift":"`+c.kind+`"`) {
			t.Errorf("%s: the agent's log does not name the drift %q", c.name, c.kind)
		}
		t.Logf("%s: %s", c.name, window)
		windows = append(windows, c.name+": "+window)

		// The connection site-b opened through the hole carries nothing once the ruleset is
		// back (one line may have been in flight), while a new connection of site-a through
		// web does: its first 50 echoes are the clock. Without any table the namespace has no
		// connection tracking, so a connection from that window meets the restored ruleset as
		// a new one; through a changed table it is tracked, and only the agent's cut of the
		// flows the ruleset did not admit ends it. (Site-a's connections from before a deleted
		// table do not survive it either: untracked, their NAT stops and the gateway answers
		// the backend with a reset.)
		after := -1
		if heldErr == nil {
			after = held.echoes()
		} else {
			t.Logf("%s: no connection through the hole (%v): the repair came first", c.name, heldErr)
		}
		clock := startTCPStream(t, a.ns.Name, a.addr, web, 20*time.Millisecond)
		waitFor(t, c.name+": site-a through web after the repair", 20*time.Second, func() error {
			if n := clock.echoes(); n < 50 {
				return fmt.Errorf("%d echoes", n)
			}
			return nil
		})
		if _, _, _, err := clock.finish(3 * time.Second); err != nil {
			t.Errorf("%s: site-a's connection after the repair: %v", c.name, err)
		}
		if heldErr == nil {
			if n := held.echoes(); n > after+1 {
				t.Errorf("%s: site-b's connection through the hole carried %d more lines after the repair", c.name, n-after)
			}
			held.halt()
		}
	}
	if !passedAny {
		t.Error("no sabotage let a single probe of site-b through: the probes prove nothing")
	}

	// Each repair is an Event on the VPNGateway, naming what was found.
	waitFor(t, "RulesetRepaired events", 10*time.Second, func() error {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(l.k8sNS)); err != nil {
			return err
		}
		seen := map[string]int32{}
		for _, e := range events.Items {
			if e.Reason != agent.ReasonRulesetRepaired || e.InvolvedObject.Kind != "VPNGateway" || e.InvolvedObject.Name != "gw" || e.Type != corev1.EventTypeWarning {
				continue
			}
			for _, kind := range []string{agent.DriftMissing, agent.DriftChanged} {
				if strings.Contains(e.Message, " was "+kind+" ") {
					seen[kind] += max(e.Count, 1)
				}
			}
		}
		if seen[agent.DriftMissing] < 2 || seen[agent.DriftChanged] < 1 {
			return fmt.Errorf("RulesetRepaired events by drift: %v", seen)
		}
		return nil
	})
	t.Logf("sabotage -> site-b's probe refused again (probes every 20 ms, 300 ms timeout; ruleset checked every 1 s):\n  %s",
		strings.Join(windows, "\n  "))
}

// repairLogMsg is the agent's log message for a repair.
const repairLogMsg = "nftables ruleset drifted from the one applied; re-applied it"

var repairsLine = regexp.MustCompile(`(?m)^bnerd_vpn_ruleset_repairs_total\{gateway="gw",namespace="[^"]*"\} ([0-9.e+]+)$`)

// rulesetRepairs reads bnerd_vpn_ruleset_repairs_total from the agent's metrics.
func (l *lab) rulesetRepairs() float64 {
	l.tb.Helper()
	_, body, err := l.agentGet("/metrics")
	if err != nil {
		l.tb.Fatalf("scraping the agent: %v", err)
	}
	m := repairsLine.FindStringSubmatch(body)
	if m == nil {
		l.tb.Fatalf("no bnerd_vpn_ruleset_repairs_total in the agent's metrics")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// dialTCPStream is startTCPStream returning the dial's error instead of failing the test.
func dialTCPStream(tb testing.TB, ns string, local netip.Addr, addr string, every time.Duration) (*tcpStream, error) {
	c, err := dialIn(ns, "tcp", local, addr, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	s := &tcpStream{conn: c, every: every, lastEcho: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{}), recvDone: make(chan struct{})}
	tb.Cleanup(func() { s.halt(); c.Close(); <-s.recvDone })
	go s.receive()
	go s.send()
	return s, nil
}

// refusalProbe opens a new TCP connection from a site to a target every interval (each with
// its own SYN through the tunnel) and records, by send time, which ones connected.
type refusalProbe struct {
	mu       sync.Mutex
	attempts []probeAttempt
	halt     chan struct{}
	wg       sync.WaitGroup
}

type probeAttempt struct {
	sent           time.Time
	done, answered bool
}

func startRefusalProbe(tb testing.TB, s *labSite, target string, every, timeout time.Duration) *refusalProbe {
	p := &refusalProbe{halt: make(chan struct{})}
	tb.Cleanup(p.stop)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			p.mu.Lock()
			i := len(p.attempts)
			p.attempts = append(p.attempts, probeAttempt{sent: time.Now()})
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				c, err := dialIn(s.ns.Name, "tcp", s.addr, target, timeout)
				if err == nil {
					c.Close()
				}
				p.mu.Lock()
				p.attempts[i].done, p.attempts[i].answered = true, err == nil
				p.mu.Unlock()
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

func (p *refusalProbe) stop() {
	select {
	case <-p.halt:
	default:
		close(p.halt)
	}
	p.wg.Wait()
}

// refusedSince counts the finished probes sent at or after t that were refused.
func (p *refusalProbe) refusedSince(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.attempts {
		if a.done && !a.answered && !a.sent.Before(t) {
			n++
		}
	}
	return n
}

// passedSince lists the send times of the probes sent at or after t that connected.
func (p *refusalProbe) passedSince(t time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, a := range p.attempts {
		if a.answered && !a.sent.Before(t) {
			out = append(out, a.sent.Format(time.StampMilli))
		}
	}
	return out
}

// window is how many probes connected and, when any did, when the first probe after the last
// one that connected was sent: from then on the target refused the site.
func (p *refusalProbe) window() (passed int, refusedAgain time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := -1
	for i, a := range p.attempts {
		if a.answered {
			passed++
			last = i
		}
	}
	if last >= 0 && last+1 < len(p.attempts) {
		return passed, p.attempts[last+1].sent
	}
	return passed, time.Time{}
}
