package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// Rekeys and reauthentication under traffic, with real charon daemons on both ends: short
// lifetimes on the gateway (its IKE and CHILD SAs rekeyed by the gateway), on the site (by the
// site), both ends rekeying the same SAs at the same moment (a collision: swanctl --rekey on
// both at once, CHILD and IKE), and the gateway reauthenticating. A UDP stream from the site's
// LAN through its granted exposure (every 100 ms) loses nothing; afterwards the grants are
// what they were (the exposure that is not granted stays refused) and the agent counted the
// rekeys (bnerd_vpn_peer_rekeys_total and the VPNPeer's status.tunnel.rekeys), the tunnel
// never reported down.
func TestIPsecRekeyUnderTraffic(t *testing.T) {
	for _, tc := range []struct {
		name string
		gw   []gen.GatewayMod
		peer []gen.PeerMod
		site charontest.ConnOptions
		// siteRespondsOnly: the site's charon never initiates
		siteRespondsOnly bool
		// collide: the ends rekey at once, by command, rounds times; otherwise the stream
		// runs for span while the lifetimes do their work
		collide bool
		span    time.Duration
		// rekeys is the least the agent must count
		rekeys int
	}{
		// charon counts lifetimes in whole seconds and derives the margins from them (10 %
		// of a rekey time for the IKE SA's hard end, 110 % for a CHILD SA's): below 10 s they
		// round to nothing and SAs expire instead of rekeying, which no real site configures
		{name: "gateway", gw: []gen.GatewayMod{gen.IKERekeyTime(12 * time.Second)}, peer: []gen.PeerMod{gen.ESPRekeyTime(10 * time.Second)},
			span: 26 * time.Second, rekeys: 4},
		{name: "site", site: charontest.ConnOptions{IKERekey: 12 * time.Second, ChildRekey: 10 * time.Second},
			span: 26 * time.Second, rekeys: 4},
		{name: "collision", collide: true, rekeys: 8},
		{name: "reauth", gw: []gen.GatewayMod{gen.IKEReauthTime(12 * time.Second)}, span: 26 * time.Second},
		// the site only answers: one IKE SA, no second one (both ends initiating) to carry the
		// traffic while the gateway reauthenticates the other
		{name: "reauth-alone", gw: []gen.GatewayMod{gen.IKEReauthTime(12 * time.Second)}, siteRespondsOnly: true, span: 26 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, vpnv1.ProtocolIPsec, uniqueNamespace("e2e-rekey-"+tc.name[:3]), "", tc.gw...)
			agent := l.startAgent()
			s := l.newSite("site-a")
			s.conn, s.respondOnly = tc.site, tc.siteRespondsOnly
			l.createPeerWith(s, []string{s.subnet.String()}, &vpnv1.Authorization{Exposures: []string{"web"}}, tc.peer...)
			l.waitAgentReady(agent, 30*time.Second)
			waitGatewayConnection(t, l, s.name)
			l.configureDevice(s)
			l.waitThroughWeb(s, agent)
			rekeysBefore := peerMetric(t, l.gw, "bnerd_vpn_peer_rekeys_total", s.name)

			stream := startUDPStream(t, s.ns.Name, s.addr, l.web(53), 100*time.Millisecond)
			waitFor(t, "the stream flowing", 10*time.Second, func() error {
				if n := stream.answeredCount(); n < 10 {
					return fmt.Errorf("%d answers", n)
				}
				return nil
			})
			if tc.collide {
				for round := 0; round < 4; round++ {
					rekeyBothAtOnce(t, l.gwCharon, s.charon, s.ns, "--child-id", childIDs)
					rekeyBothAtOnce(t, l.gwCharon, s.charon, s.ns, "--ike-id", ikeIDs)
				}
			} else {
				time.Sleep(tc.span) // the lifetimes at work, the stream running
			}
			r := stream.finish(2 * time.Second)

			rekeys := peerMetric(t, l.gw, "bnerd_vpn_peer_rekeys_total", s.name) - rekeysBefore
			collisions := strings.Count(l.gwCharon.Log(), "collision") + strings.Count(s.charon.Log(), "collision")
			reauths := strings.Count(l.gwCharon.Log(), "reauthenticating IKE_SA")
			t.Logf("%s: %s; the agent counted %.0f rekeys, the daemons logged %d collisions, the gateway %d reauthentications",
				tc.name, r, rekeys, collisions, reauths)
			if len(r.Lost) > 0 || r.SendErrs > 0 {
				t.Errorf("%d of %d requests lost, %d not sent, while the SAs were rekeyed (longest outage %s)", len(r.Lost), r.Sent, r.SendErrs, r.Outage.Round(time.Millisecond))
			}
			if rekeys < float64(tc.rekeys) {
				t.Errorf("the agent counted %.0f rekeys, want at least %d", rekeys, tc.rekeys)
			}
			// The VPNPeer's status shows them too (written with the counters, every second here).
			counted := int64(rekeysBefore + rekeys)
			waitFor(t, "the VPNPeer's status showing the rekeys", 10*time.Second, func() error {
				p := &vpnv1.VPNPeer{}
				if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: l.k8sNS, Name: s.name}, p); err != nil {
					return err
				}
				if p.Status.Tunnel == nil || p.Status.Tunnel.Rekeys < counted {
					return fmt.Errorf("status.tunnel %+v, the agent's metric %d", p.Status.Tunnel, counted)
				}
				return nil
			})
			if tc.collide && collisions == 0 {
				t.Errorf("no rekey collision in either daemon's log")
			}
			if strings.HasPrefix(tc.name, "reauth") && reauths == 0 {
				t.Errorf("the gateway never reauthenticated")
			}
			if err := s.request(l.web(53), time.Second); err != nil {
				t.Errorf("the granted exposure after the rekeys: %v", err)
			}
			if err := s.request(l.otherAddr(53), time.Second); err == nil {
				t.Errorf("the exposure site-a is not granted answered after the rekeys")
			}
		})
	}
}

