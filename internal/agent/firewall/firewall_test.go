package firewall

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// ruleset is a minimal table of the rendered shape: replaced atomically, with a named counter
// that counts every packet a ping sends to the namespace's own address.
func ruleset(extra string) string {
	return `table ip bnerd_vpn {}
delete table ip bnerd_vpn
table ip bnerd_vpn {
	counter peer_a_in {}
	chain input {
		type filter hook input priority filter; policy accept;
		icmp type echo-request counter name "peer_a_in"
		` + extra + `
	}
}
`
}

// Applies run in the namespace through `ip netns exec`, exactly as `nft` runs in the pod.
func TestApplyCountersAndFailure(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	ns := netns.NewRun(t, "bfw").NS("gw")
	ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
	f := &Firewall{NFT: "/usr/bin/nft"}
	f.NFT = writeWrapper(t, ns.Name)
	ctx := context.Background()

	if err := f.Apply(ctx, ruleset("")); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("ping", "-c", "3", "-i", "0.01", "-W", "1", "192.0.2.1")
	c, err := f.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := c["peer_a_in"].Packets; got != 3 {
		t.Fatalf("counter after 3 pings: %d", got)
	}

	// A ruleset changed in its text only (a comment) leaves the table as it is, counting on.
	if err := f.Apply(ctx, ruleset("# v2")); err != nil {
		t.Fatal(err)
	}
	ns.MustRun("ping", "-c", "2", "-i", "0.01", "-W", "1", "192.0.2.1")
	if c, _ = f.Counters(ctx); c["peer_a_in"].Packets != 5 {
		t.Fatalf("counter across a re-apply: %d, want 5", c["peer_a_in"].Packets)
	}

	// A broken ruleset is refused as a whole: the previous one stays in force.
	err = f.Apply(ctx, ruleset("this is not nft"))
	if err == nil || !strings.Contains(err.Error(), "applying nftables ruleset") {
		t.Fatalf("broken ruleset: %v", err)
	}
	ns.MustRun("ping", "-c", "1", "-W", "1", "192.0.2.1")
	if c, _ = f.Counters(ctx); c["peer_a_in"].Packets != 6 {
		t.Fatalf("counter after a refused apply: %d, want 6 (old ruleset still counting)", c["peer_a_in"].Packets)
	}
	if _, err := nft.ParseCounters([]byte(`{"nftables":[]}`)); err != nil {
		t.Fatal(err)
	}
}

// writeWrapper returns an "nft" that runs inside the namespace.
func writeWrapper(t testing.TB, ns string) string {
	return netns.Open(t, ns).Wrapper(t, "nft")
}

// driftRuleset has the rendered table's parts: named counters, an interval map to counters, an
// interval set of concatenations, a hash map, NAT and filter chains; a ping to 192.0.2.1
// counts in peer_a_in.
const driftRuleset = `table ip bnerd_vpn {}
delete table ip bnerd_vpn
table ip bnerd_vpn {
	counter peer_a_in {}
	counter peer_b_in {}
	map peer_in {
		type ipv4_addr : counter
		flags interval
		elements = { 203.0.113.0/28 : "peer_a_in", 203.0.113.16/28 : "peer_b_in", 198.51.100.0/25 : "peer_b_in" }
	}
	set fwd_grants {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
		flags interval
		elements = { 203.0.113.0/28 . 100.64.7.10 . tcp . 443, 198.51.100.0/25 . 100.64.7.11 . tcp . 5432 }
	}
	map fwd_dnat {
		type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
		elements = { 100.64.7.10 . tcp . 443 : 192.0.2.10 . 443, 100.64.7.11 . tcp . 5432 : 192.0.2.20 . 5432,
			100.64.7.12 . tcp . 22 : 192.0.2.30 . 22 }
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip saddr . ip daddr . meta l4proto . th dport @fwd_grants dnat ip to ip daddr . meta l4proto . th dport map @fwd_dnat
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		counter name ip saddr map @peer_in drop
	}
	chain input {
		type filter hook input priority filter; policy accept;
		icmp type echo-request counter name "peer_a_in"
	}
}
`

