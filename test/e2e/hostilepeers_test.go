package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// Hostile peers (docs/design.md "Security model"), with real daemons and real packets.

// overlapSubnet lies inside the first lab site's subnet (203.0.113.0/28): the LAN range a
// second client reuses, or an intruder claims.
var (
	overlapSubnet = netip.MustParsePrefix("203.0.113.0/29")
	overlapAddr   = netip.MustParseAddr("203.0.113.2") // not the first site's own host (.1)
)

// TestOverlappingDarkPeerReachesNothing: on a multi-peer gateway, a younger peer with no
// authorization block whose subnets include one inside an older, authorized peer's LAN. Its
// device claims that range too. It gets a tunnel for its own subnet only: from an address in
// the overlap it reaches nothing over TCP or UDP (not the older peer's exposure), from its own
// subnet its packets are dropped and counted on it, and the older peer keeps its access. Before
// "one source, one tunnel" its CHILD_SA carried the overlap and the ruleset, keyed on source
// addresses, translated its packets as the older peer's.
func TestOverlappingDarkPeerReachesNothing(t *testing.T) {
	for _, proto := range []vpnv1.Protocol{vpnv1.ProtocolIPsec, vpnv1.ProtocolWireGuard} {
		t.Run(string(proto), func(t *testing.T) {
			ctx := context.Background()
			l := newLab(t, proto, "e2e-dark-"+string(proto)[:2], "bdk")
			hq, intruder := l.newSite("hq"), l.newSite("intruder")
			if !hq.subnet.Contains(overlapAddr) || hq.subnet.Bits() >= overlapSubnet.Bits() {
				t.Fatalf("the overlap %s is not inside hq's %s", overlapSubnet, hq.subnet)
			}
			l.createPeer(hq, "web")
			// The intruder: no authorization block on a two-peer gateway (NoGrants), its own
			// subnet plus one inside hq's. Created after hq, it is the younger (within the same
			// second, "hq" sorts first).
			l.createPeerWith(intruder, []string{intruder.subnet.String(), overlapSubnet.String()}, nil)

			// The intruder's device claims the overlap as well and has an address in it.
			intruder.ns.MustRun("ip", "addr", "add", overlapAddr.String()+"/32", "dev", "lo")
			l.configureDevice(hq)
			intruder.claims = []netip.Prefix{overlapSubnet} // its device proposes the overlap too
			l.configureDevice(intruder)
			agent := l.startAgent()
			l.waitAgentReady(agent, 30*time.Second)

			waitFor(t, "hq reaches web", 60*time.Second, func() error { return hq.request(l.web(53), time.Second) })
			waitFor(t, "the intruder's tunnel up", 60*time.Second, func() error {
				_, err := peerConnected(l.k8sNS, "intruder")
				return err
			})
			// From the overlap: TCP and UDP to hq's exposure fail, again and again.
			fromOverlap := &labSite{name: "intruder", ns: intruder.ns, addr: overlapAddr}
			for i := range 5 {
				if err := fromOverlap.request(l.web(53), 500*time.Millisecond); err == nil {
					t.Fatalf("attempt %d: the intruder reached web over UDP from %s, inside hq's subnet", i, overlapAddr)
				}
				if err := fromOverlap.tcpRequest(l.web(80), 500*time.Millisecond); err == nil {
					t.Fatalf("attempt %d: the intruder reached web over TCP from %s, inside hq's subnet", i, overlapAddr)
				}
			}
			// Its tunnel carries no selector for the overlap.
			if sel := l.tunnelSelectors(); !strings.Contains(sel, intruder.subnet.String()) || strings.Contains(sel, overlapSubnet.String()) {
				t.Fatalf("the gateway's tunnels should carry %s and not %s:\n%s", intruder.subnet, overlapSubnet, sel)
			}

			// From its own subnet: refused and counted on the intruder.
			before := dropCounter(t, l.gw, "intruder")
			for i := range 3 {
				if err := intruder.tcpRequest(l.web(80), 500*time.Millisecond); err == nil {
					t.Fatalf("attempt %d: the dark intruder reached web from its own subnet", i)
				}
			}
			waitFor(t, "the intruder's drop counter rises", 10*time.Second, func() error {
				if after := dropCounter(t, l.gw, "intruder"); after <= before {
					return fmt.Errorf("drops %v -> %v", before, after)
				}
				return nil
			})
			// hq keeps its grant (its replies are not drawn into the intruder's tunnel).
			if err := hq.tcpRequest(l.web(80), 2*time.Second); err != nil {
				t.Fatalf("hq lost web: %v", err)
			}
			peer := &vpnv1.VPNPeer{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.k8sNS, Name: "intruder"}, peer); err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(peer.Status.Conditions, vpnv1.ConditionAuthorized)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != model.ReasonSubnetConflict || !strings.Contains(c.Message, overlapSubnet.String()) {
				t.Fatalf("intruder's Authorized condition %+v, want False/SubnetConflict naming %s", c, overlapSubnet)
			}
			t.Logf("intruder: Authorized=%s/%s: %s", c.Status, c.Reason, c.Message)
		})
	}
}

