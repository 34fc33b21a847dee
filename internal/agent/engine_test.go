package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Fakes for the engine's logic only; the real drivers and firewall have their own tests
// against charon, WireGuard and nftables.
type fakeFirewall struct {
	mu          sync.Mutex
	err         error
	applied     []string
	counters    map[string]nft.CounterValue
	gateOpens   int
	cuts        int
	unruledCuts int
	// drift is what the next Verify finds (and repairs, unless verifyErr).
	drift     Drift
	verifyErr error
	verifies  int
	forgotten []string
}

func (f *fakeFirewall) Verify(context.Context) (Drift, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verifies++
	d := f.drift
	f.drift = Drift{}
	return d, f.verifyErr
}

func (f *fakeFirewall) CutUnruledFlows(context.Context, *model.Gateway) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unruledCuts++
	return 1, nil
}

func (f *fakeFirewall) Apply(_ context.Context, r string) error {
	if f.err != nil {
		return f.err
	}
	f.applied = append(f.applied, r)
	return nil
}

func (f *fakeFirewall) CutRevokedFlows(context.Context, *model.Gateway) (int, error) {
	f.cuts++
	return 0, nil
}

func (f *fakeFirewall) Remove(context.Context) error { return nil }

func (f *fakeFirewall) OpenStartupGate(context.Context) error {
	f.gateOpens++
	return nil
}

func (f *fakeFirewall) Counters(context.Context) (map[string]nft.CounterValue, error) {
	return f.counters, nil
}

// ForgetDrops deletes the elements as the firewall does, and records their names.
func (f *fakeFirewall) ForgetDrops(_ context.Context, names []string) (map[string]nft.CounterValue, error) {
	counted := map[string]nft.CounterValue{}
	for _, n := range names {
		if v, ok := f.counters[n]; ok {
			counted[n] = v
			delete(f.counters, n)
		}
		f.forgotten = append(f.forgotten, n)
	}
	return counted, nil
}

type fakeDriver struct {
	applied int
	states  map[string]PeerState
}

func (d *fakeDriver) Apply(context.Context, *render.Bundle, Secrets) error { d.applied++; return nil }
func (d *fakeDriver) Peers(context.Context) (map[string]PeerState, error)  { return d.states, nil }
func (d *fakeDriver) Changes() <-chan struct{}                             { return nil }
func (d *fakeDriver) Close() error                                         { return nil }

type fakeReporter struct{ snaps []Snapshot }

func (r *fakeReporter) Report(_ context.Context, _ *render.Bundle, s Snapshot) error {
	r.snaps = append(r.snaps, s)
	return nil
}

func bundle() *render.Bundle {
	return &render.Bundle{
		Model: &model.Gateway{Name: "gw", Protocol: model.ProtocolIPsec, ServiceCIDR: netip.MustParsePrefix("100.64.7.0/24"),
			Peers: []model.Peer{
				{Name: "a", Authorization: model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow},
					SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}},
				{Name: "b", Authorization: model.Decision{Reason: model.ReasonNoGrants},
					SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.16/28"), netip.MustParsePrefix("198.51.100.0/25")}},
			}},
		Ruleset: "table ip bnerd_vpn {}",
	}
}

// The ruleset goes first: if it cannot be applied, no tunnel is configured (fail closed).
func TestEngineFailsClosed(t *testing.T) {
	fw := &fakeFirewall{err: errors.New("nft: syntax error")}
	d := &fakeDriver{}
	e := &Engine{Driver: d, Firewall: fw, Log: logr.Discard()}
	if err := e.Apply(context.Background(), Update{Bundle: bundle()}); err == nil {
		t.Fatal("Apply succeeded although the ruleset failed")
	}
	if d.applied != 0 {
		t.Errorf("driver applied %d times although the ruleset failed", d.applied)
	}
	if e.Ready() {
		t.Error("engine ready without an applied configuration")
	}
}

