package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/manifests"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// readManifests returns the objects of a kustomization directory, following its resources.
func readManifests(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Kustomization(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func readYAML(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.File(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// The manifests users install (config/default) are accepted by a real API server.
func TestInstallManifestsAreValid(t *testing.T) {
	ctx := context.Background()
	objs := readManifests(t, filepath.Join(testenv.RepoRoot(), "config", "default"))
	kinds := map[string]int{}
	// Namespaces first, as kubectl applies them.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	for _, u := range objs {
		kinds[u.GetKind()]++
		opts := []client.CreateOption{client.DryRunAll}
		if u.GetKind() == "Namespace" {
			opts = nil // the namespaced objects' dry runs need it to exist
		}
		// CRDs (installed by the suite) and the Namespace (created by an earlier -count run) may exist.
		if err := env.Client.Create(ctx, u, opts...); err != nil && !((u.GetKind() == "CustomResourceDefinition" || u.GetKind() == "Namespace") && apierrors.IsAlreadyExists(err)) {
			t.Errorf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for _, k := range []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Deployment", "Namespace"} {
		if kinds[k] == 0 {
			t.Errorf("config/default has no %s", k)
		}
	}
}

// The samples apply cleanly and reach the conditions their comments promise.
func TestSamples(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	// The WireGuard sample exposes a Service by name.
	create(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "globex-app"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}},
	})
	dir := filepath.Join(testenv.RepoRoot(), "config", "samples")
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no samples")
	}
	for _, f := range files {
		for _, u := range readYAML(t, f) {
			u.SetNamespace(ns)
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("%s: %s %s: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
	acme := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme-gw"}}
	waitCondition(t, acme, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	waitCondition(t, acme, controller.ConditionGrantsValid, metav1.ConditionTrue, controller.ReasonNoConflicts)
	for _, p := range []string{"acme-hq", "acme-branch"} {
		peer := &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p}}
		waitCondition(t, peer, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
		waitCondition(t, peer, controller.ConditionCredentialsReady, metav1.ConditionTrue, controller.ReasonSecretsPresent)
	}
	globex := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "globex-wg"}}
	waitCondition(t, globex, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	waitCondition(t, &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "globex-office"}},
		vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonDefaultAllow)
	if globex.Status.ServiceCIDR != "100.64.200.0/24" {
		t.Errorf("globex-wg service CIDR %q, want the requested 100.64.200.0/24", globex.Status.ServiceCIDR)
	}

	// The ConfigMap carries the model alone, and the agent renders a dataplane from it; no
	// secret value is anywhere but its Secret.
	for _, gw := range []string{"acme-gw", "globex-wg"} {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: children.ConfigMapName(gw)}, cm); err != nil {
			t.Fatal(err)
		}
		if len(cm.Data) != 1 || cm.Data[render.KeyModel] == "" {
			t.Errorf("ConfigMap of %s holds %d keys, want only %s", gw, len(cm.Data), render.KeyModel)
		}
		b, err := render.FromConfigMapData(cm.Data, render.Options{})
		if err != nil {
			t.Fatalf("ConfigMap of %s: %v", gw, err)
		}
		if b.Ruleset == "" || (b.StrongSwan == nil) == (b.WireGuard == nil) {
			t.Errorf("%s renders to %+v", gw, b)
		}
	}
	assertNoSecretValues(t, ns)
}

// assertNoSecretValues scans the namespace's ConfigMaps, events and VPN objects (spec and
// status) for any Secret value.
func assertNoSecretValues(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	var secrets corev1.SecretList
	if err := env.Client.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, s := range secrets.Items {
		for _, v := range s.Data {
			if len(v) >= 8 {
				values = append(values, string(v))
			}
		}
	}
	if len(values) == 0 {
		t.Fatal("no secret values to look for")
	}
	lists := []client.ObjectList{&corev1.ConfigMapList{}, &eventsv1.EventList{}, &corev1.EventList{}, &vpnv1.VPNGatewayList{}, &vpnv1.VPNPeerList{}}
	for _, l := range lists {
		if err := env.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if bytes.Contains(raw, []byte(v)) {
				t.Errorf("a secret value appears in %T", l)
			}
		}
	}
}

// The shipped tenant roles grant what a client's team needs (gateways, peers, their Secrets,
// status) and none of the objects the operator owns in a gateway namespace: with those a tenant
// could run a NET_ADMIN pod, rewrite a gateway's model or widen its Role.
func TestTenantRolesGrantNoChildren(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "tenant_roles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{"pods": true, "pods/exec": true, "deployments": true, "replicasets": true, "configmaps": true,
		"services": true, "endpoints": true, "endpointslices": true, "networkpolicies": true, "roles": true, "rolebindings": true,
		"serviceaccounts": true, "serviceaccounts/token": true, "network-attachment-definitions": true, "clusterlinks": true, "*": true}
	names := map[string]bool{}
	for _, u := range objs {
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
			t.Fatal(err)
		}
		names[role.Name] = true
		granted := map[string]bool{}
		for _, r := range role.Rules {
			for _, res := range r.Resources {
				granted[res] = true
				if forbidden[res] {
					t.Errorf("%s grants %v on %s", role.Name, r.Verbs, res)
				}
			}
			if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Verbs, "*") {
				t.Errorf("%s has a wildcard rule %+v", role.Name, r)
			}
		}
		for _, need := range []string{"vpngateways", "vpnpeers", "vpngateways/status", "vpnpeers/status"} {
			if !granted[need] {
				t.Errorf("%s does not grant %s", role.Name, need)
			}
		}
	}
	if !names["bnerd-vpn-tenant-edit"] || !names["bnerd-vpn-tenant-view"] {
		t.Errorf("tenant roles shipped: %v", names)
	}
}
