package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// A site with three subnets that negotiates one CHILD_SA per subnet, as FortiGate, PAN-OS and
// MikroTik configure phase 2 (and as `kubectl vpn peer-config` tells them to, which the test
// checks against the site's layout): the gateway has a child for each subnet, so each of the
// site's CHILD_SAs matches one exactly, none is terminated as beyond the peer's limit, and a
// stream from an address in each subnet (every 100 ms, all three at once) loses nothing.
func TestIPsecOneChildPerSubnet(t *testing.T) {
	l := newLab(t, vpnv1.ProtocolIPsec, uniqueNamespace("e2e-children"), "")
	agent := l.startAgent()
	s := l.newSite("site-a")
	s.perSubnet = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/30"), netip.MustParsePrefix("203.0.113.4/30"), netip.MustParsePrefix("203.0.113.8/30")}
	var subnets []string
	var hosts []netip.Addr
	for _, p := range s.perSubnet {
		subnets = append(subnets, p.String())
		h := p.Addr().Next()
		hosts = append(hosts, h)
		if h != s.addr {
			s.ns.MustRun("ip", "addr", "add", h.String()+"/32", "dev", "lo")
		}
	}
	l.createPeerWith(s, subnets, &vpnv1.Authorization{Exposures: []string{"web"}})
	l.waitAgentReady(agent, 30*time.Second)
	waitGatewayConnection(t, l, s.name)
	l.configureDevice(s)
	for _, h := range hosts {
		site := *s
		site.addr = h
		l.waitThroughWeb(&site, agent)
	}
	sas := l.tunnelSelectors()
	for i := range s.perSubnet {
		child := fmt.Sprintf("%s~%d", s.name, i+1)
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(child) + `: #[0-9]+, reqid [0-9]+, INSTALLED`).MatchString(sas) {
			t.Errorf("the gateway has no installed CHILD_SA of its child %s:\n%s", child, sas)
		}
	}

	var streams []*udpStream
	for _, h := range hosts {
		streams = append(streams, startUDPStream(t, s.ns.Name, h, l.web(53), 100*time.Millisecond))
	}
	waitFor(t, "five seconds of the three streams", 30*time.Second, func() error {
		for i, st := range streams {
			if n := st.answeredCount(); n < 50 {
				return fmt.Errorf("%s: %d answers", hosts[i], n)
			}
		}
		return nil
	})
	for i, st := range streams {
		r := st.finish(2 * time.Second)
		t.Logf("from %s (subnet %s): %s", hosts[i], s.perSubnet[i], r)
		if len(r.Lost) > 0 {
			t.Errorf("from %s: %d of %d lost", hosts[i], len(r.Lost), r.Sent)
		}
	}
	if refused := peerMetric(t, l.gw, "bnerd_vpn_peer_child_sas_refused_total", s.name); refused != 0 {
		t.Errorf("the agent terminated %.0f of the site's CHILD_SAs as beyond its limit", refused)
	}
	t.Logf("the gateway's CHILD_SAs of %s: %d installed", s.name, strings.Count(sas, "INSTALLED"))

	// The device configurations for FortiGate, PAN-OS and MikroTik say they negotiate the
	// layout this site negotiated: one CHILD_SA per subnet, with these selectors.
	var want []string
	for _, p := range s.perSubnet {
		want = append(want, fmt.Sprintf("%s === %s", p, l.serviceCIDR))
	}
	note := fmt.Sprintf("per local network (one %%s each), %d: %s.", len(want), strings.Join(want, ", "))
	for format, unit := range map[string]string{"fortigate": "phase2-interface", "paloalto": "proxy-id", "mikrotik": "/ip ipsec policy"} {
		out := l.peerConfig(s.name, format)
		if !strings.Contains(out, fmt.Sprintf(note, unit)) {
			t.Errorf("peer-config --format %s does not say it negotiates the site's CHILD_SAs (%s):\n%s", format, strings.Join(want, ", "), out)
		}
	}
}
