package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// In a real namespace: a route to each ready ClusterLink range whose next hop is on an attached
// network is installed (protocol LinkRouteProtocol), one whose next hop is not is left to the
// default route, a route no link asks for any more is removed, other routes are never touched,
// and a host-network gateway adds and removes nothing.
func TestLinkRoutes(t *testing.T) {
	netns.Skip(t, "ip")
	ns := netns.NewRun(t, "bvrt").NS("rt")
	ns.MustRun("ip", "link", "set", "lo", "up")
	// the transit fabric: a veth pair, both ends here (198.51.100.200/30)
	ns.MustRun("ip", "link", "add", "fab0", "type", "veth", "peer", "name", "fab1")
	ns.MustRun("ip", "addr", "add", "198.51.100.201/30", "dev", "fab0")
	ns.MustRun("ip", "link", "set", "fab0", "up")
	ns.MustRun("ip", "link", "set", "fab1", "up")
	ns.MustRun("ip", "route", "add", "203.0.113.0/28", "via", "198.51.100.202") // the admin's, not ours
	h := ns.Netlink()
	routes := func() []string {
		out, err := ns.Run("ip", "-4", "route", "show")
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// the veth's carrier may come up after the test starts: a route's "linkdown" flag
			// says nothing about which routes exist
			lines = append(lines, strings.Join(slices.DeleteFunc(strings.Fields(l), func(f string) bool { return f == "linkdown" }), " "))
		}
		slices.Sort(lines)
		return lines
	}
	gw := func(kind model.EndpointKind, rs ...model.Route) *model.Gateway {
		return &model.Gateway{Endpoint: model.Endpoint{Kind: kind}, Routes: rs}
	}
	svc := model.Route{CIDR: netip.MustParsePrefix("203.0.113.224/27"), Via: netip.MustParseAddr("198.51.100.202"), Link: "svc"}
	far := model.Route{CIDR: netip.MustParsePrefix("10.50.0.0/16"), Via: netip.MustParseAddr("192.0.2.77"), Link: "far"}
	base := []string{
		"198.51.100.200/30 dev fab0 proto kernel scope link src 198.51.100.201",
		"203.0.113.0/28 via 198.51.100.202 dev fab0",
	}
	for i, step := range []struct {
		gw      *model.Gateway
		want    []string
		skipped int
	}{
		{gw(model.EndpointFloatingIPPool, svc, far), append(slices.Clone(base), "203.0.113.224/27 via 198.51.100.202 dev fab0 proto 191"), 1},
		{gw(model.EndpointFloatingIPPool, svc), append(slices.Clone(base), "203.0.113.224/27 via 198.51.100.202 dev fab0 proto 191"), 0},
		{gw(model.EndpointFloatingIPPool), base, 0},
		{gw(model.EndpointHostNetwork, svc), base, 0},
	} {
		skipped, err := ensureLinkRoutes(h, step.gw)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := slices.Clone(step.want)
		slices.Sort(want)
		if got := routes(); !slices.Equal(got, want) {
			t.Errorf("step %d: routes\n got %q\nwant %q", i, got, want)
		}
		if len(skipped) != step.skipped {
			t.Errorf("step %d: skipped %q", i, skipped)
		}
	}
}
