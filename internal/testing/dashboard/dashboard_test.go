package dashboard_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	agentmetrics "github.com/bnerd/bnerd-vpn-operator/internal/agent/metrics"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/dashboard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// recorder passes registrations on and remembers the collectors, so that what gathers nothing
// yet (a vector without series, such as bnerd_vpn_gateway_ready before any gateway) is known
// from its description.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exported is what the binaries serve on /metrics, from their real registries: the gateway
// agent's (metrics.NewRegistry, with a peer that has every figure, a kernel-ESP ruleset's
// spoofed-source counter and an active/standby pair, so every series is there)
// and the operator's (controller-runtime's registry after operator.RegisterMetrics, which Run
// calls before it serves it).
func exported(t *testing.T) dashboard.Metrics {
	t.Helper()
	m := dashboard.Metrics{}
	now := time.Now()
	snap := agent.Snapshot{Taken: now, Peers: map[string]agent.PeerSnapshot{"branch": {
		PeerState: agent.PeerState{State: agent.StateEstablished, EstablishedAt: now.Add(-time.Minute), LastHandshake: now,
			BytesIn: 1, BytesOut: 1, PacketsIn: 1, PacketsOut: 1, Rekeys: 1},
		Authorized: true, DropsIn: nft.CounterValue{Packets: 1, Bytes: 1}, DropsOut: nft.CounterValue{Packets: 1, Bytes: 1},
	}}, Spoofed: &nft.CounterValue{Packets: 1, Bytes: 1}}
	agentReg := agentmetrics.NewRegistry(&agentmetrics.Collector{Namespace: "acme", Gateway: "gw",
		Snapshot: func() agent.Snapshot { return snap }, Repairs: func() uint64 { return 0 }, Rejected: func() uint64 { return 0 },
		Availability: func() agentmetrics.Availability {
			return agentmetrics.Availability{Active: true, StandbyReady: true, Takeovers: map[string]uint64{"ActiveGone": 1}}
		}})
	if err := m.AddGathered(agentReg); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Registerer: ctrlmetrics.Registry}
	if err := operator.RegisterMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if err := m.AddGathered(ctrlmetrics.Registry); err != nil {
		t.Fatal(err)
	}
	for _, c := range rec.collectors {
		if err := m.AddDescribed(c); err != nil {
			t.Fatal(err)
		}
	}
	// The collection itself works: the agent's per-peer and the operator's vector metrics are
	// there with their labels.
	for name, labels := range map[string][]string{
		"bnerd_vpn_peer_bytes_total":                      {"namespace", "gateway", "peer", "direction"},
		"bnerd_vpn_peer_last_handshake_timestamp_seconds": {"namespace", "gateway", "peer"},
		"bnerd_vpn_gateway_ready":                         {"namespace", "gateway", "reason"},
		"bnerd_vpn_build_info":                            {"version", "goversion"},
		"bnerd_vpn_operator_manager_restarts_total":       {},
		"go_gc_duration_seconds_count":                    {},
	} {
		got, ok := m[name]
		if !ok {
			t.Fatalf("the registries do not export %s", name)
		}
		for _, l := range labels {
			if !got[l] {
				t.Errorf("%s has labels %v, want %v", name, got, labels)
			}
		}
	}
	return m
}

