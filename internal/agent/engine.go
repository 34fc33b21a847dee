package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Firewall applies the ruleset and reads its counters (internal/agent/firewall).
type Firewall interface {
	Apply(ctx context.Context, ruleset string) error
	// Verify checks the table against the ruleset last applied and re-applies that ruleset when
	// the table is missing or differs; the Drift it returns says what it found (zero: nothing).
	Verify(ctx context.Context) (Drift, error)
	// Counters are the named counters' and the drops set elements' totals (nft.DropName).
	Counters(ctx context.Context) (map[string]nft.CounterValue, error)
	// ForgetDrops deletes drops set elements and returns what they had counted.
	ForgetDrops(ctx context.Context, names []string) (map[string]nft.CounterValue, error)
	// OpenStartupGate removes the startup gate the init step installed (nft.StartupGate).
	OpenStartupGate(ctx context.Context) error
	// CutRevokedFlows ends the translated connections the model no longer grants.
	CutRevokedFlows(ctx context.Context, m *model.Gateway) (int, error)
	// CutUnruledFlows ends, after a repair, the connections the ruleset did not admit: the
	// revoked ones and those from or to a peer's subnets that a drifted table let start.
	CutUnruledFlows(ctx context.Context, m *model.Gateway) (int, error)
	// Remove deletes the ruleset and the startup gate.
	Remove(ctx context.Context) error
}

// Drift kinds: how the nftables table differed from the ruleset the agent applied.
const (
	// DriftMissing: the table was gone (deleted, or the whole ruleset flushed).
	DriftMissing = "missing"
	// DriftChanged: the table was there but its rules, sets or objects differed.
	DriftChanged = "changed"
)

// Drift is what a ruleset check found; the zero value means the table was as applied.
type Drift struct {
	// Kind is DriftMissing or DriftChanged.
	Kind string
	// Detail says what differed, for a log line and an Event (never secret: the ruleset holds
	// addresses, ports and peer names only).
	Detail string
}

// Drifted reports whether the check found the table differing (and repaired it, unless it
// returned an error too).
func (d Drift) Drifted() bool { return d.Kind != "" }

// EventRecorder records a Kubernetes Event on the gateway's VPNGateway (internal/agent/status).
type EventRecorder interface {
	Event(gw *model.Gateway, eventType, reason, message string)
}

// Event reasons of the agent.
const (
	// ReasonRulesetRepaired: the agent found its nftables table missing or changed and
	// re-applied the rendered ruleset.
	ReasonRulesetRepaired = "RulesetRepaired"
)

// Reporter publishes peers' tunnel state (the VPNPeer status writer, in a cluster).
type Reporter interface {
	Report(ctx context.Context, b *render.Bundle, snap Snapshot) error
}

// Update is a new desired state: the rendered bundle and the secrets it references.
type Update struct {
	Bundle  *render.Bundle
	Secrets Secrets
}

// PeerSnapshot is everything known about one peer at one time.
type PeerSnapshot struct {
	PeerState
	Authorized bool
	// Drops are the packets the ruleset dropped from (In) and toward (Out) the peer's subnets.
	DropsIn, DropsOut nft.CounterValue
}

// Snapshot is the gateway's state at one time, by peer name.
type Snapshot struct {
	Taken time.Time
	Peers map[string]PeerSnapshot
	// Spoofed counts the packets from the tunnel whose source is not in the subnets of the
	// peer whose SA carried them (nft.CounterSpoofed); nil when the ruleset has no such check
	// (kernel ESP only: with userspace ESP and WireGuard the tunnels' disjoint selectors and
	// allowed IPs tie a source to its tunnel, uncounted).
	Spoofed *nft.CounterValue
}

