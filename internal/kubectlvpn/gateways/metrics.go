package gateways

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// sample is one value of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text format (what the agent's /metrics serves) with
// Prometheus' own parser. Counters, gauges and untyped values become one sample each, a
// histogram or summary its _sum and _count; families in name order. Text it cannot read is an
// error (the agent's output is never malformed; something else answered).
func parseMetrics(text []byte) ([]sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out []sample
	for _, name := range slices.Sorted(maps.Keys(families)) {
		for _, m := range families[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(name string, v float64) { out = append(out, sample{name: name, labels: labels, value: v}) }
			switch {
			case m.Counter != nil:
				add(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				add(name, m.GetGauge().GetValue())
			case m.Untyped != nil:
				add(name, m.GetUntyped().GetValue())
			case m.Histogram != nil:
				add(name+"_sum", m.GetHistogram().GetSampleSum())
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
			case m.Summary != nil:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			}
		}
	}
	return out, nil
}

// The agent's metrics diagnose and status read (docs/operations.md, "Metrics and the dashboard").
const (
	metricPeerUp         = "bnerd_vpn_peer_up"
	metricPeerRekeys     = "bnerd_vpn_peer_rekeys_total"
	metricPeerDrops      = "bnerd_vpn_peer_authorization_drops_total"
	metricPeerHandshake  = "bnerd_vpn_peer_last_handshake_timestamp_seconds"
	metricRulesetRepairs = "bnerd_vpn_ruleset_repairs_total"
	metricConfigRejected = "bnerd_vpn_config_rejected_total"
	metricSpoofedDrops   = "bnerd_vpn_spoofed_drops_total"
)

// AgentMetrics is the agent's view of one gateway.
type AgentMetrics struct {
	// RulesetRepairs and ConfigRejected are nil when the agent does not export them;
	// SpoofedDrops also when the gateway runs no spoof check (only kernel ESP does).
	RulesetRepairs *int64
	ConfigRejected *int64
	SpoofedDrops   *int64
	Peers          map[string]*PeerMetrics
}

// PeerMetrics is the agent's view of one peer.
type PeerMetrics struct {
	Up       bool  `json:"up"`
	Rekeys   int64 `json:"rekeys"`
	DropsIn  int64 `json:"authorizationDropsIn"`
	DropsOut int64 `json:"authorizationDropsOut"`
	// LastHandshake is a Unix time (WireGuard); 0 when none.
	LastHandshake float64 `json:"-"`
}

// agentView picks one gateway's figures out of the samples (the agent serves only its own
// gateway; the labels are checked all the same).
func agentView(samples []sample, namespace, gateway string) *AgentMetrics {
	m := &AgentMetrics{Peers: map[string]*PeerMetrics{}}
	peer := func(name string) *PeerMetrics {
		p := m.Peers[name]
		if p == nil {
			p = &PeerMetrics{}
			m.Peers[name] = p
		}
		return p
	}
	for _, s := range samples {
		if s.labels["namespace"] != namespace || s.labels["gateway"] != gateway {
			continue
		}
		v := int64(s.value)
		if strings.HasPrefix(s.name, "bnerd_vpn_peer_") && s.labels["peer"] == "" {
			continue
		}
		switch s.name {
		case metricRulesetRepairs:
			m.RulesetRepairs = &v
		case metricConfigRejected:
			m.ConfigRejected = &v
		case metricSpoofedDrops:
			m.SpoofedDrops = &v
		case metricPeerUp:
			peer(s.labels["peer"]).Up = s.value == 1
		case metricPeerRekeys:
			peer(s.labels["peer"]).Rekeys = v
		case metricPeerHandshake:
			peer(s.labels["peer"]).LastHandshake = s.value
		case metricPeerDrops:
			switch s.labels["direction"] {
			case "in":
				peer(s.labels["peer"]).DropsIn = v
			case "out":
				peer(s.labels["peer"]).DropsOut = v
			}
		}
	}
	return m
}

// ReadMetrics fetches and reads the agent's metrics for the gateway from its pod.
func ReadMetrics(ctx context.Context, a AgentAccess, gw *vpnv1.VPNGateway, pod *corev1.Pod) (*AgentMetrics, error) {
	raw, err := a.Metrics(ctx, pod.Namespace, pod.Name, metricsPort(pod))
	if err != nil {
		return nil, err
	}
	samples, err := parseMetrics(raw)
	if err != nil {
		return nil, fmt.Errorf("the answer is not Prometheus metrics: %w", err)
	}
	return agentView(samples, gw.Namespace, gw.Name), nil
}
