package controller_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// config/prometheus: the PodMonitors select what the operator and the renderer produce (labels
// and port names), and the alert rules pass promtool's check and its rule unit tests
// (testdata/alerts_test.yaml: each alert fires when and only when it should, with the
// annotations on-call reads).
func TestPrometheusAlerts(t *testing.T) {
	objs := readManifests(t, filepath.Join(testenv.RepoRoot(), "config", "prometheus"))
	byName := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byName[o.GetKind()+"/"+o.GetName()] = o
	}

	gateways := byName["PodMonitor/bnerd-vpn-gateways"]
	if gateways == nil {
		t.Fatal("no PodMonitor bnerd-vpn-gateways")
	}
	exprs, _, _ := unstructured.NestedSlice(gateways.Object, "spec", "selector", "matchExpressions")
	if len(exprs) != 1 || exprs[0].(map[string]any)["key"] != children.LabelGateway {
		t.Errorf("gateway PodMonitor selects %v, want the label %s the gateway pods carry", exprs, children.LabelGateway)
	}
	if port := podMonitorPort(t, gateways); port != children.PortMetrics {
		t.Errorf("gateway PodMonitor scrapes port %q, the agent's is %q", port, children.PortMetrics)
	}

	operator := byName["PodMonitor/bnerd-vpn-operator"]
	if operator == nil {
		t.Fatal("no PodMonitor bnerd-vpn-operator")
	}
	var deploy *unstructured.Unstructured
	for _, o := range readManifests(t, filepath.Join(testenv.RepoRoot(), "config", "default")) {
		if o.GetKind() == "Deployment" && o.GetName() == "bnerd-vpn-operator" {
			deploy = o
		}
	}
	if deploy == nil {
		t.Fatal("config/default has no operator Deployment")
	}
	want, _, _ := unstructured.NestedStringMap(operator.Object, "spec", "selector", "matchLabels")
	podLabels, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "labels")
	for k, v := range want {
		if podLabels[k] != v {
			t.Errorf("operator PodMonitor selects %s=%s; the operator pod has %v", k, v, podLabels)
		}
	}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	port, found := podMonitorPort(t, operator), false
	for _, c := range containers {
		ports, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range ports {
			found = found || p.(map[string]any)["name"] == port
		}
	}
	if !found {
		t.Errorf("operator PodMonitor scrapes port %q, which the operator's container does not name", port)
	}

	rule := byName["PrometheusRule/bnerd-vpn"]
	if rule == nil {
		t.Fatal("no PrometheusRule bnerd-vpn")
	}
	groups, _, _ := unstructured.NestedFieldNoCopy(rule.Object, "spec", "groups")
	raw, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "promtool.sh")).Output()
	if err != nil {
		t.Fatalf("hack/promtool.sh: %v", err)
	}
	promtool := strings.TrimSpace(string(out))
	dir := t.TempDir()
	spec, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"alerts.rules.yaml": raw, "alerts_test.yaml": spec} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "alerts.rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

func podMonitorPort(t *testing.T, pm *unstructured.Unstructured) string {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("%s: %d podMetricsEndpoints, want 1", pm.GetName(), len(eps))
	}
	port, _ := eps[0].(map[string]any)["port"].(string)
	return port
}
