// Package firewall applies the gateway's rendered nftables ruleset atomically, re-asserts it
// when the table drifts from what was applied, and reads its per-peer drop counters.
//
// The first ruleset replaces the table by one `nft -f` transaction (the rendered text declares,
// deletes and re-creates it). A later one whose structure (chains, rules, set declarations:
// nft.Layout) differs from the one in force is loaded whole into the table in force, again one
// `nft -f` transaction (nft.Reload): rules and elements flushed and re-added, the chains on their
// hooks and the counters kept, so that no packet meets a chain mid-replacement. A ruleset that
// differs only in counters and set elements — a peer added, removed or re-granted — is applied
// as one netlink transaction of just those changes (delta.go): all or nothing like `nft -f`,
// in milliseconds where a whole 10,000-peer table takes half a second, and without touching
// the counters that stay. Should the kernel refuse a delta, the ruleset is loaded whole
// instead, and should it refuse a load into the table, the table is replaced. The next Verify
// lists the table and compares it with what was applied, repairing any difference the same
// way: into the table in force, or by replacing it when that is refused or leaves something
// the ruleset does not declare.
package firewall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// Firewall is the gateway's nftables table. Counters survive re-applies: deltas and loads into
// the table keep them, and when the table is replaced (its counters restart at zero) what they
// had counted is carried over.
type Firewall struct {
	// NFT is the nft binary; "nft" from PATH when empty.
	NFT string
	// Generation reads the nftables generation of the network namespace nft works in
	// (KernelGeneration, when that is the agent's own). Verify lists the table only when the
	// generation moved since it last looked. Nil: Verify lists the table every time.
	Generation func() (uint32, error)
	// NetNS is the network namespace file (/run/netns/NAME) whose table netlink changes go
	// to; empty: the agent's own. It must be the namespace nft works in.
	NetNS string
	// Log gets a line per ruleset applied: how (a netlink delta of how many changes, or a
	// whole load) and how long it took; and a delta the kernel refused. Zero: no logging.
	Log logr.Logger

	mu      sync.Mutex
	applied string
	// conn is the netfilter socket deltas go through, kept open from one to the next (Close
	// closes it): the kernel frees what a transaction deleted after an RCU grace period, and
	// closing a netfilter socket waits for that work (6–20 ms measured here on 6.18, for any
	// deletion, even one set element), so a socket per delta would make every removal pay it.
	// The deletion itself is in force when the kernel acknowledges the batch.
	conn *netlink.Conn
	// layout is that of the ruleset applied, when the table is known to hold it (nil after
	// a failed repair, or when the ruleset could not be split): changes to it can go by delta.
	layout *nft.Layout
	// last is how the last Apply that changed something went: pathFull or pathDelta; lastTx
	// how long its transaction took (the kernel's part, for BenchmarkApply).
	last   applyPath
	lastTx time.Duration
	// repaired is how the last repair of Verify went: pathReload (into the table in force) or
	// pathFull (the table replaced).
	repaired applyPath
	// deltas applied since the reference listing was taken, not yet applied to it.
	deltas  []nft.Delta
	carried map[string]nft.CounterValue
	// listing is the table as nft listed it right after the last apply (normalised; nil when
	// that listing failed), seen unchanged at generation gen when genOK.
	listing []string
	gen     uint32
	genOK   bool
}

func (f *Firewall) nft() string {
	if f.NFT == "" {
		return "nft"
	}
	return f.NFT
}

// applyPath is how an Apply reached the kernel.
type applyPath int

const (
	pathNone   applyPath = iota
	pathFull             // one `nft -f` of the whole ruleset, replacing the table
	pathReload           // one `nft -f` of the whole ruleset into the table in force (nft.Reload)
	pathDelta            // one netlink transaction of counter and element changes
)

