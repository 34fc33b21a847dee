// Package charts_test checks the Helm chart with the real helm binary (hack/helm.sh builds it
// once from the Go module proxy): it lints, renders exactly what config/ installs, turns every
// value into the operator's flags, and refuses bad values naming their path.
package charts_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/manifests"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

const namespace = "bnerd-vpn-system"

// kubeVersion is what helm renders and lints for (the chart needs ≥ 1.31, whose API server
// stores CRDs with CEL's IP and CIDR functions; helm's default is 1.20).
const kubeVersion = "1.37.2"

var chart = filepath.Join(testenv.RepoRoot(), "charts", "bnerd-vpn-operator")

func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "helm.sh")).Output()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// helm runs helm with args; its combined output and error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// render is `helm template` of the chart in the operator's namespace, CRDs included, with
// --set values.
func render(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	var extra []string
	for _, s := range set {
		extra = append(extra, "--set", s)
	}
	return renderWith(t, extra...)
}

// renderWith is `helm template` with extra arguments.
func renderWith(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", "bnerd-vpn-operator", chart, "--namespace", namespace, "--include-crds", "--kube-version", kubeVersion}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs, err := manifests.Decode([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// key names an object.
func key(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

// comparable is an object without its metadata labels (the chart adds helm's own; selectors and
// pod labels live in the spec and are compared), as plain JSON values.
func comparable(t *testing.T, u *unstructured.Unstructured) map[string]any {
	t.Helper()
	c := u.DeepCopy()
	c.SetLabels(nil)
	raw, err := json.Marshal(c.Object)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if md, ok := out["metadata"].(map[string]any); ok && len(md) == 0 {
		delete(out, "metadata")
	}
	return out
}

func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, u := range objs {
		if _, dup := out[key(u)]; dup {
			t.Fatalf("%s twice", key(u))
		}
		out[key(u)] = comparable(t, u)
	}
	return out
}

// expectSame compares two sets of objects by name and content.
func expectSame(t *testing.T, chartObjs, configObjs []*unstructured.Unstructured) {
	t.Helper()
	got, want := byKey(t, chartObjs), byKey(t, configObjs)
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("the chart lacks %s", k)
		case !reflect.DeepEqual(g, w):
			gj, _ := json.MarshalIndent(g, "", "  ")
			wj, _ := json.MarshalIndent(w, "", "  ")
			t.Errorf("%s differs:\nchart:  %s\nconfig: %s", k, gj, wj)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart has %s, which config/ does not", k)
		}
	}
}

// With the default values the chart installs exactly what `kubectl apply -k config/default`
// does — CRDs, RBAC, the operator's Deployment and PodDisruptionBudget — except the Namespace
// (helm install --create-namespace).
func TestChartRendersTheKustomizeInstall(t *testing.T) {
	config, err := manifests.Kustomization(filepath.Join(testenv.RepoRoot(), "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	config = slices.DeleteFunc(config, func(u *unstructured.Unstructured) bool { return u.GetKind() == "Namespace" })
	expectSame(t, render(t), config)
}

// The kustomize install with OpenStack endpoints (config/openstack, built by kustomize itself:
// it patches config/default) is what the chart renders with openstack.enabled=true: the same
// flags and the clouds.yaml Secret mounted the same way.
func TestChartOpenStackIsConfigOpenStack(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(testenv.RepoRoot(), "config", "openstack"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	config, err := manifests.Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	config = slices.DeleteFunc(config, func(u *unstructured.Unstructured) bool { return u.GetKind() == "Namespace" })
	expectSame(t, render(t, "openstack.enabled=true", "openstack.cloudsSecret=openstack-clouds",
		"openstack.networkID=REPLACE-WITH-THE-PROVIDER-NETWORK-ID"), config)
}

// The optional monitoring objects are those of config/prometheus (and the dashboard of
// config/grafana), in the release's namespace.
func TestChartMonitoringIsConfigPrometheus(t *testing.T) {
	objs := render(t, "monitoring.podMonitors=true", "monitoring.prometheusRule=true")
	var mon []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetAPIVersion() == "monitoring.coreos.com/v1" {
			mon = append(mon, u)
		}
	}
	config, err := manifests.Kustomization(filepath.Join(testenv.RepoRoot(), "config", "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	expectSame(t, mon, config)

	dashboard := filepath.Join(testenv.RepoRoot(), "config", "grafana", "bnerd-vpn-dashboard.json")
	want, err := os.ReadFile(dashboard)
	if err != nil {
		t.Skipf("no dashboard yet: %v", err)
	}
	for _, u := range render(t, "monitoring.dashboard=true") {
		if u.GetKind() != "ConfigMap" {
			continue
		}
		got, _, _ := unstructured.NestedString(u.Object, "data", "bnerd-vpn-dashboard.json")
		if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
			t.Error("the chart's dashboard differs from config/grafana's")
		}
		if u.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard labels %v", u.GetLabels())
		}
		return
	}
	t.Error("monitoring.dashboard=true renders no ConfigMap")
}

// operatorArgs are the operator container's args of a rendering.
func operatorArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
		return args
	}
	t.Fatal("no Deployment")
	return nil
}