// Engine converges the dataplane to each Update — ruleset first, so no tunnel carries traffic
// the ruleset has not been told about (fail closed), then the driver, then (once) the startup
// gate opens, so no client meets a dataplane without its peers — and refreshes the peers'
// state when the driver signals a change and periodically.
type Engine struct {
	Driver   Driver
	Firewall Firewall
	// Reporter may be nil (no cluster).
	Reporter Reporter
	Log      logr.Logger
	// Events may be nil (no cluster).
	Events EventRecorder
	// RefreshEvery is the periodic refresh interval (default 5 s).
	RefreshEvery time.Duration
	// VerifyEvery is how often the ruleset is checked against the one applied and repaired
	// when it drifted (default 1 s: a repair within two seconds).
	VerifyEvery time.Duration
	// SkipLocalAddress leaves the gateway's service-CIDR address and its uplink's routing
	// alone (unit tests).
	SkipLocalAddress bool
	// Netlink is the namespace whose addresses and routing the engine sets up; nil: the
	// agent's own.
	Netlink *netlink.Handle
	// Standby, when set and true, keeps the peers' tunnel state from the Reporter: the pod is
	// a gateway's standby, whose tunnels are not the gateway's (internal/agent/availability).
	Standby func() bool
	// BeforeDriver, when set, runs after the ruleset and before the driver apply an update
	// (the standby's fence follows the model's WireGuard port there); its error fails the
	// update.
	BeforeDriver func(ctx context.Context, m *model.Gateway) error
	// OnTearDown, when set, runs when TearDown takes a host-network gateway off its node (its
	// tunnels gone): the VIP of a gateway with a standby is released there.
	OnTearDown func(ctx context.Context) error

	mu         sync.Mutex
	bundle     *render.Bundle
	last       Snapshot
	gateOpened bool
	// ruled is the model of the ruleset the firewall holds (set before the rest of an update
	// is applied, which may fail).
	ruled *model.Gateway
	// drops names each peer's drops set elements in the ruleset applied; retired is what the
	// subnets a peer no longer has had counted for it (drops.go).
	drops   map[string]nft.PeerDrops
	retired map[string]dropTotals
	// repairs counts ruleset repairs (bnerd_vpn_ruleset_repairs_total).
	repairs atomic.Uint64
	// verifyErr and verifyErrAt: the last failed check, logged again only when it changes or
	// a while later (a check runs every second).
	verifyErr   string
	verifyErrAt time.Time
}

// Apply converges to one update.
func (e *Engine) Apply(ctx context.Context, u Update) error {
	if u.Bundle == nil {
		return errors.New("no configuration")
	}
	if err := e.Firewall.Apply(ctx, u.Bundle.Ruleset); err != nil {
		return err // the previous ruleset and tunnels stay as they are
	}
	e.mu.Lock()
	e.ruled = u.Bundle.Model
	e.mu.Unlock()
	e.settleDrops(ctx, u.Bundle.Model)
	// New connections now meet the new grants; established ones a grant no longer covers end.
	if n, err := e.Firewall.CutRevokedFlows(ctx, u.Bundle.Model); err != nil {
		e.Log.Error(err, "revoked grants: established connections could not be cut; new ones are refused")
	} else if n > 0 {
		e.Log.Info("cut connections whose grant was revoked", "connections", n)
	}
	if !e.SkipLocalAddress {
		if err := ensureLocalAddress(e.Netlink, u.Bundle.Model); err != nil {
			return err
		}
		// The tunnels bind to the uplink's address: nothing is loaded before it is there.
		if err := EnsureUplink(e.Netlink, u.Bundle.Model); err != nil {
			return err
		}
		skipped, err := ensureLinkRoutes(nil, u.Bundle.Model)
		if err != nil {
			return err
		}
		if len(skipped) > 0 {
			e.Log.V(1).Info("ClusterLink routes left to the pod's default route", "routes", skipped)
		}
	}
	if e.BeforeDriver != nil {
		if err := e.BeforeDriver(ctx, u.Bundle.Model); err != nil {
			return err
		}
	}
	if err := e.Driver.Apply(ctx, u.Bundle, u.Secrets); err != nil {
		return fmt.Errorf("%s dataplane: %w", u.Bundle.Model.Protocol, err)
	}
	// The peers are loaded: the tunnel ports the init step closed may open.
	if !e.gateOpened {
		if err := e.Firewall.OpenStartupGate(ctx); err != nil {
			return err
		}
		e.gateOpened = true
	}
	e.mu.Lock()
	e.bundle = u.Bundle
	e.mu.Unlock()
	return nil
}