// Apply brings the table to the ruleset in one transaction unless it is already the one
// applied: by a delta of counters and elements when only those differ from the ruleset in
// force, else (or when the kernel refuses the delta) by loading it whole. On error the
// previous ruleset stays in force (both kinds of transaction apply all or nothing).
func (f *Firewall) Apply(ctx context.Context, ruleset string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ruleset == f.applied {
		return nil
	}
	next, splitErr := nft.Split(ruleset)
	if splitErr == nil && f.layout != nil {
		if d, ok := nft.Diff(*f.layout, next); ok && d.Changes() <= maxDeltaChanges {
			t0 := time.Now()
			err := f.delta(d)
			if err == nil {
				f.applied, f.layout, f.last, f.lastTx = ruleset, &next, pathDelta, time.Since(t0)
				f.Log.Info("ruleset applied", "by", "netlink delta", "changes", d.Changes(), "took", f.lastTx.String())
				// The next Verify (the generation moved, so it lists the table) checks it
				// against what a whole load would have left: the reference listing with the
				// deltas applied to it, there, off this path.
				if f.listing != nil {
					f.deltas = append(f.deltas, d)
				}
				f.genOK = false
				return nil
			}
			// Refused as a whole: the table is as it was; a whole load decides.
			f.Log.Info("ruleset delta not applied, loading the ruleset whole", "changes", d.Changes(), "reason", err.Error())
		}
	}
	// Loaded whole into the table in force, keeping its chains and counters, when its layout
	// is known; should the kernel refuse that (the table is not what was applied), replacing it.
	if splitErr == nil && f.layout != nil {
		if script, ok := nft.Reload(*f.layout, next, ruleset); ok {
			// A drops set the new ruleset does not declare (the last subnet of its length is
			// gone) goes with the load: what its elements counted is carried over.
			var gone map[string]nft.CounterValue
			if dropsSetsGone(*f.layout, next) {
				gone, _ = f.readDrops(ctx)
			}
			t0 := time.Now()
			err := f.load(ctx, script)
			if err == nil {
				for name := range gone {
					if set, _, _ := strings.Cut(name, " "); slices.ContainsFunc(next.Sets, func(s nft.SetContents) bool { return s.Name == set }) {
						delete(gone, name)
					}
				}
				f.carry(gone)
				f.applied, f.layout, f.last, f.lastTx = ruleset, &next, pathReload, time.Since(t0)
				f.Log.Info("ruleset applied", "by", "whole load into the table (nft -f)", "took", f.lastTx.String())
				f.record(ctx)
				return nil
			}
			f.Log.Info("ruleset not loaded into the table, replacing the table", "reason", err.Error())
		}
	}
	// What the old table counted is carried into the totals once it has been replaced.
	var before map[string]nft.CounterValue
	if f.applied != "" {
		before, _ = f.read(ctx)
	}
	t0 := time.Now()
	if err := f.load(ctx, ruleset); err != nil {
		return fmt.Errorf("applying nftables ruleset: %w", err)
	}
	f.lastTx = time.Since(t0)
	f.Log.Info("ruleset applied", "by", "whole load replacing the table (nft -f)", "took", f.lastTx.String())
	f.carry(before)
	f.applied, f.last = ruleset, pathFull
	f.layout = nil
	if splitErr == nil {
		f.layout = &next
	}
	f.record(ctx)
	return nil
}

// dropsSetsGone reports whether old has a drops set (nft.IsDropsSet) that next does not.
func dropsSetsGone(old, next nft.Layout) bool {
	for _, s := range old.Sets {
		if nft.IsDropsSet(s.Name) && !slices.ContainsFunc(next.Sets, func(n nft.SetContents) bool { return n.Name == s.Name }) {
			return true
		}
	}
	return false
}

// delta applies d to the table in one netlink transaction.
func (f *Firewall) delta(d nft.Delta) error {
	if d.Empty() {
		return nil
	}
	msgs, err := deltaMessages(d)
	if err != nil {
		return err
	}
	if f.conn == nil {
		conn, err := f.dial()
		if err != nil {
			return err
		}
		f.conn = conn
	}
	if err := transact(f.conn, msgs); err != nil {
		// A refused batch may leave more of the kernel's answers on the socket than the
		// first error read: the next delta starts on a fresh one.
		f.closeConn()
		return err
	}
	return nil
}

// Close closes the netfilter socket the deltas went through, if open; a later delta opens a
// new one. The table stays as it is.
func (f *Firewall) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closeConn()
}

func (f *Firewall) closeConn() error {
	if f.conn == nil {
		return nil
	}
	err := f.conn.Close()
	f.conn = nil
	return err
}