// Verify against real nftables in a namespace: a deleted table, a flushed ruleset and changed
// rules, elements or policies are re-applied — changes into the table in force, its counters
// counting on; a table gone, one with a chain the ruleset does not declare, or one whose set
// was deleted by replacing it, counts carried over where the drifted table could still be
// read — and the table lists as it did after the apply, while an unchanged table costs no
// transaction at all. Both ways of noticing: the kernel's generation first, and listing every
// time.
func TestVerifyRepairsDrift(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	for _, mode := range []string{"generation", "listing"} {
		t.Run(mode, func(t *testing.T) {
			ns := netns.NewRun(t, "bfv").NS("gw")
			ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
			gen := func() (uint32, error) {
				var g uint32
				err := netns.Do(ns.Name, func() (err error) { g, err = KernelGeneration(); return err })
				return g, err
			}
			f := &Firewall{NFT: writeWrapper(t, ns.Name)}
			if mode == "generation" {
				f.Generation = gen
			}
			testVerify(t, ns, f, gen)
		})
	}
}

func testVerify(t *testing.T, ns *netns.NS, f *Firewall, gen func() (uint32, error)) {
	ctx := context.Background()
	if d, err := f.Verify(ctx); err != nil || d.Drifted() {
		t.Fatalf("Verify before any apply: %+v %v", d, err)
	}
	if err := f.Apply(ctx, driftRuleset); err != nil {
		t.Fatal(err)
	}
	applied := ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")
	p := &peerPings{t: t, ns: ns, f: f}
	ping, counted := p.ping, p.counted
	generation := func() uint32 {
		t.Helper()
		g, err := gen()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}

	// Unchanged: nothing found, nothing re-applied (the namespace's generation stays).
	ping(2)
	g := generation()
	for range 3 {
		if d, err := f.Verify(ctx); err != nil || d.Drifted() {
			t.Fatalf("unchanged table: %+v %v", d, err)
		}
	}
	if after := generation(); after != g {
		t.Fatalf("Verify of an unchanged table ran %d transactions", after-g)
	}
	// Another table changing moves the generation but is none of the gateway's business.
	ns.MustRun("nft", "add", "table", "ip", "someone_else")
	if d, err := f.Verify(ctx); err != nil || d.Drifted() {
		t.Fatalf("another table added: %+v %v", d, err)
	}

	cases := []struct {
		name     string
		sabotage []string // one nft command, run inside the namespace
		kind     string
		detail   string // part of the Drift's detail
		counts   bool   // the counters could be read before the repair
		// repaired: into the table in force (pathReload, its counters kept), or by replacing
		// it (pathFull: the table was gone, or Reload would keep what it does not declare)
		repaired applyPath
	}{
		{"table deleted", []string{"delete", "table", "ip", "bnerd_vpn"}, agent.DriftMissing, "not found", false, pathFull},
		{"ruleset flushed", []string{"flush", "ruleset"}, agent.DriftMissing, "not found", false, pathFull},
		{"accept-all inserted", []string{"insert", "rule", "ip", "bnerd_vpn", "forward", "accept"}, agent.DriftChanged,
			`chain forward: "accept" found where "ct state established,related accept" was applied`, true, pathReload},
		{"rule replaced", nil, agent.DriftChanged, `chain forward: "ip saddr 203.0.113.0/24 accept" found where "counter name ip saddr map @peer_in drop"`, true, pathReload},
		{"grant element added", []string{"add", "element", "ip", "bnerd_vpn", "fwd_grants", "{ 203.0.113.16/28 . 100.64.7.10 . tcp . 443 }"},
			agent.DriftChanged, `set fwd_grants: "203.0.113.16/28 . 100.64.7.10 . tcp . 443"`, true, pathReload},
		{"DNAT element changed", nil, agent.DriftChanged, `map fwd_dnat: "100.64.7.12 . tcp . 22 : 192.0.2.99 . 22"`, true, pathReload},
		{"policy changed", []string{"add", "chain", "ip", "bnerd_vpn", "forward", "{ type filter hook forward priority filter; policy accept; }"},
			agent.DriftChanged, `policy accept;" found where`, true, pathReload},
		{"chain flushed", []string{"flush", "chain", "ip", "bnerd_vpn", "input"}, agent.DriftChanged, `chain input: "}" found where "icmp type`, true, pathReload},
		{"foreign chain added", []string{"add", "chain", "ip", "bnerd_vpn", "early", "{ type filter hook forward priority -200; policy accept; }"},
			agent.DriftChanged, `"chain early {" found where "chain forward {" was applied`, true, pathFull},
		{"set of the ruleset deleted", nil, agent.DriftChanged, `"map peer_in {" found where "set fwd_grants {" was applied`, true, pathFull},
	}
	for i, c := range cases {
		total := counted()
		if total != uint64(p.sent) {
			t.Fatalf("%s: counted %d pings of %d before the sabotage", c.name, total, p.sent)
		}
		switch c.name {
		case "rule replaced":
			handle := ruleHandle(t, ns, "forward", "counter name ip saddr map @peer_in drop")
			ns.MustRun("nft", "replace", "rule", "ip", "bnerd_vpn", "forward", "handle", handle, "ip", "saddr", "203.0.113.0/24", "accept")
		case "DNAT element changed":
			ns.MustRun("nft", "delete", "element", "ip", "bnerd_vpn", "fwd_dnat", "{ 100.64.7.12 . tcp . 22 }")
			ns.MustRun("nft", "add", "element", "ip", "bnerd_vpn", "fwd_dnat", "{ 100.64.7.12 . tcp . 22 : 192.0.2.99 . 22 }")
		case "set of the ruleset deleted": // the load into the table, flushing it, is refused
			ns.MustRun("nft", "flush", "chain", "ip", "bnerd_vpn", "prerouting")
			ns.MustRun("nft", "delete", "set", "ip", "bnerd_vpn", "fwd_grants")
		default:
			ns.MustRun(append([]string{"nft"}, c.sabotage...)...)
		}
		carried := f.carried["peer_a_in"].Packets
		f.repaired = pathNone
		d, err := f.Verify(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d.Kind != c.kind || !strings.Contains(d.Detail, c.detail) {
			t.Errorf("%s: found %+v, want %s with %q", c.name, d, c.kind, c.detail)
		}
		if f.repaired != c.repaired {
			t.Errorf("%s: repaired by path %d, want %d", c.name, f.repaired, c.repaired)
		}
		if c.repaired == pathReload && f.carried["peer_a_in"].Packets != carried {
			t.Errorf("%s: a repair in the table carried counts over: the counter was re-created", c.name)
		}
		if got := ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"); CanonicalListing(got) != CanonicalListing(applied) {
			t.Fatalf("%s: after the repair the table lists\n%s\nwant\n%s", c.name, got, applied)
		}
		if d, err := f.Verify(ctx); err != nil || d.Drifted() {
			t.Fatalf("%s: Verify after the repair: %+v %v", c.name, d, err)
		}
		// Another table changing makes the next check list the repaired table: it matches the
		// reference listing.
		ns.MustRun("nft", "add", "table", "ip", "someone_else_"+strconv.Itoa(i))
		if d, err := f.Verify(ctx); err != nil || d.Drifted() {
			t.Fatalf("%s: Verify after another table changed: %+v %v", c.name, d, err)
		}
		// The repaired table counts again; what the drifted one had counted is kept where it
		// could be read.
		ping(1)
		want := uint64(p.sent)
		if !c.counts {
			want = uint64(p.sent) - total // the deleted table's counts are gone
			p.sent = int(want)
		}
		if got := counted(); got != want {
			t.Errorf("%s: counter %d after the repair, want %d", c.name, got, want)
		}
	}
	// A table taken away by Remove is not the gateway's any more: no repair.
	if err := f.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := f.Verify(ctx); err != nil || d.Drifted() {
		t.Fatalf("Verify after Remove: %+v %v", d, err)
	}
	if out, err := ns.Run("nft", "list", "table", "ip", "bnerd_vpn"); err == nil {
		t.Fatalf("the removed table came back:\n%s", out)
	}
}