// A snapshot joins the driver's tunnel state, the model's authorization and the ruleset's
// per-peer drop counters; a peer the driver does not know is reported down.
// The startup gate opens once, after the driver has loaded the peers; never before, never when
// the driver failed.
func TestEngineOpensStartupGateAfterDriver(t *testing.T) {
	fw := &fakeFirewall{}
	d := &failingDriver{err: errors.New("charon is not up")}
	e := &Engine{Driver: d, Firewall: fw, Log: logr.Discard(), SkipLocalAddress: true}
	if err := e.Apply(context.Background(), Update{Bundle: bundle()}); err == nil {
		t.Fatal("Apply succeeded although the driver failed")
	}
	if fw.gateOpens != 0 {
		t.Fatalf("gate opened %d times before the driver loaded the peers", fw.gateOpens)
	}
	d.err = nil
	for i := 0; i < 3; i++ {
		if err := e.Apply(context.Background(), Update{Bundle: bundle()}); err != nil {
			t.Fatal(err)
		}
	}
	if fw.gateOpens != 1 {
		t.Errorf("gate opened %d times, want once", fw.gateOpens)
	}
}

type failingDriver struct {
	fakeDriver
	err error
}

func (d *failingDriver) Apply(ctx context.Context, b *render.Bundle, s Secrets) error {
	if d.err != nil {
		return d.err
	}
	return d.fakeDriver.Apply(ctx, b, s)
}

func TestEngineSnapshot(t *testing.T) {
	fw := &fakeFirewall{counters: map[string]nft.CounterValue{
		"drops_in_28 203.0.113.0": {Packets: 1}, "drops_in_28 203.0.113.16": {Packets: 4, Bytes: 400},
		"drops_in_25 198.51.100.0": {Packets: 3, Bytes: 300}, "drops_out_25 198.51.100.0": {Packets: 2},
	}}
	d := &fakeDriver{states: map[string]PeerState{"a": {State: StateEstablished, BytesIn: 10}}}
	r := &fakeReporter{}
	e := &Engine{Driver: d, Firewall: fw, Reporter: r, Log: logr.Discard(), SkipLocalAddress: true}
	if err := e.Apply(context.Background(), Update{Bundle: bundle()}); err != nil {
		t.Fatal(err)
	}
	snap, err := e.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := snap.Peers["a"], snap.Peers["b"]
	if !pa.Connected() || !pa.Authorized || pa.BytesIn != 10 || pa.DropsIn.Packets != 1 {
		t.Errorf("peer a: %+v", pa)
	}
	if pb.Connected() || pb.Authorized || pb.State != StateDown || pb.DropsIn.Packets != 7 || pb.DropsOut.Packets != 2 {
		t.Errorf("peer b: %+v", pb)
	}
	if len(r.snaps) != 1 {
		t.Errorf("reported %d snapshots, want 1", len(r.snaps))
	}
	// No spoof check in this ruleset (userspace ESP, WireGuard): nothing to report.
	if snap.Spoofed != nil {
		t.Errorf("spoofed drops %+v from a ruleset without the counter", *snap.Spoofed)
	}
	// Kernel ESP: the gateway-wide counter of sources their SA's peer does not carry.
	fw.counters[nft.CounterSpoofed] = nft.CounterValue{Packets: 4, Bytes: 336}
	if snap, err = e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := snap.Spoofed; s == nil || *s != (nft.CounterValue{Packets: 4, Bytes: 336}) {
		t.Errorf("spoofed drops %v, want 4 packets, 336 bytes", s)
	}
}