// Every setting is a value, and becomes the operator's flag.
func TestChartValuesBecomeFlags(t *testing.T) {
	args := operatorArgs(t, render(t,
		"gateway.userspaceDataplane=true", "gateway.imagePullPolicy=Never", "gateway.standby=true", "gateway.rolloutConcurrency=2",
		"gateway.agentImage=registry.example.net/agent:v1", "gateway.strongswanImage=registry.example.net/charon:v1",
		"network.internalSourceCIDRs={10.244.0.0/16,10.245.0.0/16}", "network.clusterPodCIDRs={10.244.0.0/16}",
		"network.clusterServiceCIDRs={10.96.0.0/12}", "network.nodeCIDRs={192.0.2.0/24}",
		"network.allowedTargetCIDRs={10.96.0.0/12}", "network.hostNetworkNamespaceSelector=tier=edge",
		"network.metricsNamespaceSelector=team=observability", "network.maxGatewaysPerNamespace=4", "network.maxServiceAddressesPerNamespace=0",
		"network.serviceCIDRPool=100.80.0.0/16",
		"operator.leaderElection.leaseDuration=40s", "operator.extraArgs={--concurrency=8}",
		"openstack.enabled=true", "openstack.cloudsSecret=os-creds", "openstack.networkID=net-1", "openstack.resync=90s",
		"gateway.pod.nodeSelector.dedicated=vpn", "gateway.pod.priorityClassName=vpn-gateways", "gateway.pod.imagePullSecrets[0].name=regcred",
		"gateway.pod.tolerations[0].key=dedicated", "gateway.pod.tolerations[0].operator=Equal", "gateway.pod.tolerations[0].value=vpn",
		"gateway.pod.tolerations[0].effect=NoSchedule", "gateway.pod.resources.requests.cpu=100m", "gateway.pod.resources.limits.memory=512Mi",
		"gateway.pod.nodeLossToleration=20s",
	))
	for _, want := range []string{
		"--leader-elect", "--leader-elect-lease-duration=40s", "--service-cidr-pool=100.80.0.0/16",
		"--agent-image=registry.example.net/agent:v1", "--strongswan-image=registry.example.net/charon:v1",
		"--image-pull-policy=Never", "--userspace-dataplane", "--gateway-standby", "--gateway-rollout-concurrency=2",
		"--internal-source-cidrs=10.244.0.0/16,10.245.0.0/16", "--cluster-pod-cidrs=10.244.0.0/16",
		"--cluster-service-cidrs=10.96.0.0/12", "--node-cidrs=192.0.2.0/24", "--allowed-target-cidrs=10.96.0.0/12",
		"--host-network-namespace-selector=tier=edge", "--metrics-namespace-selector=team=observability", "--concurrency=8",
		"--max-gateways-per-namespace=4", "--max-service-addresses-per-namespace=0",
		"--openstack-clouds-yaml=/etc/openstack/clouds.yaml", "--openstack-network-id=net-1", "--openstack-resync=90s",
		"--gateway-node-selector=dedicated=vpn", "--gateway-priority-class=vpn-gateways", "--gateway-image-pull-secrets=regcred",
		`--gateway-tolerations=[{"effect":"NoSchedule","key":"dedicated","operator":"Equal","value":"vpn"}]`,
		"--gateway-cpu-request=100m", "--gateway-memory-limit=512Mi", "--gateway-node-loss-toleration=20s",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if got := operatorArgs(t, render(t, "operator.leaderElection.enabled=false")); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--leader-elect") }) {
		t.Errorf("leader election disabled, args %q", got)
	}
	// 0 (unbounded) is a setting of its own, not the default left out.
	if got := operatorArgs(t, render(t, "gateway.rolloutConcurrency=0")); !slices.Contains(got, "--gateway-rollout-concurrency=0") {
		t.Errorf("gateway.rolloutConcurrency=0, args %q", got)
	}
}