// dial opens a netfilter netlink socket in the namespace nft works in.
func (f *Firewall) dial() (*netlink.Conn, error) {
	cfg := &netlink.Config{}
	if f.NetNS != "" {
		ns, err := os.Open(f.NetNS)
		if err != nil {
			return nil, err
		}
		defer ns.Close()
		cfg.NetNS = int(ns.Fd())
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return conn, nil
}

// Verify checks the table against the ruleset last applied and, when it is missing (deleted,
// or the whole ruleset flushed: a node's `systemctl restart nftables`) or its listing differs
// (a rule, set element or chain changed), re-loads that ruleset — the same all-or-nothing
// transactions as Apply: into the table in force, keeping its chains and counters, and when
// that is refused or leaves something the ruleset does not declare, replacing the table — and
// returns what it found. Counters are carried over when the table is replaced and the drifted
// one could still be read; a deleted table's are lost.
//
// One check costs one netlink round trip when Generation is set and nothing in the namespace
// changed, otherwise one `nft -s list table`. Nothing happens before a ruleset was applied.
// On error the drift found (if any) is returned with it: the repair did not happen.
func (f *Firewall) Verify(ctx context.Context) (agent.Drift, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.applied == "" {
		return agent.Drift{}, nil
	}
	for _, d := range f.deltas {
		f.listing = applyToListing(f.listing, d)
	}
	f.deltas = nil
	gen, genOK := f.generation()
	if genOK && f.genOK && gen == f.gen && f.listing != nil {
		return agent.Drift{}, nil
	}
	got, missing, err := f.list(ctx)
	if err != nil {
		return agent.Drift{}, err
	}
	var drift agent.Drift
	switch diff := listingDiff(f.listing, got); {
	case missing:
		drift = agent.Drift{Kind: agent.DriftMissing, Detail: "table " + nft.Family + " " + nft.Table + " not found"}
	case f.listing == nil:
		// No listing was taken after the apply: this one is the reference from now on.
		f.listing, f.gen, f.genOK = got, gen, genOK
		return agent.Drift{}, nil
	case diff == "":
		f.gen, f.genOK = gen, genOK
		return agent.Drift{}, nil
	default:
		drift = agent.Drift{Kind: agent.DriftChanged, Detail: diff}
		if f.repairInPlace(ctx) {
			f.repaired = pathReload
			return drift, nil
		}
	}
	var before map[string]nft.CounterValue
	if !missing {
		before, _ = f.read(ctx)
	}
	gen, genOK = f.generation()
	if err := f.load(ctx, f.applied); err != nil {
		f.layout = nil // whatever the table holds now, it is not known to be f.applied
		return drift, fmt.Errorf("re-applying nftables ruleset: %w", err)
	}
	if l, err := nft.Split(f.applied); err == nil {
		f.layout = &l
	}
	f.carry(before)
	f.repaired = pathFull
	// The same ruleset lists as before: when the load was the namespace's only commit since
	// (one transaction, one generation), the reference listing still holds.
	if after, ok := f.generation(); genOK && ok && after == gen+1 && f.listing != nil {
		f.gen, f.genOK = after, true
	} else {
		f.record(ctx)
	}
	return drift, nil
}

// repairInPlace loads the ruleset applied into the changed table in force (nft.Reload: rules
// and sets flushed and re-added, chains re-declared with their policies; one transaction,
// counters kept) and reports whether the table then lists as the reference listing. It does
// not when the load is refused (a set or chain of the ruleset was deleted) or something the
// ruleset does not declare was added to the table (Reload keeps what it does not know): then
// the table is replaced.
func (f *Firewall) repairInPlace(ctx context.Context) bool {
	if f.layout == nil || f.listing == nil {
		return false
	}
	script, ok := nft.Reload(*f.layout, *f.layout, f.applied)
	if !ok {
		return false
	}
	if err := f.load(ctx, script); err != nil {
		f.Log.Info("ruleset not repaired in the table, replacing the table", "reason", err.Error())
		return false
	}
	gen, genOK := f.generation()
	got, missing, err := f.list(ctx)
	if err != nil || missing || listingDiff(f.listing, got) != "" {
		return false
	}
	f.gen, f.genOK = gen, genOK
	return true
}

// record takes the reference listing of the table just applied.
func (f *Firewall) record(ctx context.Context) {
	f.deltas = nil
	gen, genOK := f.generation()
	got, missing, err := f.list(ctx)
	if err != nil || missing {
		f.listing, f.genOK = nil, false
		return
	}
	f.listing, f.gen, f.genOK = got, gen, genOK
}

// generation reads the namespace's nftables generation, when Generation is set and works.
func (f *Firewall) generation() (uint32, bool) {
	if f.Generation == nil {
		return 0, false
	}
	gen, err := f.Generation()
	return gen, err == nil
}

// list returns the table's stateless listing, normalised, or missing when there is no table.
func (f *Firewall) list(ctx context.Context) (lines []string, missing bool, err error) {
	cmd := exec.CommandContext(ctx, f.nft(), "-s", "list", "table", nft.Family, nft.Table)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && strings.Contains(stderr.String(), "No such file or directory") {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("listing nftables table: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return normalizeListing(stdout.String()), false, nil
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
	f.applied, f.listing, f.genOK, f.layout, f.deltas = "", nil, false, nil, nil
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

// Counters returns, since the agent started, every named counter's total and every drops
// set element's (by nft.DropName): what the table counts now plus what tables it replaced had
// counted.
func (f *Firewall) Counters(ctx context.Context) (map[string]nft.CounterValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, err := f.read(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]nft.CounterValue, len(cur)+len(f.carried))
	for name, v := range cur {
		c := f.carried[name]
		out[name] = nft.CounterValue{Packets: v.Packets + c.Packets, Bytes: v.Bytes + c.Bytes}
	}
	for name, c := range f.carried {
		if _, ok := cur[name]; !ok {
			out[name] = c // an element not made again since its table was replaced
		}
	}
	return out, nil
}

// read lists the table's named counters and the elements of its drops sets.
func (f *Firewall) read(ctx context.Context) (map[string]nft.CounterValue, error) {
	out, err := f.listJSON(ctx, "counters", "table", nft.Family, nft.Table)
	if err != nil {
		return nil, fmt.Errorf("reading nftables counters: %w", err)
	}
	counters, err := nft.ParseCounters(out)
	if err != nil {
		return nil, err
	}
	drops, err := f.readDrops(ctx)
	if err != nil {
		return nil, err
	}
	maps.Copy(counters, drops)
	return counters, nil
}

// readDrops lists the elements of the drops sets (nft.IsDropsSet) of the ruleset applied: each
// set on its own, so that no other set's elements (a large gateway's tens of thousands) are
// listed every time; every set of the table when the ruleset's layout is not known.
func (f *Firewall) readDrops(ctx context.Context) (map[string]nft.CounterValue, error) {
	if f.layout == nil {
		out, err := f.listJSON(ctx, "sets", "table", nft.Family, nft.Table)
		if err != nil {
			return nil, fmt.Errorf("reading nftables drops sets: %w", err)
		}
		return nft.ParseDrops(out)
	}
	all := map[string]nft.CounterValue{}
	for _, s := range f.layout.Sets {
		if !nft.IsDropsSet(s.Name) {
			continue
		}
		out, err := f.listJSON(ctx, "set", nft.Family, nft.Table, s.Name)
		if err != nil {
			return nil, fmt.Errorf("reading nftables set %s: %w", s.Name, err)
		}
		d, err := nft.ParseDrops(out)
		if err != nil {
			return nil, err
		}
		maps.Copy(all, d)
	}
	return all, nil
}

// listJSON runs `nft -j list ARGS...`.
func (f *Firewall) listJSON(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, f.nft(), append([]string{"-j", "list"}, args...)...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
		}
		return nil, err
	}
	return out, nil
}

// ForgetDrops deletes the drops set elements named (nft.DropName) and what was carried over
// for them, and returns what they had counted: their subnets changed hands or are gone, and
// whoever has one next counts from zero. Elements the kernel has not made (no drop yet) need
// nothing.
func (f *Firewall) ForgetDrops(ctx context.Context, names []string) (map[string]nft.CounterValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(names) == 0 {
		return nil, nil
	}
	var present map[string]nft.CounterValue
	if f.applied != "" {
		var err error
		if present, err = f.readDrops(ctx); err != nil {
			return nil, err
		}
	}
	counted := make(map[string]nft.CounterValue, len(names))
	for _, n := range names {
		v, c := present[n], f.carried[n]
		if total := (nft.CounterValue{Packets: v.Packets + c.Packets, Bytes: v.Bytes + c.Bytes}); total != (nft.CounterValue{}) {
			counted[n] = total
		}
		delete(f.carried, n)
	}
	// In transactions of at most maxDeltaChanges deletions (a gateway's peers all gone at once
	// may have made tens of thousands of elements).
	var d nft.Delta
	bySet := map[string]int{}
	flush := func() error {
		if err := f.delta(d); err != nil {
			return fmt.Errorf("deleting drops set elements: %w", err)
		}
		d, bySet = nft.Delta{}, map[string]int{}
		return nil
	}
	for _, n := range names {
		if _, ok := present[n]; !ok {
			continue
		}
		set, addr, ok := strings.Cut(n, " ")
		if !ok || !nft.IsDropsSet(set) {
			return counted, fmt.Errorf("%q is not a drops set element", n)
		}
		i, seen := bySet[set]
		if !seen {
			i = len(d.Sets)
			bySet[set] = i
			d.Sets = append(d.Sets, nft.SetDelta{Set: nft.SetContents{Name: set, Type: "ipv4_addr"}})
		}
		d.Sets[i].Del = append(d.Sets[i].Del, addr)
		if d.Changes() == maxDeltaChanges {
			if err := flush(); err != nil {
				return counted, err
			}
		}
	}
	return counted, flush()
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
