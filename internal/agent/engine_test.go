package agent

import (
	"context"
	"errors"
	"net/netip"
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
				{Name: "a", Authorization: model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow}},
				{Name: "b", Authorization: model.Decision{Reason: model.ReasonNoGrants}},
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
	a := nft.PeerCounters("a")
	b := nft.PeerCounters("b")
	fw := &fakeFirewall{counters: map[string]nft.CounterValue{a.In: {Packets: 1}, b.In: {Packets: 7, Bytes: 700}, b.Out: {Packets: 2}}}
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
