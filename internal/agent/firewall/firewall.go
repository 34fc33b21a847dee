// Package firewall applies the gateway's rendered nftables ruleset atomically (one `nft -f`
// transaction replaces the whole table) and reads its per-peer drop counters.
package firewall

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Firewall is the gateway's nftables table. Counters survive re-applies: applying re-creates
// the table (its counters restart at zero), so what they had counted is carried over.
type Firewall struct {
	// NFT is the nft binary; "nft" from PATH when empty.
	NFT string

	mu      sync.Mutex
	applied string
	carried map[string]nft.CounterValue
}

func (f *Firewall) nft() string {
	if f.NFT == "" {
		return "nft"
	}
	return f.NFT
}

// Apply loads the ruleset in one transaction unless it is already the one applied. On error
// the previous ruleset stays in force (nft applies all or nothing).
func (f *Firewall) Apply(ctx context.Context, ruleset string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ruleset == f.applied {
		return nil
	}
	// What the old table counted is carried into the totals once it has been replaced.
	var before map[string]nft.CounterValue
	if f.applied != "" {
		before, _ = f.read(ctx)
	}
	if err := f.load(ctx, ruleset); err != nil {
		return fmt.Errorf("applying nftables ruleset: %w", err)
	}
	f.carry(before)
	f.applied = ruleset
	return nil
}

// OpenStartupGate removes the startup gate (nft.StartupGate); nothing happens without one.
func (f *Firewall) OpenStartupGate(ctx context.Context) error {
	return f.load(ctx, nft.OpenStartupGate)
}

// Remove deletes the ruleset and the startup gate (nothing happens where there are none).
func (f *Firewall) Remove(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(ctx, nft.RemoveRuleset+nft.OpenStartupGate); err != nil {
		return err
	}
	f.applied = ""
	return nil
}

// load runs one nft transaction.
func (f *Firewall) load(ctx context.Context, text string) error {
	cmd := exec.CommandContext(ctx, f.nft(), "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Applied reports whether a ruleset has been applied by this Firewall.
func (f *Firewall) Applied() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied != ""
}

// Counters returns every named counter's total since the agent started.
func (f *Firewall) Counters(ctx context.Context) (map[string]nft.CounterValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, err := f.read(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]nft.CounterValue, len(cur))
	for name, v := range cur {
		c := f.carried[name]
		out[name] = nft.CounterValue{Packets: v.Packets + c.Packets, Bytes: v.Bytes + c.Bytes}
	}
	return out, nil
}

func (f *Firewall) read(ctx context.Context) (map[string]nft.CounterValue, error) {
	out, err := exec.CommandContext(ctx, f.nft(), "-j", "list", "counters", "table", nft.Family, nft.Table).Output()
	if err != nil {
		return nil, fmt.Errorf("reading nftables counters: %w", err)
	}
	return nft.ParseCounters(out)
}

func (f *Firewall) carry(cur map[string]nft.CounterValue) {
	if f.carried == nil {
		f.carried = map[string]nft.CounterValue{}
	}
	for name, v := range cur {
		c := f.carried[name]
		f.carried[name] = nft.CounterValue{Packets: c.Packets + v.Packets, Bytes: c.Bytes + v.Bytes}
	}
}