// settleDrops follows the ruleset to next's: the drops elements of subnets that changed hands
// or went are deleted, what they had counted retired to their peer while it exists, and the
// names of each peer's elements are next's.
func (e *Engine) settleDrops(ctx context.Context, next *model.Gateway) {
	names, err := nft.DropCounters(next)
	if err != nil {
		names = nil // the firewall applied its ruleset: not reached
	}
	e.mu.Lock()
	prev := e.drops
	e.mu.Unlock()
	stale := staleDrops(prev, names)
	var forget []string
	for _, d := range stale {
		forget = append(append(forget, d.In...), d.Out...)
	}
	retire := map[string]dropTotals{}
	if len(forget) > 0 {
		counted, err := e.Firewall.ForgetDrops(ctx, forget)
		if err != nil {
			e.Log.Error(err, "drops of subnets that changed hands or went: their counts may pass to a new owner", "subnets", len(forget))
		}
		for peer, d := range stale {
			retire[peer] = dropTotals{in: sumOf(counted, d.In), out: sumOf(counted, d.Out)}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	retired := make(map[string]dropTotals, len(e.retired))
	for peer := range names {
		r := e.retired[peer]
		r.in, r.out = addCounts(r.in, retire[peer].in), addCounts(r.out, retire[peer].out)
		if r != (dropTotals{}) {
			retired[peer] = r
		}
	}
	e.drops, e.retired = names, retired
}

// Verify checks the ruleset against the one applied and, when the firewall found it missing
// or changed and re-applied it, logs the repair, counts it, ends the connections the drifted
// table let start and records an Event on the gateway. It returns what the firewall found.
func (e *Engine) Verify(ctx context.Context) (Drift, error) {
	start := time.Now()
	d, err := e.Firewall.Verify(ctx)
	if !d.Drifted() {
		return d, err
	}
	if err != nil {
		return d, fmt.Errorf("nftables table %s (%s), and re-applying the ruleset failed: %w", d.Kind, d.Detail, err)
	}
	e.repairs.Add(1)
	e.mu.Lock()
	m := e.ruled
	e.mu.Unlock()
	e.Log.Info("nftables ruleset drifted from the one applied; re-applied it", "drift", d.Kind, "detail", d.Detail, "took", time.Since(start))
	if m == nil {
		return d, nil
	}
	if n, err := e.Firewall.CutUnruledFlows(ctx, m); err != nil {
		e.Log.Error(err, "ruleset repaired: connections the drifted table let start could not be cut; new ones are refused")
	} else if n > 0 {
		e.Log.Info("cut connections the drifted ruleset let start", "connections", n)
	}
	if e.Events != nil {
		e.Events.Event(m, "Warning", ReasonRulesetRepaired,
			fmt.Sprintf("The gateway's nftables table was %s (%s); the agent re-applied the rendered ruleset", d.Kind, d.Detail))
	}
	return d, nil
}

// Repairs is how many times the ruleset was found drifted and re-applied.
func (e *Engine) Repairs() uint64 { return e.repairs.Load() }

// Refresh reads the driver's and the firewall's state into a snapshot and reports it.
func (e *Engine) Refresh(ctx context.Context) (Snapshot, error) {
	e.mu.Lock()
	b := e.bundle
	e.mu.Unlock()
	if b == nil {
		return Snapshot{}, nil
	}
	states, err := e.Driver.Peers(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	counters, err := e.Firewall.Counters(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Taken: time.Now(), Peers: make(map[string]PeerSnapshot, len(b.Model.Peers))}
	if v, ok := counters[nft.CounterSpoofed]; ok {
		snap.Spoofed = &v
	}
	e.mu.Lock()
	drops, retired := e.drops, e.retired
	e.mu.Unlock()
	for _, p := range b.Model.Peers {
		st, ok := states[p.Name]
		if !ok {
			st = PeerState{State: StateDown, Message: "no tunnel configured for this peer"}
		}
		snap.Peers[p.Name] = PeerSnapshot{
			PeerState:  st,
			Authorized: p.Authorization.Authorized,
			DropsIn:    addCounts(sumOf(counters, drops[p.Name].In), retired[p.Name].in),
			DropsOut:   addCounts(sumOf(counters, drops[p.Name].Out), retired[p.Name].out),
		}
	}
	e.mu.Lock()
	e.last = snap
	e.mu.Unlock()
	if e.Reporter != nil && (e.Standby == nil || !e.Standby()) {
		if err := e.Reporter.Report(ctx, b, snap); err != nil {
			return snap, err
		}
	}
	return snap, nil
}

// Last is the latest snapshot (for metrics).
func (e *Engine) Last() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// Ready reports whether a configuration has been applied.
func (e *Engine) Ready() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bundle != nil
}

// Run applies updates as they come and keeps the state fresh until ctx ends. A failed update
// is retried with backoff while no newer one arrives; the dataplane keeps its last good state.
func (e *Engine) Run(ctx context.Context, updates <-chan Update) error {
	every := e.RefreshEvery
	if every == 0 {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	verifyEvery := e.VerifyEvery
	if verifyEvery == 0 {
		verifyEvery = time.Second
	}
	verifyTick := time.NewTicker(verifyEvery)
	defer verifyTick.Stop()
	var pending, last *Update
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	backoff := 200 * time.Millisecond
	apply := func() {
		if pending == nil {
			return
		}
		start := time.Now()
		if err := e.Apply(ctx, *pending); err != nil {
			e.Log.Error(err, "applying configuration failed; keeping the last good one", "retryIn", backoff)
			retry.Reset(backoff)
			backoff = min(backoff*2, 30*time.Second)
			return
		}
		e.Log.Info("configuration applied", "generation", pending.Bundle.Model.Generation, "took", time.Since(start))
		last, pending, backoff = pending, nil, 200*time.Millisecond
		e.refresh(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-updates:
			pending = &u
			apply()
		case <-retry.C:
			apply()
		case <-e.Driver.Changes():
			// A dataplane that lost its configuration (a WireGuard device whose own container
			// restarted) gets the last one again.
			if r, ok := e.Driver.(reapplier); ok && r.NeedsApply() && pending == nil && last != nil {
				pending = last
				apply()
				continue
			}
			e.refresh(ctx)
		case <-tick.C:
			e.refresh(ctx)
		case <-verifyTick.C:
			e.verify(ctx)
		}
	}
}

// reapplier is a Driver that can lose its configuration behind the agent's back.
type reapplier interface{ NeedsApply() bool }

// refresh checks the ruleset first: a drifted table is repaired before its counters are read.
func (e *Engine) refresh(ctx context.Context) {
	e.verify(ctx)
	if _, err := e.Refresh(ctx); err != nil && ctx.Err() == nil {
		e.Log.Error(err, "refreshing tunnel state")
	}
}

// verifyErrEvery is how often a check that keeps failing the same way is logged again.
const verifyErrEvery = time.Minute

func (e *Engine) verify(ctx context.Context) {
	_, err := e.Verify(ctx)
	switch {
	case ctx.Err() != nil:
	case err == nil:
		if e.verifyErr != "" {
			e.Log.Info("nftables ruleset check works again")
			e.verifyErr = ""
		}
	case err.Error() != e.verifyErr || time.Since(e.verifyErrAt) >= verifyErrEvery:
		e.Log.Error(err, "checking the nftables ruleset")
		e.verifyErr, e.verifyErrAt = err.Error(), time.Now()
	}
}
