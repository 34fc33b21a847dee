package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text format (what the agent's /metrics serves): comments
// and blank lines are skipped, every other line is `name{label="value",...} value [timestamp]`.
// A line it cannot read is an error naming the line number (the agent's output is never
// malformed; something else answered).
func parseMetrics(text []byte) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("not a sample")
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " \t,")
			if rest == "" {
				return s, fmt.Errorf("unterminated label set")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq <= 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("malformed label")
			}
			key := strings.TrimSpace(rest[:eq])
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest = rest[j+1:]
					closed = true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[key] = v.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return s, fmt.Errorf("no value")
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

// The agent's metrics diagnose and status read (README, "Monitoring and alerts").
const (
	metricPeerUp         = "bnerd_vpn_peer_up"
	metricPeerRekeys     = "bnerd_vpn_peer_rekeys_total"
	metricPeerDrops      = "bnerd_vpn_peer_authorization_drops_total"
	metricPeerHandshake  = "bnerd_vpn_peer_last_handshake_timestamp_seconds"
	metricRulesetRepairs = "bnerd_vpn_ruleset_repairs_total"
	metricConfigRejected = "bnerd_vpn_config_rejected_total"
	metricSpoofedDrops   = "bnerd_vpn_spoofed_drops_total"
)

// agentMetrics is the agent's view of one gateway.
type agentMetrics struct {
	// RulesetRepairs and ConfigRejected are nil when the agent does not export them;
	// SpoofedDrops also when the gateway runs no spoof check (only kernel ESP does).
	RulesetRepairs *int64
	ConfigRejected *int64
	SpoofedDrops   *int64
	Peers          map[string]*peerMetrics
}

// peerMetrics is the agent's view of one peer.
type peerMetrics struct {
	Up       bool  `json:"up"`
	Rekeys   int64 `json:"rekeys"`
	DropsIn  int64 `json:"authorizationDropsIn"`
	DropsOut int64 `json:"authorizationDropsOut"`
	// LastHandshake is a Unix time (WireGuard); 0 when none.
	LastHandshake float64 `json:"-"`
}

// agentView picks one gateway's figures out of the samples (the agent serves only its own
// gateway; the labels are checked all the same).
func agentView(samples []sample, namespace, gateway string) *agentMetrics {
	m := &agentMetrics{Peers: map[string]*peerMetrics{}}
	peer := func(name string) *peerMetrics {
		p := m.Peers[name]
		if p == nil {
			p = &peerMetrics{}
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
