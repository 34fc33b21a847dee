// Package dashboard checks Grafana dashboards (config/grafana) against the metrics the binaries
// really export: every query may read only metrics, and match or group only on labels, that a
// registry serves (or that Prometheus adds when it scrapes a pod). Its test collects the names
// from the operator's and the gateway agent's own registries; no binary links this package.
package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Query is one query of a dashboard.
type Query struct {
	// Where names it: `panel "Tunnel up" target A`, `variable gateway`.
	Where string
	// Expr is the PromQL expression ("" for label_values(label)).
	Expr string
	// Label is the label a label_values() variable lists ("" otherwise).
	Label string
}

type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

type board struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

// Queries returns every PromQL query of a Grafana dashboard: the panels' targets (a collapsed
// row's panels included) and the query variables' queries (label_values, query_result). A
// variable query it cannot check (metrics(), anything else) is an error.
func Queries(raw []byte) ([]Query, error) {
	var b board
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(b.Panels)
	var errs []error
	for _, v := range b.Templating.List {
		if v.Type != "query" {
			continue
		}
		texts := []string{strings.TrimSpace(v.Definition)}
		var s string
		var o struct {
			Query string `json:"query"`
		}
		switch {
		case len(v.Query) == 0:
		case json.Unmarshal(v.Query, &s) == nil:
			texts = append(texts, strings.TrimSpace(s))
		case json.Unmarshal(v.Query, &o) == nil:
			texts = append(texts, strings.TrimSpace(o.Query))
		default:
			errs = append(errs, fmt.Errorf("variable %s: query %s is neither a string nor {query: ...}", v.Name, v.Query))
		}
		slices.Sort(texts)
		texts = slices.Compact(texts)
		for _, text := range texts {
			if text == "" {
				continue
			}
			q, err := variableQuery(text)
			if err != nil {
				errs = append(errs, fmt.Errorf("variable %s: %w", v.Name, err))
				continue
			}
			q.Where = "variable " + v.Name
			out = append(out, q)
		}
	}
	return out, errors.Join(errs...)
}

var (
	labelValuesRe = regexp.MustCompile(`^label_values\((?s:(.*))\)$`)
	queryResultRe = regexp.MustCompile(`^query_result\((?s:(.*))\)$`)
	labelNameRe   = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// variableQuery reads a Prometheus data source's variable query.
func variableQuery(text string) (Query, error) {
	if m := labelValuesRe.FindStringSubmatch(text); m != nil {
		args := m[1]
		i := strings.LastIndexByte(args, ',')
		label := strings.TrimSpace(args[i+1:])
		if !labelNameRe.MatchString(label) {
			return Query{}, fmt.Errorf("%s: %q is not a label name", text, label)
		}
		if i < 0 {
			return Query{Label: label}, nil
		}
		return Query{Expr: strings.TrimSpace(args[:i]), Label: label}, nil
	}
	if m := queryResultRe.FindStringSubmatch(text); m != nil {
		return Query{Expr: strings.TrimSpace(m[1])}, nil
	}
	if text == "label_names()" {
		return Query{}, nil
	}
	return Query{}, fmt.Errorf("%s: not a query that can be checked (label_values or query_result)", text)
}

// TargetLabels are the labels Prometheus (a PodMonitor) puts on every series it scrapes from a
// pod, so any query may match or group on them.
var TargetLabels = []string{"job", "instance", "namespace", "pod", "container", "endpoint", "service"}

// Metrics are the series names some registries serve, each with its label names.
type Metrics map[string]map[string]bool

func (m Metrics) add(name string, labels ...string) {
	if m[name] == nil {
		m[name] = map[string]bool{}
	}
	for _, l := range labels {
		m[name][l] = true
	}
}

// AddGathered adds what g gathers, each family under the names a query reads it by: a
// histogram's _bucket (with le), _sum and _count, a summary's own name (with quantile), _sum and
// _count, a counter named without _total also with it (OpenMetrics exposition).
func (m Metrics) AddGathered(g prometheus.Gatherer) error {
	fams, err := g.Gather()
	if err != nil {
		return err
	}
	for _, f := range fams {
		labels := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := make([]string, 0, len(labels))
		for l := range labels {
			names = append(names, l)
		}
		n := f.GetName()
		switch f.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			m.add(n+"_bucket", append(names, "le")...)
			m.add(n+"_sum", names...)
			m.add(n+"_count", names...)
		case "SUMMARY":
			m.add(n, append(names, "quantile")...)
			m.add(n+"_sum", names...)
			m.add(n+"_count", names...)
		case "COUNTER":
			m.add(n, names...)
			if !strings.HasSuffix(n, "_total") {
				m.add(n+"_total", names...)
			}
		default:
			m.add(n, names...)
		}
	}
	return nil
}

