package wireguard

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestPlanRoutes(t *testing.T) {
	const dev, other = 7, 3
	p := netip.MustParsePrefix
	ps := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, p(s))
		}
		return out
	}
	mine := func(dst string) route {
		return route{Dst: p(dst), LinkIndex: dev, Protocol: RouteProtocol, Desc: "dev wgx proto 98"}
	}
	node := func(dst, desc string) route { return route{Dst: p(dst), LinkIndex: other, Protocol: 4, Desc: desc} }
	for _, tc := range []struct {
		name      string
		wanted    []netip.Prefix
		existing  []route
		add       []netip.Prefix
		remove    []netip.Prefix
		conflicts map[netip.Prefix]string
	}{
		{name: "nothing there: add all", wanted: ps("203.0.113.0/28", "203.0.113.16/28"),
			add: ps("203.0.113.0/28", "203.0.113.16/28")},
		{name: "ours already there: nothing to do", wanted: ps("203.0.113.0/28"),
			existing: []route{mine("203.0.113.0/28")}},
		{name: "ours no longer wanted: removed", wanted: ps("203.0.113.16/28"),
			existing: []route{mine("203.0.113.0/28")}, add: ps("203.0.113.16/28"), remove: ps("203.0.113.0/28")},
		{name: "the node's route for exactly that prefix: left alone, a conflict",
			wanted:    ps("10.244.0.0/16", "203.0.113.0/28"),
			existing:  []route{node("10.244.0.0/16", "dev cni0 proto kernel")},
			add:       ps("203.0.113.0/28"),
			conflicts: map[netip.Prefix]string{p("10.244.0.0/16"): "dev cni0 proto kernel"}},
		{name: "the node's route and ours for the same prefix: ours gives way, a conflict",
			wanted:    ps("203.0.113.0/28"),
			existing:  []route{node("203.0.113.0/28", "dev eth1 proto static"), mine("203.0.113.0/28")},
			remove:    ps("203.0.113.0/28"),
			conflicts: map[netip.Prefix]string{p("203.0.113.0/28"): "dev eth1 proto static"}},
		{name: "our protocol through another device is not ours",
			wanted:    ps("203.0.113.0/28"),
			existing:  []route{{Dst: p("203.0.113.0/28"), LinkIndex: other, Protocol: RouteProtocol, Desc: "dev wg0 proto 98"}},
			conflicts: map[netip.Prefix]string{p("203.0.113.0/28"): "dev wg0 proto 98"}},
		{name: "overlapping but not equal prefixes are no conflict (longest match)",
			wanted:   ps("203.0.113.16/28", "10.0.0.0/8"),
			existing: []route{node("203.0.113.0/24", "dev eth1"), node("10.244.1.0/24", "dev cni0"), node("0.0.0.0/0", "dev eth0 via 192.0.2.1")},
			add:      ps("10.0.0.0/8", "203.0.113.16/28")},
		{name: "unmasked wanted prefixes compare masked", wanted: ps("203.0.113.5/28"),
			existing: []route{mine("203.0.113.0/28")}},
		{name: "the node's routes are never removed", wanted: nil,
			existing: []route{node("203.0.113.0/28", "dev eth1"), mine("198.51.100.0/24")}, remove: ps("198.51.100.0/24")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planRoutes(tc.wanted, tc.existing, dev)
			if !slices.Equal(got.Add, tc.add) {
				t.Errorf("add %v, want %v", got.Add, tc.add)
			}
			var removed []netip.Prefix
			for _, r := range got.Remove {
				if !r.ours(dev) {
					t.Errorf("removes a route that is not ours: %+v", r)
				}
				removed = append(removed, r.Dst)
			}
			if !slices.Equal(removed, tc.remove) {
				t.Errorf("remove %v, want %v", removed, tc.remove)
			}
			if len(got.Conflicts) != len(tc.conflicts) {
				t.Errorf("conflicts %v, want %v", got.Conflicts, tc.conflicts)
			}
			for k, v := range tc.conflicts {
				if got.Conflicts[k] != v {
					t.Errorf("conflict %s: %q, want %q", k, got.Conflicts[k], v)
				}
			}
		})
	}
}

func TestConflictNote(t *testing.T) {
	p := netip.MustParsePrefix
	c := map[netip.Prefix]string{p("203.0.113.0/28"): "dev eth1 proto static"}
	if got := conflictNote(c, []netip.Prefix{p("203.0.113.16/28")}); got != "" {
		t.Errorf("a peer without conflicts gets %q", got)
	}
	got := conflictNote(c, []netip.Prefix{p("203.0.113.16/28"), p("203.0.113.1/28")})
	if !strings.Contains(got, "203.0.113.0/28 (dev eth1 proto static)") || strings.Contains(got, "203.0.113.16") {
		t.Errorf("note %q", got)
	}
}

func TestAdoptable(t *testing.T) {
	const owner = "tenant-a/edge"
	for _, tc := range []struct {
		name, linkType, alias string
		mode                  Mode
		want                  string // "" adopt, else part of the error
	}{
		{"our own kernel device", "wireguard", AliasPrefix + owner, ModeAuto, ""},
		{"our own, kernel mode", "wireguard", AliasPrefix + owner, ModeKernel, ""},
		{"someone else's WireGuard device", "wireguard", "", ModeAuto, "refusing to adopt"},
		{"another gateway's device", "wireguard", AliasPrefix + "tenant-b/edge", ModeAuto, "refusing to adopt"},
		{"a look-alike alias", "wireguard", AliasPrefix + owner + " ", ModeAuto, "refusing to adopt"},
		{"not WireGuard", "dummy", AliasPrefix + owner, ModeAuto, "not a WireGuard device"},
		{"a TUN", "tun", "", ModeAuto, "not a WireGuard device"},
		{"ours, but userspace wanted", "wireguard", AliasPrefix + owner, ModeUserspace, "userspace mode"},
	} {
		err := adoptable("wgedge-abcdef", tc.linkType, tc.alias, owner, tc.mode)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}
