package strongswan

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/strongswan/charontest"
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

// TestChildSAsBoundedPerPeer: a peer with a valid key negotiates many CHILD_SAs, each narrowed
// to one address of its subnet. The gateway holds at most two per configured child (the rest
// are terminated and counted in ChildSAsRefused), and another peer's tunnel carries traffic
// throughout.
func TestChildSAsBoundedPerPeer(t *testing.T) {
	f := newFixture(t)
	a := f.addSite("site-a", 0, randomPSK(t))
	b := f.addSite("site-b", 1, randomPSK(t))
	f.secrets.set(a.secret, a.psk)
	f.secrets.set(b.secret, b.psk)
	f.apply(f.bundle(a, b))
	f.waitPeer(a.name, 30*time.Second, inState(agent.StateEstablished))
	f.waitPeer(b.name, 30*time.Second, inState(agent.StateEstablished))
	f.pingThrough(b, "before the flood")

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
	p := f.waitPeer(a.name, 30*time.Second, func(p agent.PeerState) error {
		if p.ChildSAsRefused < flood+1-uint64(limit) {
			return fmt.Errorf("%d CHILD_SAs refused", p.ChildSAsRefused)
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