// waitGatewayConnection waits until the gateway's charon has the peer's connection loaded: a
// site's charon tries once, and a NO_PROPOSAL_CHOSEN before the agent loaded it ends its try.
func waitGatewayConnection(t *testing.T, l *lab, peer string) {
	t.Helper()
	waitFor(t, "the gateway's connection to "+peer, 30*time.Second, func() error {
		conns, err := l.gwCharon.Swanctl("--list-conns")
		if err != nil || !strings.Contains(conns, peer) {
			return fmt.Errorf("%v %s", err, conns)
		}
		return nil
	})
}

var (
	// rekeyActive is swanctl's line of an IKE SA's active tasks naming a rekey.
	rekeyActive = regexp.MustCompile(`(?m)^  active: .*(CHILD_REKEY|IKE_REKEY)`)
	childSALine = regexp.MustCompile(`(?m)^  \S+: #([0-9]+), reqid [0-9]+, INSTALLED`)
	ikeSALine   = regexp.MustCompile(`(?m)^\S+: #([0-9]+), ESTABLISHED`)
)

// childIDs and ikeIDs are the unique ids of a daemon's installed CHILD SAs and established
// IKE SAs (swanctl --list-sas).
func childIDs(sas string) []string { return submatches(childSALine, sas) }
func ikeIDs(sas string) []string   { return submatches(ikeSALine, sas) }

