package strongswan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/availability"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
)

// A standby gateway's charon, configured behind the fence, keeps retrying its negotiation
// unanswered; TakeOver (fence gone) ends that negotiation and initiates anew, so the tunnel is
// up at once instead of at charon's next retransmission. StepDown (fenced again) ends the
// gateway's IKE_SAs without a DELETE reaching the site.
func TestTakeOverAndStepDown(t *testing.T) {
	// charon's own retransmission timing (4 s, then 7.2 s later), not the fixture's quick one.
	f := newFixtureWith(t, charontest.Config{RetransmitTimeout: 4, RetransmitBase: 1.8, RetransmitTries: 5})
	ctx := context.Background()
	a := f.newSite("site-a", 0, randomPSK(t))
	a.start = "none" // the site answers only: the gateway's initiation brings the tunnel up
	a.load(t)
	f.secrets.set(a.secret, a.psk)
	fence := &availability.Fence{NFT: f.gwNS.Wrapper(t, "nft")}
	if err := fence.Install(ctx, 0); err != nil {
		t.Fatal(err)
	}

	f.apply(f.bundle(a))
	// Fenced past the first retransmission of IKE_SA_INIT; the next is due 6 s later.
	time.Sleep(5 * time.Second)
	pending := f.listSAs()[a.name]
	if len(pending) == 0 || slicesAnyUp(pending) {
		t.Fatalf("fenced: want a pending negotiation, got %+v", pending)
	}
	if p := f.waitPeer(a.name, 5*time.Second, inState(agent.StateDown)); p.Connected() {
		t.Fatalf("fenced peer %+v", p)
	}

	if err := fence.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Now()
	if err := f.driver.TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	f.waitPeer(a.name, 3*time.Second, inState(agent.StateEstablished))
	t.Logf("established %s after TakeOver", time.Since(took).Round(time.Millisecond))
	for _, sa := range f.listSAs()[a.name] {
		for _, old := range pending {
			if sa.UniqueID == old.UniqueID {
				t.Errorf("the negotiation pending behind the fence (IKE_SA %s) is still there", old.UniqueID)
			}
		}
	}
	f.pingThrough(a, "after the takeover")

	if err := fence.Install(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.driver.StepDown(ctx); err != nil {
		t.Fatal(err)
	}
	err := charontest.Eventually(3*time.Second, func() error {
		if sas := f.listSAs()[a.name]; len(sas) != 0 {
			return fmt.Errorf("the gateway still has IKE_SAs %+v", sas)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The site heard nothing: its IKE_SA stays until its own DPD finds the gateway gone.
	out, err := a.charon.Swanctl("--list-sas")
	if err != nil || !strings.Contains(out, "ESTABLISHED") {
		t.Errorf("the site's IKE_SA after the step-down: %v\n%s", err, out)
	}
	if strings.Contains(a.charon.Log(), "received DELETE") {
		t.Error("a DELETE reached the site through the fence")
	}
}

func slicesAnyUp(sas []ikeSA) bool {
	for _, sa := range sas {
		if sa.up() {
			return true
		}
	}
	return false
}