// dashboards are the Grafana dashboards the project ships: config/grafana's and the chart's
// copies.
func dashboards(t *testing.T) []string {
	t.Helper()
	root := testenv.RepoRoot()
	main := filepath.Join(root, "config", "grafana", "bnerd-vpn-dashboard.json")
	if _, err := os.Stat(main); err != nil {
		t.Fatal(err)
	}
	out := []string{main}
	for _, pattern := range []string{"config/grafana/*.json", "charts/*/files/*dashboard*.json", "charts/*/dashboards/*.json"} {
		found, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range found {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Every query of every dashboard reads only metrics the operator or a gateway agent exports,
// and matches and groups only on labels they have (or Prometheus adds to a pod's series); and
// every bnerd_vpn_* metric the code exports has a panel.
func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	m := exported(t)
	for _, path := range dashboards(t) {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			qs, err := m.CheckDashboard(read(t, path))
			if err != nil {
				t.Error(err)
			}
			used := map[string]bool{}
			var targets, variables int
			for _, q := range qs {
				if strings.HasPrefix(q.Where, "variable ") {
					variables++
				} else {
					targets++
				}
				if refs, err := dashboard.Parse(q.Expr); err == nil {
					for _, s := range refs.Selectors {
						used[s.Metric] = true
					}
				}
			}
			if targets < 10 || variables < 3 {
				t.Errorf("%d panel queries and %d variable queries found: the dashboard was not read", targets, variables)
			}
			for name := range m {
				if strings.HasPrefix(name, "bnerd_vpn_") && !used[name] {
					t.Errorf("no panel shows %s", name)
				}
			}
		})
	}
}

// The checker refuses what a panel must not do: a metric the code does not export (a typo, a
// suffix it does not have, a name from elsewhere), a label the metric does not have, a grouping
// on such a label, an unknown function and a variable standing for a metric.
func TestCheckRefusesUnknownMetrics(t *testing.T) {
	m := exported(t)
	for _, tc := range []struct {
		expr string
		want string // "" accepts; else in the error
	}{
		{`sum by (namespace, gateway, peer, direction) (rate(bnerd_vpn_peer_bytes_total{namespace=~"$namespace", peer=~"$peer"}[$__rate_interval]))`, ""},
		{`time() - max by (peer) (bnerd_vpn_peer_last_handshake_timestamp_seconds)`, ""},
		{`max by (namespace, gateway, reason) (bnerd_vpn_gateway_ready) == 0`, ""},
		{`count by (pod, version, goversion) (bnerd_vpn_build_info)`, ""},
		{`rate(go_gc_duration_seconds_count[5m]) and on (pod) go_gc_duration_seconds{quantile="0.5"}`, ""},
		{`sum(rate(bnerd_vpn_peer_bytes_total[5m] offset 1h)) / ignoring(direction) group_left sum(bnerd_vpn_peer_up)`, ""},
		{`{__name__="bnerd_vpn_peer_up", peer="x"}`, ""},
		{`max_over_time(bnerd_vpn_peer_up[1h:5m]) # a comment bnerd_vpn_nope`, ""},
		{`rate(bnerd_vpn_peer_byte_total[5m])`, "unknown metric bnerd_vpn_peer_byte_total (did you mean bnerd_vpn_peer_bytes_total?)"},
		{`bnerd_vpn_peer_up_total`, "unknown metric bnerd_vpn_peer_up_total (did you mean bnerd_vpn_peer_up?)"},
		{`rate(bnerd_vpn_peer_rekeys[5m])`, "unknown metric bnerd_vpn_peer_rekeys (did you mean bnerd_vpn_peer_rekeys_total?)"},
		{`bnerd_vpn_gateway_ready_bucket`, "unknown metric bnerd_vpn_gateway_ready_bucket"},
		{`rate(wireguard_received_bytes_total[5m])`, "unknown metric wireguard_received_bytes_total"},
		{`bnerd_vpn_peer_up and bnerd_vpn_tunnel_up`, "unknown metric bnerd_vpn_tunnel_up"},
		{`{__name__="bnerd_vpn_peer_down"}`, "unknown metric bnerd_vpn_peer_down"},
		{`bnerd_vpn_peer_up{gw="x"}`, `has no label "gw"`},
		{`bnerd_vpn_gateway_ready{peer="x"}`, `has no label "peer"`},
		{`sum by (tunnel) (bnerd_vpn_peer_up)`, `groups or matches on "tunnel"`},
		{`rat(bnerd_vpn_peer_bytes_total[5m])`, `unknown function "rat"`},
		{`$metric{peer="x"}`, "variable $metric outside a string"},
		{`{__name__=~"bnerd_vpn_.*"}`, "cannot be checked"},
		{`bnerd_vpn_peer_up{peer="x"`, "unclosed {"},
		{`vector(1)`, "reads no metric"},
	} {
		errs := m.Check(dashboard.Query{Where: "case", Expr: tc.expr})
		err := errors.Join(errs...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.expr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.expr, err, tc.want)
		}
	}

	// A whole dashboard with one bad panel among good ones, a bad variable and a good one.
	bad := `{"panels": [
	  {"type": "row", "title": "r", "panels": [
	    {"type": "timeseries", "title": "Hidden in a collapsed row", "targets": [{"refId": "A", "expr": "bnerd_vpn_peer_upp"}]}]},
	  {"type": "timeseries", "title": "Good", "targets": [{"refId": "A", "expr": "bnerd_vpn_peer_up"}]}],
	 "templating": {"list": [
	  {"name": "peer", "type": "query", "query": {"query": "label_values(bnerd_vpn_peer_up, peerr)"}},
	  {"name": "gateway", "type": "query", "query": "label_values(bnerd_vpn_peer_up, gateway)"},
	  {"name": "any", "type": "query", "query": "metrics(bnerd_.*)"}]}}`
	_, err := m.CheckDashboard([]byte(bad))
	for _, want := range []string{`panel "Hidden in a collapsed row" target A: bnerd_vpn_peer_upp: unknown metric`,
		`variable peer: label_values lists "peerr"`, "variable any: metrics(bnerd_.*): not a query that can be checked"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad dashboard: %v, want an error with %q", err, want)
		}
	}
	if err != nil && (strings.Contains(err.Error(), `"Good"`) || strings.Contains(err.Error(), "variable gateway")) {
		t.Errorf("bad dashboard: the good panel or variable refused: %v", err)
	}
}