func submatches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// rekeyBothAtOnce makes both daemons rekey the same SA (flag --child-id or --ike-id, ids from
// each daemon's SAs) so that their requests cross, whatever the machine's load: IKE between
// them is held back (dropped in the site's namespace, ESP left alone) until each has its
// rekey under way, then let through, so each end receives the other's request while its own
// is outstanding. It waits until each daemon has an SA of that kind whose id it did not have
// before.
func rekeyBothAtOnce(t *testing.T, gw, site *charontest.Charon, siteNS *netns.NS, flag string, ids func(string) []string) {
	t.Helper()
	daemons := []*charontest.Charon{gw, site}
	before := make([][]string, len(daemons))
	for i, d := range daemons {
		sas, err := d.Swanctl("--list-sas")
		if err != nil {
			t.Fatal(err)
		}
		if before[i] = ids(sas); len(before[i]) == 0 {
			t.Fatalf("%s has no SA for %s:\n%s", d.Name, flag, sas)
		}
	}
	// Only CREATE_CHILD_SA requests and responses are held (the IKE header's exchange type,
	// 36, is byte 18 of the header; on 4500 the header follows the non-ESP marker, four zero
	// bytes): DPDs and DELETEs pass, so no exchange but the two rekeys waits for the release
	// (charon gives an IKE_SA up after 1.5 s of unanswered retransmits here and deletes it
	// with its CHILD_SAs).
	siteNS.MustRun("nft", `table inet e2e_holdike {
  chain out { type filter hook output priority 0; udp dport 500 @th,208,8 36 drop; udp dport 4500 @th,64,32 0 @th,240,8 36 drop; }
  chain in { type filter hook input priority 0; udp sport 500 @th,208,8 36 drop; udp sport 4500 @th,64,32 0 @th,240,8 36 drop; }
}`)
	released := false
	release := func() {
		if !released {
			released = true
			siteNS.MustRun("nft", "delete", "table", "inet", "e2e_holdike")
		}
	}
	defer release()
	for i, d := range daemons {
		// the answer is only whether charon queued the rekey; its outcome shows below
		_, _ = d.Swanctl("--rekey", flag, before[i][0])
		waitFor(t, d.Name+"'s rekey under way ("+flag+")", 10*time.Second, func() error {
			sas, err := d.Swanctl("--list-sas")
			if err != nil {
				return err
			}
			if !rekeyActive.MatchString(sas) {
				return fmt.Errorf("no rekey task active:\n%s", sas)
			}
			return nil
		})
	}
	release()
	for _, d := range daemons {
		// both exchanges over (the loser's request answered, the DELETEs done), so the next
		// round holds nothing of this one
		waitFor(t, d.Name+"'s rekey over ("+flag+")", 10*time.Second, func() error {
			sas, err := d.Swanctl("--list-sas")
			if err != nil {
				return err
			}
			if strings.Contains(sas, "\n  active: ") {
				return fmt.Errorf("tasks active:\n%s", sas)
			}
			return nil
		})
	}
	for i, d := range daemons {
		waitFor(t, d.Name+"'s rekeyed SA ("+flag+")", 10*time.Second, func() error {
			sas, err := d.Swanctl("--list-sas")
			if err != nil {
				return err
			}
			for _, id := range ids(sas) {
				if !slices.Contains(before[i], id) {
					return nil
				}
			}
			return fmt.Errorf("still only %v:\n%s", before[i], sas)
		})
	}
}

// peerMetric is the value of a peer's metric (the first series of that name naming the peer)
// from the agent's /metrics.
func peerMetric(t *testing.T, gw *netns.NS, metric, peer string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `\{[^}]*peer="` + regexp.QuoteMeta(peer) + `"[^}]*\} ([0-9.e+]+)$`)
	m := re.FindStringSubmatch(metricsText(t, gw))
	if m == nil {
		t.Fatalf("no %s for %s in the agent's metrics", metric, peer)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// The labs' gateway charon has the gateway image's settings that decide how tunnels behave.
func TestLabCharonHasTheImagesSettings(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("..", "..", "hack", "lab", "image", "strongswan.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(imageCharonSettings, "\n") {
		if !strings.Contains(string(conf), "\n"+line+"\n") {
			t.Errorf("the gateway image's strongswan.conf lacks %q", strings.TrimSpace(line))
		}
	}
}