// A subnet that changes hands takes none of its drops along: its element is deleted and what
// it counted stays with the peer that had it, whose totals never go down; a subnet a peer
// keeps is left alone; a peer gone takes its totals with it.
func TestEngineDropsFollowSubnets(t *testing.T) {
	fw := &fakeFirewall{counters: map[string]nft.CounterValue{
		"drops_in_28 203.0.113.16": {Packets: 4, Bytes: 400}, "drops_in_25 198.51.100.0": {Packets: 3, Bytes: 300},
		"drops_out_25 198.51.100.0": {Packets: 2, Bytes: 200},
	}}
	d := &fakeDriver{}
	e := &Engine{Driver: d, Firewall: fw, Log: logr.Discard(), SkipLocalAddress: true}
	ctx := context.Background()
	b := bundle()
	if err := e.Apply(ctx, Update{Bundle: b}); err != nil {
		t.Fatal(err)
	}
	if len(fw.forgotten) != 0 {
		t.Fatalf("the first ruleset forgot %v", fw.forgotten)
	}

	// b's /25 moves to a; b keeps its /28.
	moved := bundle()
	moved.Model.Peers[0].SourceCIDRs = append(moved.Model.Peers[0].SourceCIDRs, moved.Model.Peers[1].SourceCIDRs[1])
	moved.Model.Peers[1].SourceCIDRs = moved.Model.Peers[1].SourceCIDRs[:1]
	moved.Ruleset += " "
	if err := e.Apply(ctx, Update{Bundle: moved}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(fw.forgotten)
	if want := []string{"drops_in_25 198.51.100.0", "drops_out_25 198.51.100.0"}; !slices.Equal(fw.forgotten, want) {
		t.Fatalf("forgot %v, want %v", fw.forgotten, want)
	}
	fw.counters["drops_in_25 198.51.100.0"] = nft.CounterValue{Packets: 1, Bytes: 100} // a's first drop there
	snap, err := e.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := snap.Peers["a"], snap.Peers["b"]
	if pa.DropsIn != (nft.CounterValue{Packets: 1, Bytes: 100}) || pa.DropsOut != (nft.CounterValue{}) {
		t.Errorf("peer a, the /25's new owner: in %+v out %+v, want 1 packet in", pa.DropsIn, pa.DropsOut)
	}
	if pb.DropsIn != (nft.CounterValue{Packets: 7, Bytes: 700}) || pb.DropsOut != (nft.CounterValue{Packets: 2, Bytes: 200}) {
		t.Errorf("peer b, which gave the /25 away: in %+v out %+v, want its totals kept (7 in, 2 out)", pb.DropsIn, pb.DropsOut)
	}

	// b goes: its /28's element is deleted, its retired totals with it.
	gone := bundle()
	gone.Model.Peers = gone.Model.Peers[:1]
	gone.Ruleset += "  "
	if err := e.Apply(ctx, Update{Bundle: gone}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(fw.forgotten, "drops_in_28 203.0.113.16") {
		t.Errorf("peer b's /28 element was not deleted: %v", fw.forgotten)
	}
	if _, ok := e.retired["b"]; ok {
		t.Errorf("a peer gone keeps retired totals: %+v", e.retired)
	}
}

type fakeEvents struct {
	mu     sync.Mutex
	events []string
}

func (r *fakeEvents) Event(gw *model.Gateway, eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, gw.Name+" "+eventType+" "+reason+": "+message)
}

func (r *fakeEvents) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// A repaired ruleset is counted, evented on the gateway and followed by cutting the
// connections the drifted table let start; a check that finds nothing does none of it, and a
// repair that failed is not counted.
func TestEngineVerifyRepairs(t *testing.T) {
	ctx := context.Background()
	fw := &fakeFirewall{}
	ev := &fakeEvents{}
	e := &Engine{Driver: &fakeDriver{}, Firewall: fw, Events: ev, Log: logr.Discard(), SkipLocalAddress: true}
	if err := e.Apply(ctx, Update{Bundle: bundle()}); err != nil {
		t.Fatal(err)
	}
	if d, err := e.Verify(ctx); err != nil || d.Drifted() || e.Repairs() != 0 || fw.unruledCuts != 0 || len(ev.list()) != 0 {
		t.Fatalf("no drift: %+v %v, repairs %d, cuts %d, events %v", d, err, e.Repairs(), fw.unruledCuts, ev.list())
	}
	fw.drift = Drift{Kind: DriftChanged, Detail: `chain forward: "accept" added`}
	if d, err := e.Verify(ctx); err != nil || d.Kind != DriftChanged {
		t.Fatalf("drift: %+v %v", d, err)
	}
	if e.Repairs() != 1 || fw.unruledCuts != 1 {
		t.Errorf("after a repair: repairs %d, cuts %d", e.Repairs(), fw.unruledCuts)
	}
	if evs := ev.list(); len(evs) != 1 || !strings.Contains(evs[0], "gw Warning RulesetRepaired: ") || !strings.Contains(evs[0], "changed") ||
		!strings.Contains(evs[0], `"accept" added`) {
		t.Errorf("events: %q", evs)
	}
	fw.drift, fw.verifyErr = Drift{Kind: DriftMissing}, errors.New("nft: out of memory")
	if _, err := e.Verify(ctx); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("failed repair: %v", err)
	}
	if e.Repairs() != 1 || len(ev.list()) != 1 {
		t.Errorf("a failed repair was counted: repairs %d, events %d", e.Repairs(), len(ev.list()))
	}
}