// TestPSKProvesOneIdentity: peer A (hq) presents the identity of peer B (victim, configured at
// %any) with A's own PSK. IKE authentication fails; B's tunnel stays up and carries traffic,
// and the attacker reaches nothing. Before keys were owned by the remote ID alone, each key
// was also owned by the gateway's identity, so charon tried A's key for B's identity and it
// verified.
func TestPSKProvesOneIdentity(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, vpnv1.ProtocolIPsec, "e2e-psk-id", "")
	hq, victim, attacker := l.newSite("hq"), l.newSite("victim"), l.newSite("attacker")
	l.createPeer(hq, "other")
	// The victim roams: address %any, a specific ID; it is granted web.
	if err := env.Client.Create(ctx, gen.PSKSecret(l.k8sNS, "victim", victim.psk)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, gen.VPNPeer(l.k8sNS, "victim", gen.Grants("web"),
		gen.IPsecPeer("%any", "victim.example.com"), gen.RemoteSubnets(victim.subnet.String()))); err != nil {
		t.Fatal(err)
	}
	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	// The victim initiates (the gateway cannot: %any), once, when its device is configured: so
	// only once the gateway's charon has the victim's connection (the agent is ready with the
	// first configuration it got, which may predate the victim's peer), or the gateway answers
	// NO_PROPOSAL_CHOSEN and the site does not retry.
	waitFor(t, "the gateway has the victim's connection", 30*time.Second, func() error {
		conns, err := l.gwCharon.Swanctl("--list-conns")
		if err != nil {
			return err
		}
		if !strings.Contains(conns, "victim:") {
			return fmt.Errorf("no connection victim in:\n%s", conns)
		}
		return nil
	})
	l.configureDevice(hq)
	l.configureDevice(victim)
	waitFor(t, "the victim reaches web", 60*time.Second, func() error { return victim.request(l.web(53), time.Second) })
	victimSA := ikeSA(t, victim.charon)

	// The attacker: hq's PSK, the victim's identity and subnet, from its own address.
	attacker.psk = hq.psk
	attacker.subnet, attacker.addr = victim.subnet, victim.subnet.Addr().Next()
	attacker.ns.MustRun("ip", "addr", "add", attacker.addr.String()+"/32", "dev", "lo")
	conf := strings.ReplaceAll(labSwanctlConf(attacker, l.serviceCIDR), "attacker.example.com", "victim.example.com")
	seen := len(l.gwCharon.Log()) // the gateway's log so far: the victim's own authentication
	attacker.charon = charontest.Start(t, attacker.cns, attacker.name, charontest.Config{})
	if err := attacker.charon.LoadSwanctlConf(conf); err != nil {
		t.Fatal(err)
	}
	// The attempt ends in an authentication failure: the attacker is told AUTHENTICATION_FAILED,
	// and the gateway found no key of the victim's identity that verifies.
	waitFor(t, "the attacker refused", 30*time.Second, func() error {
		if !strings.Contains(attacker.charon.Log(), "received AUTHENTICATION_FAILED notify error") {
			return fmt.Errorf("no AUTHENTICATION_FAILED in the attacker's log yet")
		}
		return nil
	})
	gwLog := l.gwCharon.Log()
	if len(gwLog) > seen {
		gwLog = gwLog[seen:]
	}
	// Only the victim's identity matters here: the gateway's own IKE_SA with hq may complete
	// in the same window (it initiates to hq's fixed address) and authenticates hq.example.com.
	if strings.Contains(gwLog, "authentication of 'victim.example.com' with pre-shared key successful") {
		t.Fatalf("the gateway accepted a pre-shared key from the attacker:\n%s", gwLog)
	}
	if !strings.Contains(gwLog, "MAC mismatched") {
		t.Errorf("the gateway's log does not show the failed verification:\n%s", gwLog)
	}
	if sas, _ := attacker.charon.Swanctl("--list-sas"); strings.Contains(sas, "ESTABLISHED") {
		t.Fatalf("the attacker has an established SA:\n%s", sas)
	}
	if err := attacker.request(l.web(53), time.Second); err == nil {
		t.Fatal("the attacker reached web")
	}
	// The victim's tunnel is the same IKE SA and still carries traffic.
	if now := ikeSA(t, victim.charon); now != victimSA {
		t.Errorf("the victim's IKE SA changed: %s -> %s", victimSA, now)
	}
	if err := victim.tcpRequest(l.web(80), 2*time.Second); err != nil {
		t.Fatalf("the victim lost web: %v", err)
	}
	waitFor(t, "the victim reported Connected", 10*time.Second, func() error {
		_, err := peerConnected(l.k8sNS, "victim")
		return err
	})
}

