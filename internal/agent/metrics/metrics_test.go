package metrics

import (
	"context"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/firewall"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// The ruleset repairs counter is per gateway, present from zero (so rate() sees the first
// repair), and left out when no engine counts repairs.
func TestRulesetRepairs(t *testing.T) {
	var repairs uint64
	c := &Collector{Namespace: "acme", Gateway: "gw", Snapshot: func() agent.Snapshot { return agent.Snapshot{} },
		Repairs: func() uint64 { return repairs }}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for _, n := range []uint64{0, 3} {
		repairs = n
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(fams) != 1 || fams[0].GetName() != "bnerd_vpn_ruleset_repairs_total" || len(fams[0].Metric) != 1 {
			t.Fatalf("gathered %v", fams)
		}
		m := fams[0].Metric[0]
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetCounter().GetValue() != float64(n) || len(labels) != 2 || labels["namespace"] != "acme" || labels["gateway"] != "gw" {
			t.Errorf("after %d repairs: %v", n, m)
		}
	}
	c.Repairs = nil
	if fams, err := reg.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("without a repair count: %v %v", fams, err)
	}
}

// The agent's registry exports bnerd_vpn_build_info{version,goversion} = 1 beside the peers'
// metrics and the Go runtime's.
func TestRegistryBuildInfo(t *testing.T) {
	reg := NewRegistry(&Collector{Namespace: "acme", Gateway: "gw", Snapshot: func() agent.Snapshot { return agent.Snapshot{} }})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buildInfo, goRuntime bool
	for _, f := range fams {
		switch f.GetName() {
		case "go_goroutines":
			goRuntime = true
		case version.BuildInfoName:
			buildInfo = true
			if len(f.Metric) != 1 {
				t.Fatalf("%d build info series", len(f.Metric))
			}
			m := f.Metric[0]
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if m.GetGauge().GetValue() != 1 || len(labels) != 2 || labels["version"] != version.Get() || labels["goversion"] != runtime.Version() {
				t.Errorf("build info %v", m)
			}
		}
	}
	if !buildInfo || !goRuntime {
		t.Errorf("build info exported: %v, Go runtime's metrics: %v", buildInfo, goRuntime)
	}
}

// stubDriver has no tunnels: the metric under test comes from the ruleset alone.
type stubDriver struct{}

func (stubDriver) Apply(context.Context, *render.Bundle, agent.Secrets) error { return nil }
func (stubDriver) Peers(context.Context) (map[string]agent.PeerState, error)  { return nil, nil }
func (stubDriver) Changes() <-chan struct{}                                   { return nil }
func (stubDriver) Close() error                                               { return nil }

// nsFirewall is the real firewall of a test namespace. Cutting connections goes to the
// conntrack table of the process's own namespace (the agent's is its pod's), which is not the
// test's: it is left out here (it has its own tests in package firewall).
type nsFirewall struct{ *firewall.Firewall }

func (nsFirewall) CutRevokedFlows(context.Context, *model.Gateway) (int, error) { return 0, nil }