// Run checks the ruleset on its own ticker, so a drifted table is repaired within
// VerifyEvery, long before the next refresh.
func TestEngineRunVerifiesOnItsOwnTicker(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fw := &fakeFirewall{}
	e := &Engine{Driver: &fakeDriver{}, Firewall: fw, Log: logr.Discard(), SkipLocalAddress: true,
		RefreshEvery: time.Hour, VerifyEvery: 10 * time.Millisecond}
	updates := make(chan Update)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, updates) }()
	updates <- Update{Bundle: bundle()}
	fw.mu.Lock()
	fw.drift = Drift{Kind: DriftMissing}
	fw.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for e.Repairs() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no repair within 10 s with a 10 ms check interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// lossyDriver loses its configuration on demand (an external WireGuard device whose container
// restarted) and says so through Changes and NeedsApply.
type lossyDriver struct {
	fakeDriver
	mu      sync.Mutex
	lost    bool
	applies int
	changes chan struct{}
}

func (d *lossyDriver) Apply(context.Context, *render.Bundle, Secrets) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applies++
	d.lost = false
	return nil
}
func (d *lossyDriver) Changes() <-chan struct{} { return d.changes }
func (d *lossyDriver) NeedsApply() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}
func (d *lossyDriver) count() int { d.mu.Lock(); defer d.mu.Unlock(); return d.applies }

// A dataplane that lost its configuration gets the last applied one again, without a new update.
func TestEngineReappliesWhatTheDriverLost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := &lossyDriver{changes: make(chan struct{}, 1)}
	e := &Engine{Driver: d, Firewall: &fakeFirewall{}, Log: logr.Discard(), SkipLocalAddress: true,
		RefreshEvery: time.Hour, VerifyEvery: time.Hour}
	updates := make(chan Update)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, updates) }()
	updates <- Update{Bundle: bundle()}
	waitFor := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for d.count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d applies, want %d", d.count(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(1)
	d.changes <- struct{}{} // a change that lost nothing: no apply
	d.mu.Lock()
	d.lost = true
	d.mu.Unlock()
	d.changes <- struct{}{}
	waitFor(2)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d.count() != 2 {
		t.Errorf("%d applies, want 2", d.count())
	}
}

// A standby reports no tunnel state (its tunnels are not the gateway's) but keeps its
// snapshot; the fence hook runs before the driver and its error fails the update.
func TestEngineStandbyReportsNothing(t *testing.T) {
	d := &fakeDriver{states: map[string]PeerState{"a": {State: StateEstablished}}}
	r := &fakeReporter{}
	standby := true
	var hooked []*model.Gateway
	e := &Engine{Driver: d, Firewall: &fakeFirewall{}, Reporter: r, Log: logr.Discard(), SkipLocalAddress: true,
		Standby: func() bool { return standby },
		BeforeDriver: func(_ context.Context, m *model.Gateway) error {
			hooked = append(hooked, m)
			return nil
		}}
	b := bundle()
	if err := e.Apply(context.Background(), Update{Bundle: b}); err != nil {
		t.Fatal(err)
	}
	if len(hooked) != 1 || hooked[0] != b.Model {
		t.Fatalf("BeforeDriver saw %v", hooked)
	}
	snap, err := e.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.snaps) != 0 || !snap.Peers["a"].Connected() {
		t.Fatalf("standby: %d reports, snapshot %+v", len(r.snaps), snap.Peers["a"])
	}
	standby = false
	if _, err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.snaps) != 1 {
		t.Fatalf("active: %d reports, want 1", len(r.snaps))
	}
	e.BeforeDriver = func(context.Context, *model.Gateway) error { return errors.New("no fence") }
	if err := e.Apply(context.Background(), Update{Bundle: bundle()}); err == nil || !strings.Contains(err.Error(), "no fence") {
		t.Fatalf("apply with a failing hook: %v", err)
	}
}
