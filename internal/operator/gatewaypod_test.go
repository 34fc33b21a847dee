package operator

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestGatewayResources(t *testing.T) {
	r, err := GatewayResources("100m", "128Mi", "", "512Mi")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Requests.Cpu().String(); got != "100m" {
		t.Errorf("cpu request %s", got)
	}
	if got := r.Limits.Memory().String(); got != "512Mi" {
		t.Errorf("memory limit %s", got)
	}
	if _, ok := r.Limits[corev1.ResourceCPU]; ok {
		t.Error("an empty --gateway-cpu-limit set a CPU limit")
	}
	for _, tc := range []struct {
		args [4]string
		want string
	}{
		{[4]string{"lots", "", "", ""}, `--gateway-cpu-request "lots"`},
		{[4]string{"", "-1Mi", "", ""}, `--gateway-memory-request "-1Mi": must be positive`},
		{[4]string{"", "1Gi", "", "256Mi"}, "--gateway-memory-request 1Gi is above --gateway-memory-limit 256Mi"},
	} {
		_, err := GatewayResources(tc.args[0], tc.args[1], tc.args[2], tc.args[3])
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestGatewayTolerations(t *testing.T) {
	tols, err := GatewayTolerations(`[{"key":"dedicated","operator":"Equal","value":"vpn","effect":"NoSchedule"},{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":10}]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(tols) != 2 || tols[1].TolerationSeconds == nil || *tols[1].TolerationSeconds != 10 {
		t.Fatalf("%+v", tols)
	}
	if tols, err := GatewayTolerations(""); err != nil || tols != nil {
		t.Fatalf("empty: %v %v", tols, err)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"key":"a"}`, "not a JSON list of tolerations"},
		{`[{"key":"a","colour":"red"}]`, `unknown field "colour"`},
		{`[{"key":"a","operator":"Maybe"}]`, `--gateway-tolerations[0]: operator "Maybe"`},
		{`[{"key":"a","operator":"Exists","value":"x"}]`, "operator Exists takes no value"},
		{`[{"operator":"Equal","value":"x"}]`, "an empty key needs operator Exists"},
		{`[{"key":"a","effect":"NoScheduling"}]`, `effect "NoScheduling"`},
		{`[{"key":"a","effect":"NoSchedule","tolerationSeconds":5}]`, "tolerationSeconds needs effect NoExecute"},
	} {
		_, err := GatewayTolerations(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.in, err, tc.want)
		}
	}
}
