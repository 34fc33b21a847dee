package metrics

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
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