// gathered is the value of the gateway-wide counter name, and whether it was exported.
func gathered(t *testing.T, reg prometheus.Gatherer, name string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		if len(f.Metric) != 1 {
			t.Fatalf("%s: %d series, want one per gateway", name, len(f.Metric))
		}
		m := f.Metric[0]
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if len(labels) != 2 || labels["namespace"] != "acme" || labels["gateway"] != "gw" {
			t.Errorf("%s labels %v, want namespace and gateway only", name, labels)
		}
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

// bnerd_vpn_spoofed_drops_total (and its bytes) is the kernel-ESP ruleset's drop_spoofed
// counter, read from real nftables in a namespace through the agent's firewall and engine:
// exported from zero once the ruleset is applied (so rate() sees the first drop), then what
// the counter counted; a ruleset without the check (userspace ESP) exports no series. The
// rendered rule counts packets an XFRM SA delivered, which this kernel cannot (no esp4; the VM
// suite's TestGuestKernelIPsecGateway sends real spoofed ESP): here a probe rule of the test
// counts pings into the same named counter object.
func TestSpoofedDropsFromTheRuleset(t *testing.T) {
	netns.Skip(t, "nft", "ping")
	ns := netns.NewRun(t, "bms").NS("gw")
	ns.MustRun("ip", "addr", "add", "192.0.2.1/32", "dev", "lo")
	g := &model.Gateway{Namespace: "acme", Name: "gw", Protocol: model.ProtocolIPsec, Mode: model.ModeSNAT,
		ServiceCIDR: netip.MustParsePrefix("100.64.7.0/24"), LocalAddress: netip.MustParseAddr("100.64.7.1"),
		IPsec: &model.IPsecGateway{IKEVersion: 2},
		Peers: []model.Peer{{Name: "hq", Authorization: model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow},
			IPsec:       &model.IPsecPeer{RemoteAddress: "198.51.100.77", RemoteID: "198.51.100.77", Reqid: model.PeerReqid("acme", "gw", "hq")},
			SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}}}}
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		userspace bool
	}{{"kernel-esp", false}, {"userspace-esp", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ruleset, err := nft.Render(g, nft.DefaultOptions(g, tc.userspace))
			if err != nil {
				t.Fatal(err)
			}
			e := &agent.Engine{Driver: stubDriver{}, Firewall: nsFirewall{&firewall.Firewall{NFT: ns.Wrapper(t, "nft")}},
				Log: logr.Discard(), SkipLocalAddress: true}
			if err := e.Apply(ctx, agent.Update{Bundle: &render.Bundle{Model: g, Ruleset: ruleset}}); err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(&Collector{Namespace: "acme", Gateway: "gw", Snapshot: e.Last})
			refresh := func() {
				t.Helper()
				if _, err := e.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
			}
			refresh()
			v, ok := gathered(t, reg, "bnerd_vpn_spoofed_drops_total")
			if tc.userspace {
				if ok || strings.Contains(ruleset, nft.CounterSpoofed) {
					t.Fatalf("userspace ESP: exported %v (the ruleset has no %s)", v, nft.CounterSpoofed)
				}
				return
			}
			if !ok || v != 0 {
				t.Fatalf("after the apply: exported %v, %v; want 0", v, ok)
			}
			ns.MustRun("nft", "add", "chain", "ip", nft.Table, "probe", "{ type filter hook input priority 10; }")
			ns.MustRun("nft", "add", "rule", "ip", nft.Table, "probe", "icmp", "type", "echo-request", "counter", "name", nft.CounterSpoofed)
			ns.MustRun("ping", "-c", "3", "-i", "0.01", "-W", "1", "192.0.2.1")
			refresh()
			packets, _ := gathered(t, reg, "bnerd_vpn_spoofed_drops_total")
			bytes, _ := gathered(t, reg, "bnerd_vpn_spoofed_dropped_bytes_total")
			if packets != 3 || bytes != 3*84 {
				t.Errorf("after 3 pings counted in %s: %v packets, %v bytes exported; want 3 and 252", nft.CounterSpoofed, packets, bytes)
			}
			t.Logf("%s after 3 probe pings: bnerd_vpn_spoofed_drops_total %v, bnerd_vpn_spoofed_dropped_bytes_total %v", nft.CounterSpoofed, packets, bytes)
			ns.MustRun("nft", "delete", "chain", "ip", nft.Table, "probe") // a chain of the test, not the ruleset's
		})
	}
}

// An active/standby gateway's pod shows its role, whether its standby is ready and its
// takeovers by reason; a gateway without a standby shows none of them.
func TestAvailability(t *testing.T) {
	a := Availability{Active: true, StandbyReady: true, Takeovers: map[string]uint64{"Initial": 1, "ActiveGone": 2}}
	c := &Collector{Namespace: "acme", Gateway: "gw", Snapshot: func() agent.Snapshot { return agent.Snapshot{} },
		Availability: func() Availability { return a }}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			key := f.GetName()
			for _, l := range m.Label {
				if l.GetName() == "reason" {
					key += "{" + l.GetValue() + "}"
				}
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"bnerd_vpn_gateway_active": 1, "bnerd_vpn_gateway_standby_ready": 1,
		"bnerd_vpn_gateway_takeovers_total{Initial}": 1, "bnerd_vpn_gateway_takeovers_total{ActiveGone}": 2}
	if len(got) != len(want) {
		t.Fatalf("gathered %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	c.Availability = nil
	if fams, err := reg.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("without a standby: %v %v", fams, err)
	}
}
