package gateways

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gatewaypod"
)

func TestParseMetrics(t *testing.T) {
	text := `# HELP bnerd_vpn_peer_up 1 when the peer's tunnel is established.
# TYPE bnerd_vpn_peer_up gauge
bnerd_vpn_peer_up{gateway="gw",namespace="acme",peer="hq"} 1
bnerd_vpn_peer_up{gateway="gw",namespace="acme",peer="branch"} 0
bnerd_vpn_peer_rekeys_total{gateway="gw",namespace="acme",peer="hq"} 3
bnerd_vpn_peer_authorization_drops_total{direction="in",gateway="gw",namespace="acme",peer="hq"} 12
bnerd_vpn_peer_authorization_drops_total{direction="out",gateway="gw",namespace="acme",peer="hq"} 1
bnerd_vpn_peer_authorization_drops_total{direction="in",gateway="other",namespace="acme",peer="hq"} 99
bnerd_vpn_peer_last_handshake_timestamp_seconds{gateway="gw",namespace="acme",peer="hq"} 1.7357328e+09
bnerd_vpn_ruleset_repairs_total{gateway="gw",namespace="acme"} 2
bnerd_vpn_config_rejected_total{gateway="gw",namespace="acme"} 0
weird_label{a="x\"y\\z\n",b="{}"} +Inf 1700000000
go_goroutines 42
`
	samples, err := parseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	weird := slices.IndexFunc(samples, func(s sample) bool { return s.name == "weird_label" })
	if len(samples) != 11 || weird < 0 || samples[weird].labels["a"] != "x\"y\\z\n" || samples[weird].labels["b"] != "{}" || !math.IsInf(samples[weird].value, 1) {
		t.Fatalf("samples %v", samples)
	}
	m := agentView(samples, "acme", "gw")
	hq := m.Peers["hq"]
	if hq == nil || !hq.Up || hq.Rekeys != 3 || hq.DropsIn != 12 || hq.DropsOut != 1 || hq.LastHandshake != 1.7357328e+09 {
		t.Errorf("hq %+v", hq)
	}
	if m.Peers["branch"] == nil || m.Peers["branch"].Up || *m.RulesetRepairs != 2 || *m.ConfigRejected != 0 {
		t.Errorf("view %+v", m)
	}
	for _, bad := range []string{"x{a=\"1\" 1", "x 1 2 3", "x{a=1} 1", "x abc"} {
		if _, err := parseMetrics([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The metric names status and diagnose read are still the agent's: each one is a string
// literal in internal/agent or cmd/gateway-agent.
func TestMetricNamesExist(t *testing.T) {
	src := gatewaypod.AgentSource(t, repoRoot)
	for _, m := range []string{metricPeerUp, metricPeerRekeys, metricPeerDrops, metricPeerHandshake, metricRulesetRepairs, metricConfigRejected, metricSpoofedDrops} {
		if !strings.Contains(src, `"`+m+`"`) {
			t.Errorf("the agent no longer exports %s", m)
		}
	}
}

// repoRoot is the repository's top directory, from the package's directory (where go test
// runs its tests).
var repoRoot = filepath.Join("..", "..", "..")
