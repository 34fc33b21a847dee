package operator_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/manifests"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// The operator installed by the chart with operator.gatewayNamespaces=[tenant-a] runs as its
// ServiceAccount with exactly the RBAC the chart renders for that (a ClusterRole without
// Secrets, a Role with the Secret rule in tenant-a) and the flag the chart gives it. In tenant-a
// a gateway with a PSK peer gets as far as envtest allows (no kubelet: no pod): its peer's
// credentials are checked, the endpoint, addresses and configuration are ready and its children
// rendered, its Role granting get on the peer's Secret. A gateway in tenant-b is left alone: no
// finalizer, no status, no children, and nothing the operator logs names a refused request. The
// operator's token cannot read tenant-b's Secrets.
func TestGatewayNamespacesWithTheChartsRBAC(t *testing.T) {
	ctx := context.Background()
	opNS := namespace(t, "op")
	tenantA := namespace(t, "tenant-a")
	tenantB := namespace(t, "tenant-b")
	// Both may put gateways on a node's network (the admin's label, the default selector).
	for _, ns := range []string{tenantA, tenantB} {
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["vpn.bnerd.net/host-network"] = "allowed"
		if err := env.Client.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	// The chart's RBAC and ServiceAccount for operator.gatewayNamespaces=[tenant-a], installed
	// in opNS, and the operator's flags.
	objs := renderChart(t, opNS, "--set", "operator.gatewayNamespaces={"+tenantA+"}",
		"--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/deployment.yaml")
	var args []string
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			args, _, _ = unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
			continue
		case "ClusterRole", "ClusterRoleBinding":
			// Cluster-wide: replaced by this run's, and removed after it.
			_ = env.Client.Delete(ctx, u.DeepCopy())
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u.DeepCopy()) })
		}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	var served []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--gateway-namespaces="); ok {
			served = strings.Split(v, ",")
		}
	}
	if !slices.Equal(served, []string{tenantA}) {
		t.Fatalf("the chart's operator args %q: want --gateway-namespaces=%s", args, tenantA)
	}

	// The operator's token, as its pod would hold it.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(opNS).CreateToken(ctx, "bnerd-vpn-operator",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saCfg := rest.AnonymousClientConfig(env.Config)
	saCfg.BearerToken = tok.Status.Token
	saCfg.QPS, saCfg.Burst = env.Config.QPS, env.Config.Burst
	asOperator, err := client.New(saCfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	operatorUser := "system:serviceaccount:" + opNS + ":bnerd-vpn-operator"

	// tenant-b's gateway exists before the operator starts, tenant-a's after.
	node := "node-" + tenantA
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "198.51.100.10"}}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	gateway := func(ns string) *vpnv1.VPNGateway {
		return gen.VPNGateway(ns, "gw", gen.HostNetwork(node, "198.51.100.10"), gen.Exposure("api", "192.0.2.10", gen.Port(443)))
	}
	gwB := gateway(tenantB)
	for _, o := range []client.Object{gwB, gen.PSKSecret(tenantB, "site", "test-psk-b"), gen.VPNPeer(tenantB, "site", gen.Grants("api"))} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	logs := &logCapture{}
	log := logs.logger()
	klog.SetLogger(log) // client-go's own errors (a refused list or watch)
	t.Cleanup(klog.ClearLogger)
	r := newRunner(t, opNS, saCfg, true)
	r.Log = log.WithName("runner")
	r.Config.Logger = log.WithName("manager")
	r.Config.GatewayNamespaces = served
	if r.Config.HostNetworkNamespaces, err = labels.Parse(controller.DefaultHostNetworkNamespaces); err != nil {
		t.Fatal(err)
	}
	start(t, r)
	waitLeader(t, opNS, r, 60*time.Second)

	gwA := gateway(tenantA)
	peerA := gen.VPNPeer(tenantA, "site", gen.Grants("api"))
	for _, o := range []client.Object{gwA, gen.PSKSecret(tenantA, "site", "test-psk-a"), peerA} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, 60*time.Second, func() error {
		var peer vpnv1.VPNPeer
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(peerA), &peer); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(peer.Status.Conditions, controller.ConditionCredentialsReady); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != peer.Generation {
			return fmt.Errorf("peer %s/%s: CredentialsReady %+v", peer.Namespace, peer.Name, c)
		}
		var gw vpnv1.VPNGateway
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gwA), &gw); err != nil {
			return err
		}
		if gw.Status.ObservedGeneration != gw.Generation {
			return fmt.Errorf("gateway %s/%s: observed generation %d of %d", gw.Namespace, gw.Name, gw.Status.ObservedGeneration, gw.Generation)
		}
		// Everything but the pod (envtest runs no kubelet), and Ready, which waits for it.
		for _, typ := range []string{vpnv1.ConditionConfigValid, vpnv1.ConditionAddressesAllocated, vpnv1.ConditionEndpointReady, vpnv1.ConditionRendered} {
			if c := meta.FindStatusCondition(gw.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("gateway %s/%s: %s %+v", gw.Namespace, gw.Name, typ, c)
			}
		}
		if c := meta.FindStatusCondition(gw.Status.Conditions, vpnv1.ConditionGatewayAvailable); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("gateway %s/%s: GatewayAvailable %+v, want False (no pod in envtest)", gw.Namespace, gw.Name, c)
		}
		if !slices.Contains(gw.Finalizers, controller.FinalizerAddresses) {
			return fmt.Errorf("gateway %s/%s: finalizers %v", gw.Namespace, gw.Name, gw.Finalizers)
		}
		return nil
	})

	// The gateway's Role grants get on the peer's Secret by name, and its ServiceAccount may
	// get it (the operator could grant it only holding it: its Role in tenant-a).
	var role rbacv1.Role
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: children.Name("gw")}, &role); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Equal(r.Resources, []string{"secrets"}) && slices.Equal(r.ResourceNames, []string{"site-psk"}) && slices.Contains(r.Verbs, "get")
	}) {
		t.Errorf("the gateway's Role %v grants no get on the Secret site-psk", role.Rules)
	}
	gatewaySA := "system:serviceaccount:" + tenantA + ":" + children.Name("gw")
	expectAccess(t, cs, gatewaySA, authorizationv1.ResourceAttributes{Namespace: tenantA, Verb: "get", Resource: "secrets", Name: "site-psk"}, true)

	// The operator's own access: Secrets in tenant-a, none in tenant-b, none cluster-wide.
	expectAccess(t, cs, operatorUser, authorizationv1.ResourceAttributes{Namespace: tenantA, Verb: "get", Resource: "secrets", Name: "site-psk"}, true)
	expectAccess(t, cs, operatorUser, authorizationv1.ResourceAttributes{Namespace: tenantB, Verb: "get", Resource: "secrets", Name: "site-psk"}, false)
	expectAccess(t, cs, operatorUser, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false)
	if err := asOperator.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "site-psk"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's token getting tenant-b's Secret: %v, want Forbidden", err)
	}
	if err := asOperator.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "site-psk"}, &corev1.Secret{}); err != nil {
		t.Errorf("the operator's token getting tenant-a's Secret: %v", err)
	}

	// tenant-b: untouched, by the time tenant-a's gateway (created later) was done.
	var b vpnv1.VPNGateway
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gwB), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Finalizers) != 0 || len(b.Status.Conditions) != 0 || b.Status.ObservedGeneration != 0 || b.Status.ServiceCIDR != "" {
		t.Errorf("tenant-b's gateway was touched: finalizers %v, status %+v", b.Finalizers, b.Status)
	}
	var peerB vpnv1.VPNPeer
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "site"}, &peerB); err != nil {
		t.Fatal(err)
	}
	if len(peerB.Status.Conditions) != 0 {
		t.Errorf("tenant-b's peer has status %+v", peerB.Status)
	}
	for _, kid := range []client.Object{&appsv1.Deployment{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &networkingv1.NetworkPolicy{}} {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: children.Name("gw")}, kid); !apierrors.IsNotFound(err) {
			t.Errorf("tenant-b: %T %s: %v, want NotFound", kid, children.Name("gw"), err)
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: children.ConfigMapName("gw")}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("tenant-b: ConfigMap %s: %v, want NotFound", children.ConfigMapName("gw"), err)
	}
	var events corev1.EventList
	if err := env.Client.List(ctx, &events, client.InNamespace(tenantB)); err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 0 {
		t.Errorf("tenant-b has %d events, the first: %s %s", len(events.Items), events.Items[0].Reason, events.Items[0].Message)
	}
	// Nothing the operator logged was a refused request, nor named tenant-b.
	for _, l := range logs.lines() {
		if strings.Contains(strings.ToLower(l), "forbidden") || strings.Contains(l, tenantB) {
			t.Errorf("the operator logged: %s", l)
		}
	}
	t.Logf("%d log lines, none forbidden or about %s", len(logs.lines()), tenantB)
}

