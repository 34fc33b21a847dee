package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Firewall applies the ruleset and reads its counters (internal/agent/firewall).
type Firewall interface {
	Apply(ctx context.Context, ruleset string) error
	Counters(ctx context.Context) (map[string]nft.CounterValue, error)
	// OpenStartupGate removes the startup gate the init step installed (nft.StartupGate).
	OpenStartupGate(ctx context.Context) error
	// CutRevokedFlows ends the translated connections the model no longer grants.
	CutRevokedFlows(ctx context.Context, m *model.Gateway) (int, error)
	// Remove deletes the ruleset and the startup gate.
	Remove(ctx context.Context) error
}

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
	// RefreshEvery is the periodic refresh interval (default 5 s).
	RefreshEvery time.Duration
	// SkipLocalAddress leaves the gateway's service-CIDR address alone (unit tests).
	SkipLocalAddress bool

	mu         sync.Mutex
	bundle     *render.Bundle
	last       Snapshot
	applied    chan struct{}
	gateOpened bool
}

// Apply converges to one update.
func (e *Engine) Apply(ctx context.Context, u Update) error {
	if u.Bundle == nil {
		return errors.New("no configuration")
	}
	if err := e.Firewall.Apply(ctx, u.Bundle.Ruleset); err != nil {
		return err // the previous ruleset and tunnels stay as they are
	}
	// New connections now meet the new grants; established ones a grant no longer covers end.
	if n, err := e.Firewall.CutRevokedFlows(ctx, u.Bundle.Model); err != nil {
		e.Log.Error(err, "revoked grants: established connections could not be cut; new ones are refused")
	} else if n > 0 {
		e.Log.Info("cut connections whose grant was revoked", "connections", n)
	}
	if !e.SkipLocalAddress {
		if err := ensureLocalAddress(nil, u.Bundle.Model); err != nil {
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
	for _, p := range b.Model.Peers {
		names := nft.PeerCounters(p.Name)
		st, ok := states[p.Name]
		if !ok {
			st = PeerState{State: StateDown, Message: "no tunnel configured for this peer"}
		}
		snap.Peers[p.Name] = PeerSnapshot{
			PeerState:  st,
			Authorized: p.Authorization.Authorized,
			DropsIn:    counters[names.In],
			DropsOut:   counters[names.Out],
		}
	}
	e.mu.Lock()
	e.last = snap
	e.mu.Unlock()
	if e.Reporter != nil {
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
	var pending *Update
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
		pending, backoff = nil, 200*time.Millisecond
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
			e.refresh(ctx)
		case <-tick.C:
			e.refresh(ctx)
		}
	}
}

func (e *Engine) refresh(ctx context.Context) {
	if _, err := e.Refresh(ctx); err != nil && ctx.Err() == nil {
		e.Log.Error(err, "refreshing tunnel state")
	}
}