// ikeSA is the site's established IKE SA to the gateway ("gw: #N"), failing when there is none.
func ikeSA(t *testing.T, c *charontest.Charon) string {
	t.Helper()
	var sa string
	waitFor(t, "an established IKE SA", 30*time.Second, func() error {
		out, err := c.Swanctl("--list-sas", "--ike", "gw")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "gw: #") && strings.Contains(line, "ESTABLISHED") {
				sa = strings.Fields(line)[1]
				return nil
			}
		}
		return fmt.Errorf("no established SA:\n%s", out)
	})
	return sa
}

// TestIKEv1AtAnyAddressHasNoKey: IKEv1 main mode picks the pre-shared key by the peer's
// address before the peer names itself, so at %any one peer's key could be tried for another.
// On an IKEv1 gateway a peer at %any gets no tunnel (IKEv1AnyAddress): its key is never loaded
// into the gateway's charon, and a real IKEv1 site presenting its identity with its very key,
// from an address of its own, establishes nothing and reaches nothing — while a peer at a
// fixed address works over IKEv1 beside it.
func TestIKEv1AtAnyAddressHasNoKey(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, vpnv1.ProtocolIPsec, uniqueNamespace("e2e-v1any"), "", gen.IKEVersion(1, charontest.IKEv1Proposal))
	hq, roamer := l.newSite("hq"), l.newSite("roamer")
	for _, s := range []*labSite{hq, roamer} {
		s.conn.IKEVersion = 1
	}
	l.createPeer(hq, "web")
	l.createPeerWith(roamer, []string{roamer.subnet.String()}, &vpnv1.Authorization{Exposures: []string{"web"}},
		gen.IPsecPeer("%any", "roamer.example.com"))
	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	waitFor(t, "roamer refused with IKEv1AnyAddress", 30*time.Second, func() error {
		p := &vpnv1.VPNPeer{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.k8sNS, Name: roamer.name}, p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != model.ReasonIKEv1AnyAddress {
			return fmt.Errorf("Authorized condition %+v", c)
		}
		return nil
	})
	waitGatewayConnection(t, l, hq.name)
	l.configureDevice(hq)
	l.waitThroughWeb(hq, agent)

	// The roamer's own device, its identity and key, from its address: nothing to match.
	seen := len(l.gwCharon.Log())
	l.configureDevice(roamer)
	waitFor(t, "the gateway refusing the roamer's IKEv1 attempt", 30*time.Second, func() error {
		if !strings.Contains(roamer.charon.Log(), "initiating Main Mode") {
			return fmt.Errorf("the roamer has not initiated yet")
		}
		if len(l.gwCharon.Log()) == seen {
			return fmt.Errorf("the gateway has not heard the roamer yet")
		}
		return nil
	})
	conns, err := l.gwCharon.Swanctl("--list-conns")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(conns, "roamer") {
		t.Errorf("the gateway's charon has a connection for the roamer:\n%s", conns)
	}
	if strings.Contains(l.gwCharon.Log(), "shared key with id 'ike-roamer'") {
		t.Errorf("the gateway's charon loaded the roamer's pre-shared key")
	}
	if err := roamer.request(l.web(53), 2*time.Second); err == nil {
		t.Errorf("the roamer reached web")
	}
	if sas := l.tunnelSelectors(); strings.Contains(sas, "roamer.example.com") {
		t.Errorf("the gateway has an SA with the roamer's identity:\n%s", sas)
	}
	if err := hq.request(l.web(53), time.Second); err != nil {
		t.Errorf("hq (IKEv1 at its address) after the roamer's attempt: %v", err)
	}
	t.Logf("IKEv1 at %%any: no connection, no key, no SA for roamer; hq over IKEv1 at its address reaches web")
}