// renderChart is `helm template` of the chart in namespace with extra arguments (helm from
// hack/helm.sh, as the chart's tests run it).
func renderChart(t *testing.T, namespace string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	root := testenv.RepoRoot()
	out, err := exec.Command(filepath.Join(root, "hack", "helm.sh")).Output()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	args := append([]string{"template", "bnerd-vpn-operator", filepath.Join(root, "charts", "bnerd-vpn-operator"),
		"--namespace", namespace, "--kube-version", "1.37.2"}, extra...)
	cmd := exec.Command(strings.TrimSpace(string(out)), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	rendered, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, rendered)
	}
	objs, err := manifests.Decode(rendered)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// expectAccess checks with a SubjectAccessReview whether user may do what attrs say.
func expectAccess(t *testing.T, cs kubernetes.Interface, user string, attrs authorizationv1.ResourceAttributes, allowed bool) {
	t.Helper()
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + strings.Split(user, ":")[2], "system:authenticated"}
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sar.Status.Allowed != allowed {
		t.Errorf("%s may %s %s %q in %q: %v (%s), want %v", user, attrs.Verb, attrs.Resource, attrs.Name, attrs.Namespace, sar.Status.Allowed, sar.Status.Reason, allowed)
	}
}

// logCapture keeps every line a logger wrote.
type logCapture struct {
	mu  sync.Mutex
	buf []string
}

func (c *logCapture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.buf = append(c.buf, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (c *logCapture) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.buf)
}

func ptr[T any](v T) *T { return &v }