// The NAD config template is a value (a file, as an install sets it: --set-file) reaching the
// operator's flag unchanged: newlines, quotes and template actions intact.
func TestChartNADConfigTemplateIsAFlag(t *testing.T) {
	f := filepath.Join(t.TempDir(), "nad.tmpl")
	if err := os.WriteFile(f, []byte(openstack.HostDeviceNADConfigTemplate), 0o600); err != nil {
		t.Fatal(err)
	}
	args := operatorArgs(t, renderWith(t, "--set", "openstack.enabled=true", "--set", "openstack.cloudsSecret=os-creds",
		"--set", "openstack.networkID=net-1", "--set-file", "openstack.nadConfigTemplate="+f))
	if want := "--openstack-nad-config-template=" + openstack.HostDeviceNADConfigTemplate; !slices.Contains(args, want) {
		t.Errorf("args %q lack %q", args, want)
	}
	if got := operatorArgs(t, render(t, "openstack.enabled=true", "openstack.cloudsSecret=os-creds", "openstack.networkID=net-1")); slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "--openstack-nad-config-template") }) {
		t.Errorf("no template set, args %q", got)
	}
}

// helm lint passes, and bad values are refused by values.schema.json naming their path (as a
// JSON pointer: '/operator/replicas').
func TestChartRefusesBadValues(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", "--kube-version", kubeVersion, chart); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	for _, tc := range []struct{ set, want string }{
		{"operator.replicas=two", "'/operator/replicas'"},
		{"operator.replicas=0", "'/operator/replicas'"},
		{"network.internalSourceCIDRs={10.244.0.0}", "'/network/internalSourceCIDRs/0'"},
		{"operator.leaderElection.leaseDuration=soon", "'/operator/leaderElection/leaseDuration'"},
		{"gateway.imagePullPolicy=Sometimes", "'/gateway/imagePullPolicy'"},
		{"gateway.rolloutConcurrency=-1", "'/gateway/rolloutConcurrency'"},
		{"operator.extraArgs={rm -rf}", "'/operator/extraArgs/0'"},
		{"operator.replica=2", "replica"},
		{"openstack.enabled=true", "openstack"},
		{"openstack.resync=often", "'/openstack/resync'"},
		{"gateway.pod.resources.requests.cpu=lots", "'/gateway/pod/resources/requests/cpu'"},
		{"gateway.pod.tolerations[0].effect=Never", "'/gateway/pod/tolerations/0/effect'"},
		{"gateway.pod.imagePullSecrets[0].nam=regcred", "'/gateway/pod/imagePullSecrets/0'"},
		{"operator.gatewayNamespaces={tenant-a,Tenant_B}", "'/operator/gatewayNamespaces/1'"},
		{"operator.gatewayNamespaces={tenant-a,tenant-a}", "'/operator/gatewayNamespaces'"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := helm(t, "template", "bnerd-vpn-operator", chart, "--namespace", namespace, "--kube-version", kubeVersion, "--set", tc.set)
			if err == nil {
				t.Fatalf("accepted %s", tc.set)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("the error does not name %s:\n%s", tc.want, out)
			}
		})
	}
}