// ruleHandle is the handle of the chain's rule that lists as rule.
func ruleHandle(t *testing.T, ns *netns.NS, chain, rule string) string {
	t.Helper()
	for _, line := range strings.Split(ns.MustRun("nft", "-a", "-s", "list", "chain", "ip", "bnerd_vpn", chain), "\n") {
		if r, h, ok := strings.Cut(strings.TrimSpace(line), " # handle "); ok && r == rule {
			return h
		}
	}
	t.Fatalf("no rule %q in chain %s", rule, chain)
	return ""
}

// peerPings pings 192.0.2.1 in the gateway's namespace (a source the driftRuleset counts as
// peer a's) and reads peer a's drop counter through the firewall.
type peerPings struct {
	t    *testing.T
	ns   *netns.NS
	f    *Firewall
	sent int
}

func (p *peerPings) ping(n int) {
	p.t.Helper()
	p.ns.MustRun("ping", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", "192.0.2.1")
	p.sent += n
}

func (p *peerPings) counted() uint64 {
	p.t.Helper()
	c, err := p.f.Counters(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	return c["peer_a_in"].Packets
}

// A ruleset of another structure is loaded into the table in force (nft.Reload), in one
// transaction: a chain whose policy changed, a set whose type changed, a counter and its map
// elements gone, a set and a chain added — and the table lists as one loaded afresh, while
// the chain kept stays on its hook and the counter kept goes on counting in the kernel (nothing
// is carried). Back again the same way; and a table changed behind the agent's back so that
// the load into it is refused is replaced instead.
func TestReloadKeepsTable(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	run := netns.NewRun(t, "bfl")
	ns, ref := run.NS("gw"), run.NS("ref")
	ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
	f := &Firewall{NFT: writeWrapper(t, ns.Name)}
	ctx := context.Background()
	p := &peerPings{t: t, ns: ns, f: f}

	restructured := strings.NewReplacer(
		"policy drop;", "policy accept;",
		"\tcounter peer_b_in {}\n", "",
		`, 203.0.113.16/28 : "peer_b_in", 198.51.100.0/25 : "peer_b_in"`, "",
		"\t\tflags interval\n\t\telements = { 203.0.113.0/28 . 100.64.7.10 . tcp . 443, 198.51.100.0/25 . 100.64.7.11 . tcp . 5432 }",
		"\t\telements = { 203.0.113.0 . 100.64.7.10 . tcp . 443 }",
		"\tchain input {\n", "\tset blocked {\n\t\ttype ipv4_addr\n\t\telements = { 192.0.2.99 }\n\t}\n\tchain blocked {\n\t\tip saddr @blocked drop\n\t}\n\tchain input {\n",
		"policy accept;\n\t\ticmp", "policy accept;\n\t\tjump blocked\n\t\ticmp",
	).Replace(driftRuleset)
	if restructured == driftRuleset || strings.Count(restructured, "blocked") != 4 {
		t.Fatalf("the edit did not apply:\n%s", restructured)
	}
	for i, step := range []struct {
		name, text string
		path       applyPath
	}{
		{"first load", driftRuleset, pathFull},
		{"restructured", restructured, pathReload},
		{"back", driftRuleset, pathReload},
	} {
		if err := f.Apply(ctx, step.text); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if f.last != step.path {
			t.Errorf("%s: applied by path %d, want %d", step.name, f.last, step.path)
		}
		loadWhole(t, ref, step.text)
		if diff := listingDiff(normalizeListing(ref.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")),
			normalizeListing(ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"))); diff != "" {
			t.Fatalf("%s: the table differs from one loaded afresh: %s", step.name, diff)
		}
		if d, err := f.Verify(ctx); err != nil || d.Drifted() {
			t.Fatalf("%s: Verify: %+v %v", step.name, d, err)
		}
		p.ping(i + 1)
		if got := p.counted(); got != uint64(p.sent) {
			t.Fatalf("%s: counter %d, want %d", step.name, got, p.sent)
		}
		if c := f.carried["peer_a_in"]; c.Packets != 0 {
			t.Fatalf("%s: %d packets carried over: the counter was re-created", step.name, c.Packets)
		}
	}

	// The set the load into the table would flush is gone: the kernel refuses that script,
	// and the table is replaced instead (its counts carried over).
	ns.MustRun("nft", "flush", "chain", "ip", "bnerd_vpn", "prerouting")
	ns.MustRun("nft", "delete", "set", "ip", "bnerd_vpn", "fwd_grants")
	if err := f.Apply(ctx, restructured); err != nil {
		t.Fatal(err)
	}
	if f.last != pathFull {
		t.Errorf("a refused load into the table was not followed by a replace (path %d)", f.last)
	}
	loadWhole(t, ref, restructured)
	if diff := listingDiff(normalizeListing(ref.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn")),
		normalizeListing(ns.MustRun("nft", "-s", "list", "table", "ip", "bnerd_vpn"))); diff != "" {
		t.Fatalf("after the replace: %s", diff)
	}
	p.ping(1)
	if got := p.counted(); got != uint64(p.sent) {
		t.Fatalf("counter after the replace: %d, want %d", got, p.sent)
	}
}
