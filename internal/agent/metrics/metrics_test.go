package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
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