// Histograms, summaries and counters are read under the names Prometheus stores them by.
func TestMetricSuffixes(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "test_latency_seconds", Help: "h"}, []string{"op"})
	h.WithLabelValues("x").Observe(1)
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "test_size_bytes", Help: "s", Objectives: map[float64]float64{0.5: 0.05}})
	s.Observe(1)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_events", Help: "c"})
	ct := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_drops_total", Help: "c"})
	empty := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "test_state", Help: "g", ConstLabels: prometheus.Labels{"component": "x"}}, []string{"gateway"})
	reg.MustRegister(h, s, c, ct, empty)
	m := dashboard.Metrics{}
	if err := m.AddGathered(reg); err != nil {
		t.Fatal(err)
	}
	if err := m.AddDescribed(empty); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`histogram_quantile(0.9, sum by (le, op) (rate(test_latency_seconds_bucket[5m])))`, true},
		{`rate(test_latency_seconds_sum[5m]) / rate(test_latency_seconds_count{op="x"}[5m])`, true},
		{`test_latency_seconds`, false},
		{`test_latency_seconds_sum{le="1"}`, false},
		{`test_size_bytes{quantile="0.5"} + test_size_bytes_sum + test_size_bytes_count`, true},
		{`test_size_bytes_bucket`, false},
		{`rate(test_events[5m]) + rate(test_events_total[5m])`, true},
		{`test_drops_total`, true},
		{`test_drops_total_total`, false},
		{`test_drops`, false},
		{`test_state{gateway="g", component="x"}`, true},
		{`test_state{peer="p"}`, false},
	} {
		errs := m.Check(dashboard.Query{Where: "case", Expr: tc.expr})
		if (len(errs) == 0) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.expr, errs, tc.ok)
		}
	}
}

