package firewall

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// dropsRuleset counts, as the rendered drop rules do, every ping to 192.0.2.1 (from itself) in
// the element of drops_in_32 that the kernel makes at the first one; class is the value of
// its peer_32 element (a grant class, a mark in the kernel's byte order).
func dropsRuleset(class, extra string) string {
	return `table ip bnerd_vpn {}
delete table ip bnerd_vpn
table ip bnerd_vpn {
	counter drop_other {}
	map peer_32 {
		type ipv4_addr : mark
		elements = { 192.0.2.1 : ` + class + ` }
	}
	set drops_in_32 {
		type ipv4_addr
		flags dynamic
		counter
	}
	set spare {
		type ipv4_addr
	}
` + extra + `	chain input {
		type filter hook input priority filter; policy accept;
		icmp type echo-request meta mark set ip saddr map @peer_32 update @drops_in_32 { ip saddr }
	}
}
`
}

// A drops set's elements, made by the kernel, count across every way a ruleset is applied: a
// delta (a grant class changed: a mark element), a load into the table (their set is not
// flushed) and Verify (they are no drift); across a load that leaves their set out and a
// replace of the table their counts are carried over; and ForgetDrops deletes one and returns
// what it counted.
func TestDropsElements(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	ns := netns.NewRun(t, "bfd").NS("gw")
	ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
	f := &Firewall{NFT: writeWrapper(t, ns.Name), NetNS: "/run/netns/" + ns.Name}
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	name := nft.DropName("drops_in_32", netip.MustParseAddr("192.0.2.1"))
	sent := 0
	ping := func(n int) {
		t.Helper()
		ns.MustRun("ping", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", "192.0.2.1")
		sent += n
	}
	expect := func(step string) {
		t.Helper()
		c, err := f.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := c[name].Packets; got != uint64(sent) {
			t.Fatalf("%s: %s counted %d, want %d (%v)", step, name, got, sent, c)
		}
		if d, err := f.Verify(ctx); err != nil || d.Drifted() {
			t.Fatalf("%s: Verify found %+v, %v", step, d, err)
		}
	}

	for _, step := range []struct {
		name, text string
		path       applyPath
	}{
		{"first load", dropsRuleset("0x00000001", ""), pathFull},
		{"class changed", dropsRuleset("0x62770002", ""), pathDelta},
		{"restructured", dropsRuleset("0x62770002", "\tchain extra {\n\t}\n"), pathReload},
	} {
		if err := f.Apply(ctx, step.text); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if f.last != step.path {
			t.Errorf("%s: applied by path %d, want %d", step.name, f.last, step.path)
		}
		ping(2)
		expect(step.name)
		if c := f.carried[name]; c.Packets != 0 {
			t.Fatalf("%s: %d packets carried: the element was lost", step.name, c.Packets)
		}
	}
	if got := ns.MustRun("nft", "list", "map", "ip", "bnerd_vpn", "peer_32"); !strings.Contains(got, "192.0.2.1 : 0x62770002") {
		t.Fatalf("the class element was not changed by the delta:\n%s", got)
	}

	// A load into the table that leaves the drops set out (the last subnet of its length
	// gone): what its elements counted is carried over.
	without := strings.NewReplacer("\tset drops_in_32 {\n\t\ttype ipv4_addr\n\t\tflags dynamic\n\t\tcounter\n\t}\n", "",
		" update @drops_in_32 { ip saddr }", "").Replace(dropsRuleset("0x62770002", ""))
	if strings.Contains(without, "drops_in_32") {
		t.Fatalf("the edit did not apply:\n%s", without)
	}
	if err := f.Apply(ctx, without); err != nil {
		t.Fatal(err)
	}
	if f.last != pathReload {
		t.Errorf("the drops set left out: applied by path %d, want %d", f.last, pathReload)
	}
	expect("drops set gone")

	// A load into the table refused (a set it would flush is gone): the table is replaced,
	// the element's count carried until the kernel makes it again.
	ns.MustRun("nft", "delete", "set", "ip", "bnerd_vpn", "spare")
	if err := f.Apply(ctx, dropsRuleset("0x62770002", "")); err != nil {
		t.Fatal(err)
	}
	if f.last != pathFull {
		t.Fatalf("applied by path %d, want a replace", f.last)
	}
	expect("replaced, no drop since")
	ping(1)
	expect("replaced, a drop since")

	counted, err := f.ForgetDrops(ctx, []string{name, nft.DropName("drops_in_32", netip.MustParseAddr("192.0.2.99"))})
	if err != nil {
		t.Fatal(err)
	}
	if counted[name].Packets != uint64(sent) || len(counted) != 1 {
		t.Fatalf("ForgetDrops counted %v, want %d packets for %s only", counted, sent, name)
	}
	if c, _ := f.Counters(ctx); c[name].Packets != 0 {
		t.Fatalf("a forgotten element still counts %d", c[name].Packets)
	}
	if got := ns.MustRun("nft", "list", "set", "ip", "bnerd_vpn", "drops_in_32"); strings.Contains(got, "192.0.2.1") {
		t.Fatalf("the element is still in the kernel:\n%s", got)
	}
	sent = 0
	ping(1)
	expect("counting afresh")

	// More elements than one transaction deletes (a gateway's peers all gone at once).
	var elems, many []string
	for i := range 2*maxDeltaChanges + 10 {
		a := netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)})
		elems = append(elems, a.String())
		many = append(many, nft.DropName("drops_in_32", a))
	}
	ns.MustRun("nft", "add", "element", "ip", "bnerd_vpn", "drops_in_32", "{ "+strings.Join(elems, ", ")+" }")
	if _, err := f.ForgetDrops(ctx, many); err != nil {
		t.Fatal(err)
	}
	if got := ns.MustRun("nft", "list", "set", "ip", "bnerd_vpn", "drops_in_32"); strings.Contains(got, "100.64.") {
		t.Fatalf("elements left after ForgetDrops of %d:\n%.300s", len(many), got)
	}
}
