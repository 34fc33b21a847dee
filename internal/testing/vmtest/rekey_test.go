package vmtest_test

import (
	"net/netip"
	"regexp"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

// TestGuestKernelRekeyUnderTraffic: the kernel-ESP gateway rekeys its CHILD_SAs every 10 s and
// its IKE_SA every 15 s (the site keeps charon's hour-long lifetimes, so the gateway starts
// every rekey) while the site sends a request every 100 ms for 35 s: every request is answered,
// through SAs with the peer's reqid from first to last.
func TestGuestKernelRekeyUnderTraffic(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	charontest.Skip(t, "nft")
	g := newKernelGW(t)
	a := g.addSite("a", 0, []string{"dns"}, nil)
	g.in.Peers[0].Spec.IPsec.ESP.RekeyTime = &metav1.Duration{Duration: 10 * time.Second}
	g.in.Gateway.Spec.IPsec.IKE.RekeyTime = &metav1.Duration{Duration: 15 * time.Second}
	g.publish()
	g.startCharon()
	g.startAgent(true)
	g.connect(a)
	dns := netip.AddrPortFrom(g.vip("dns"), 53).String()
	waitUntil(t, "site a answered through the tunnel", 20*time.Second, func() error {
		return request(a.ns, "udp", a.addr, dns, time.Second)
	})

	// distinct SAs (by charon's unique ids): each one a rekey made
	established := regexp.MustCompile(`CHILD_SA a~?[0-9]*\{([0-9]+)\} established`)
	rekeyedIKE := regexp.MustCompile(`IKE_SA a\[([0-9]+)\] rekeyed`)
	distinct := func(re *regexp.Regexp, log string) map[string]bool {
		ids := map[string]bool{}
		for _, m := range re.FindAllStringSubmatch(log, -1) {
			ids[m[1]] = true
		}
		return ids
	}
	children0 := distinct(established, g.charon.Log())
	var sent, lost int
	deadline := time.Now().Add(35 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		sent++
		if err := request(a.ns, "udp", a.addr, dns, time.Second); err != nil {
			lost++
			t.Logf("request %d lost: %v", sent, err)
		}
	}
	log := g.charon.Log()
	children := 0
	for id := range distinct(established, log) {
		if !children0[id] {
			children++
		}
	}
	ikes := len(distinct(rekeyedIKE, log))
	t.Logf("kernel ESP, the gateway rekeying (CHILD_SA 10s, IKE_SA 15s) for 35s: %d requests, %d lost; %d CHILD_SAs established by rekeys, %d IKE_SA rekeys",
		sent, lost, children, ikes)
	if children < 3 || ikes < 2 {
		t.Errorf("%d CHILD_SA and %d IKE_SA rekeys in 35s (want at least 3 and 2: every 10s and 15s)", children, ikes)
	}
	if lost > 0 {
		t.Errorf("%d of %d requests lost while the SAs were rekeyed", lost, sent)
	}
	if drops := g.drops("a"); drops != 0 {
		t.Errorf("the ruleset dropped %d packets of peer a while the SAs were rekeyed", drops)
	}
}