// descRe reads a Desc's String() (client_golang has no accessors): its name and label names.
var descRe = regexp.MustCompile(`^Desc\{fqName: "((?:[^"\\]|\\.)*)", .*, constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// AddDescribed adds the metrics c describes under their own names (no suffixes: a Desc does not
// say its type). For what gathers nothing yet, such as a vector without series.
func (m Metrics) AddDescribed(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var errs []error
	for d := range ch {
		g := descRe.FindStringSubmatch(d.String())
		if g == nil {
			errs = append(errs, fmt.Errorf("cannot read %s", d))
			continue
		}
		var labels []string
		for _, p := range strings.Split(g[2], ",") {
			if name, _, ok := strings.Cut(p, "="); ok {
				labels = append(labels, name)
			}
		}
		for _, l := range strings.Split(g[3], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		m.add(g[1], labels...)
	}
	return errors.Join(errs...)
}

// Check returns what is wrong with q: an expression that does not lex, a metric m lacks, a
// matcher's label the metric does not have, a grouping label none of the expression's metrics
// has, or a label_values() label its metric does not have. (Grouping labels are checked against
// all the expression's metrics together: a lexer does not know which operand they apply to.)
func (m Metrics) Check(q Query) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", q.Where, fmt.Sprintf(format, args...)))
	}
	has := func(labels map[string]bool, l string) bool { return labels[l] || slices.Contains(TargetLabels, l) }
	all := map[string]bool{}
	if q.Expr != "" {
		refs, err := Parse(q.Expr)
		if err != nil {
			fail("%s: %v", q.Expr, err)
			return errs
		}
		if len(refs.Selectors) == 0 {
			fail("%s reads no metric", q.Expr)
		}
		unknown := false
		for _, s := range refs.Selectors {
			labels, ok := m[s.Metric]
			if !ok {
				fail("%s: unknown metric %s%s", q.Expr, s.Metric, m.suggest(s.Metric))
				unknown = true
				continue
			}
			for l := range labels {
				all[l] = true
			}
			for _, l := range s.Labels {
				if !has(labels, l) {
					fail("%s: %s has no label %q (it has %s)", q.Expr, s.Metric, l, m.labelList(s.Metric))
				}
			}
		}
		for _, l := range refs.Grouping {
			if !unknown && !has(all, l) {
				fail("%s: groups or matches on %q, which none of its metrics has", q.Expr, l)
			}
		}
	}
	if q.Expr == "" {
		for _, labels := range m {
			for l := range labels {
				all[l] = true
			}
		}
	}
	if q.Label != "" && len(errs) == 0 && !has(all, q.Label) {
		fail("label_values lists %q, which its metric does not have", q.Label)
	}
	return errs
}

func (m Metrics) labelList(name string) string {
	var ls []string
	for l := range m[name] {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	return strings.Join(ls, ", ") + " and the target labels " + strings.Join(TargetLabels, ", ")
}

// suggest names the exported metrics closest to an unknown one: the same name with a suffix
// more or less (_total, _seconds, ...), else the nearest by edit distance (a typo).
func (m Metrics) suggest(name string) string {
	var near []string
	for n := range m {
		if strings.HasPrefix(n, name+"_") || strings.HasPrefix(name, n+"_") {
			near = append(near, n)
		}
	}
	if len(near) == 0 {
		best := len(name)/4 + 2
		for n := range m {
			switch d := distance(name, n); {
			case d < best:
				best, near = d, []string{n}
			case d == best:
				near = append(near, n)
			}
		}
	}
	if len(near) == 0 {
		return ""
	}
	slices.Sort(near)
	return " (did you mean " + strings.Join(near, " or ") + "?)"
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// CheckDashboard checks every query of a Grafana dashboard (Queries, Check).
func (m Metrics) CheckDashboard(raw []byte) ([]Query, error) {
	qs, err := Queries(raw)
	errs := []error{err}
	for _, q := range qs {
		errs = append(errs, m.Check(q)...)
	}
	return qs, errors.Join(errs...)
}