// The lab installs with hack/lab/values.yaml: its images, the settings of its address plan and
// OpenStack endpoints against its cloud (lab.sh sets the network ID lab-cloud printed).
func TestChartLabValues(t *testing.T) {
	objs := renderWith(t, "--values", filepath.Join(testenv.RepoRoot(), "hack", "lab", "values.yaml"), "--set", "openstack.networkID=lab-provider")
	args := operatorArgs(t, objs)
	for _, want := range []string{"--agent-image=bnerd-vpn-gateway:lab", "--image-pull-policy=Never", "--userspace-dataplane",
		"--internal-source-cidrs=100.96.0.0/16", "--cluster-pod-cidrs=100.96.0.0/16",
		"--openstack-clouds-yaml=/etc/openstack/clouds.yaml", "--openstack-cloud=lab", "--openstack-network-id=lab-provider", "--openstack-nad-master=lab-cprov", "--openstack-resync=15s"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
}

// rulesOf are the rules of a rendered Role or ClusterRole, as plain JSON values.
func rulesOf(t *testing.T, u *unstructured.Unstructured) []any {
	t.Helper()
	rules, _, err := unstructured.NestedSlice(comparable(t, u), "rules")
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// grantsSecrets is whether a rule names the secrets resource.
func grantsSecrets(rule any) bool {
	res, _ := rule.(map[string]any)["resources"].([]any)
	return slices.Contains(res, any("secrets"))
}

// With operator.gatewayNamespaces the ClusterRole is the default one without its Secret rule;
// each listed namespace gets a Role with exactly that rule and a RoleBinding to the operator's
// ServiceAccount; the operator gets --gateway-namespaces. Everything else is the default
// rendering, which (empty list) neither has such Roles nor the flag.
func TestChartGatewayNamespaces(t *testing.T) {
	defaults := render(t)
	if args := operatorArgs(t, defaults); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--gateway-namespaces") }) {
		t.Errorf("no namespaces listed, args %q", args)
	}
	objs := render(t, "operator.gatewayNamespaces={tenant-a,tenant-b}")
	if args := operatorArgs(t, objs); !slices.Contains(args, "--gateway-namespaces=tenant-a,tenant-b") {
		t.Errorf("args %q lack --gateway-namespaces=tenant-a,tenant-b", args)
	}

	clusterRole := "ClusterRole /bnerd-vpn-operator"
	var wantClusterRules, secretRules []any
	for _, u := range defaults {
		if key(u) != clusterRole {
			continue
		}
		for _, r := range rulesOf(t, u) {
			if grantsSecrets(r) {
				secretRules = append(secretRules, r)
			} else {
				wantClusterRules = append(wantClusterRules, r)
			}
		}
	}
	want := map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"create", "get", "list", "watch"}}
	if len(secretRules) != 1 || !reflect.DeepEqual(secretRules[0], want) {
		t.Fatalf("the default ClusterRole's Secret rules %v, want one: %v", secretRules, want)
	}

	got := byKey(t, objs)
	rest := byKey(t, defaults)
	for k, w := range rest {
		switch k {
		case clusterRole, "Deployment bnerd-vpn-system/bnerd-vpn-operator":
			continue
		}
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s differs from the default rendering (present: %v)", k, ok)
		}
	}
	for _, u := range objs {
		k := key(u)
		if _, ok := rest[k]; ok && k != clusterRole {
			continue
		}
		switch {
		case k == clusterRole:
			if rules := rulesOf(t, u); !reflect.DeepEqual(rules, wantClusterRules) {
				t.Errorf("ClusterRole rules:\n%v\nwant the default ones without the Secret rule:\n%v", rules, wantClusterRules)
			}
		case u.GetKind() == "Role" && u.GetName() == "bnerd-vpn-operator-secrets" && (u.GetNamespace() == "tenant-a" || u.GetNamespace() == "tenant-b"):
			if rules := rulesOf(t, u); !reflect.DeepEqual(rules, secretRules) {
				t.Errorf("%s rules %v, want %v", k, rules, secretRules)
			}
		case u.GetKind() == "RoleBinding" && u.GetName() == "bnerd-vpn-operator-secrets" && (u.GetNamespace() == "tenant-a" || u.GetNamespace() == "tenant-b"):
			c := comparable(t, u)
			wantRef := map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bnerd-vpn-operator-secrets"}
			wantSubjects := []any{map[string]any{"kind": "ServiceAccount", "name": "bnerd-vpn-operator", "namespace": namespace}}
			if !reflect.DeepEqual(c["roleRef"], wantRef) || !reflect.DeepEqual(c["subjects"], wantSubjects) {
				t.Errorf("%s: roleRef %v, subjects %v", k, c["roleRef"], c["subjects"])
			}
		default:
			t.Errorf("unexpected %s", k)
		}
	}
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		for _, kind := range []string{"Role", "RoleBinding"} {
			if _, ok := got[kind+" "+ns+"/bnerd-vpn-operator-secrets"]; !ok {
				t.Errorf("no %s in %s", kind, ns)
			}
		}
	}
}