// The dashboards' expressions are PromQL Prometheus accepts: each (Grafana's interval variables
// as 5m) is a recording rule promtool checks.
func TestDashboardQueriesParse(t *testing.T) {
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "promtool.sh")).Output()
	if err != nil {
		t.Fatalf("hack/promtool.sh: %v", err)
	}
	promtool := strings.TrimSpace(string(out))
	interval := regexp.MustCompile(`\$\{?__[a-z_]+\}?`)
	for _, path := range dashboards(t) {
		qs, err := dashboard.Queries(read(t, path))
		if err != nil {
			t.Fatal(err)
		}
		var rules []map[string]string
		for i, q := range qs {
			if q.Expr != "" {
				rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query:%d", i), "expr": interval.ReplaceAllString(q.Expr, "5m")})
			}
		}
		raw, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
			t.Errorf("%s: promtool check rules: %v\n%s", path, err, out)
		}
	}
}

// The dashboard works wherever it is imported: its data source is a variable of the Prometheus
// type, every panel uses it, the namespace, gateway and peer variables exist, and panels have
// unique ids and do not overlap.
func TestDashboardLayout(t *testing.T) {
	for _, path := range dashboards(t) {
		var d struct {
			UID           string `json:"uid"`
			Title         string `json:"title"`
			SchemaVersion int    `json:"schemaVersion"`
			Inputs        []any  `json:"__inputs"`
			Templating    struct {
				List []struct {
					Name, Type string
					Query      any `json:"query"`
				} `json:"list"`
			} `json:"templating"`
			Panels []layoutPanel `json:"panels"`
		}
		if err := json.Unmarshal(read(t, path), &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 || len(d.Inputs) != 0 {
			t.Errorf("%s: uid %q, title %q, schemaVersion %d, __inputs %v: want a uid, a title, schema >= 36 and no import-time inputs (the Grafana sidecar cannot fill them)",
				path, d.UID, d.Title, d.SchemaVersion, d.Inputs)
		}
		vars := map[string]string{}
		for _, v := range d.Templating.List {
			vars[v.Name] = v.Type
			if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
				t.Errorf("%s: variable datasource is %s %v, want a Prometheus data source variable", path, v.Type, v.Query)
			}
		}
		for _, v := range []string{"datasource", "namespace", "gateway", "peer"} {
			if vars[v] == "" {
				t.Errorf("%s: no variable %s", path, v)
			}
		}
		ids := map[int]string{}
		var boxes []layoutPanel
		var walk func([]layoutPanel)
		walk = func(ps []layoutPanel) {
			for _, p := range ps {
				if other, dup := ids[p.ID]; dup || p.ID == 0 {
					t.Errorf("%s: panel %q has id %d (also %q)", path, p.Title, p.ID, other)
				}
				ids[p.ID] = p.Title
				g := p.GridPos
				if p.Title == "" || g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
					t.Errorf("%s: panel %d %q at %+v", path, p.ID, p.Title, g)
				}
				for _, b := range boxes {
					if g.X < b.GridPos.X+b.GridPos.W && b.GridPos.X < g.X+g.W && g.Y < b.GridPos.Y+b.GridPos.H && b.GridPos.Y < g.Y+g.H {
						t.Errorf("%s: panels %q and %q overlap", path, p.Title, b.Title)
					}
				}
				boxes = append(boxes, p)
				if p.Type == "row" {
					walk(p.Panels)
					continue
				}
				if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
					t.Errorf("%s: panel %q uses data source %+v with %d targets, want ${datasource}", path, p.Title, p.Datasource, len(p.Targets))
				}
				refs := map[string]bool{}
				for _, tg := range p.Targets {
					if tg.RefID == "" || refs[tg.RefID] || tg.Expr == "" {
						t.Errorf("%s: panel %q: target %q (expr %q): want a unique refId and an expression", path, p.Title, tg.RefID, tg.Expr)
					}
					refs[tg.RefID] = true
					if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
						t.Errorf("%s: panel %q target %s uses data source %+v", path, p.Title, tg.RefID, tg.Datasource)
					}
				}
			}
		}
		walk(d.Panels)
	}
}

type layoutPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []layoutPanel `json:"panels"`
}
