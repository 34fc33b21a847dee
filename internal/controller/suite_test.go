package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wait"
)

// env is one real kube-apiserver + etcd shared by the package's tests; each test starts its
// own operator and works in its own namespace.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

// operatorConfig is the configuration tests run the operator with.
func operatorConfig() operator.Config {
	return operator.Config{
		Options: controller.Options{
			Model: model.Config{
				PoolCIDR:            model.DefaultPoolCIDR,
				InternalSourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
			},
			Render: children.Options{AgentImage: "agent:test", StrongSwanImage: "strongswan:test", ImagePullPolicy: corev1.PullNever},
			// Host-network gateways everywhere (TestHostNetworkNeedsThePermission narrows it).
			HostNetworkNamespaces: labels.Everything(),
		},
		Concurrency: 4,
		MetricsAddr: "0",
		HealthAddr:  "0",

		SkipControllerNameValidation: true,
	}
}

// startOperator runs the operator against env until the returned stop is called (or the test ends).
func startOperator(t testing.TB, cfg operator.Config, restCfg *rest.Config) (stop func()) {
	t.Helper()
	if restCfg == nil {
		restCfg = env.Config
	}
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := operator.NewManager(ctx, restCfg, cfg)
	if err != nil {
		cancel()
		t.Fatalf("operator: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator stopped with error: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

var nsCounter atomic.Int32

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	// Registered after the test's operator started, so it runs while the operator still runs
	// (cleanups run last-in first-out) and the gateways' finalizers are honoured.
	t.Cleanup(func() { deleteAll(t, name) })
	return name
}

// deleteAll deletes the namespace's gateways and peers so later tests' operators do not work
// on them (envtest has no namespace controller). The test's operator may already be stopped,
// so finalizers are removed here; tests that check the operator's release do so themselves.
func deleteAll(t testing.TB, ns string) {
	ctx := context.Background()
	// Pods too (at once: envtest has no kubelet): a later test's selectors must not find them.
	_ = env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
	_ = env.Client.DeleteAllOf(ctx, &vpnv1.VPNPeer{}, client.InNamespace(ns))
	_ = env.Client.DeleteAllOf(ctx, &vpnv1.VPNGateway{}, client.InNamespace(ns))
	var list vpnv1.VPNGatewayList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Errorf("cleanup of %s: %v", ns, err)
		return
	}
	for i := range list.Items {
		gw := &list.Items[i]
		patch := client.MergeFrom(gw.DeepCopy())
		gw.Finalizers = nil
		if err := env.Client.Patch(ctx, gw, patch); client.IgnoreNotFound(err) != nil {
			t.Errorf("cleanup of %s/%s: %v", ns, gw.Name, err)
		}
	}
}

// eventually polls cond until it returns nil or the deadline passes, then fails with its last error.
func eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	poll(t, timeout, 50*time.Millisecond, cond)
}

// poll is eventually with a chosen interval (for conditions that are expensive to check).
func poll(t testing.TB, timeout, interval time.Duration, cond func() error) {
	t.Helper()
	if err := wait.Every(timeout, interval, cond); err != nil {
		t.Fatalf("condition not met within %s: %v", timeout, err)
	}
}

// condition reads a condition of obj from the API server.
func condition(ctx context.Context, obj client.Object, t string) (*metav1.Condition, error) {
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	var conds []metav1.Condition
	switch o := obj.(type) {
	case *vpnv1.VPNGateway:
		conds = o.Status.Conditions
	case *vpnv1.VPNPeer:
		conds = o.Status.Conditions
	case *ipsecv1.ClusterLink:
		conds = o.Status.Conditions
	}
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return nil, fmt.Errorf("%s %s has no %s condition yet", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), t)
	}
	return c, nil
}

// waitMessage waits until obj's condition t has the given status, reason and message.
func waitMessage(t testing.TB, obj client.Object, typ string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		c, err := condition(context.Background(), obj, typ)
		if err != nil {
			return err
		}
		if c.Status != status || c.Reason != reason || c.Message != message {
			return fmt.Errorf("%s %s: %s=%s/%s (%q), want %s/%s (%q)", obj.GetNamespace(), obj.GetName(), typ, c.Status, c.Reason, c.Message, status, reason, message)
		}
		return nil
	})
}

// waitCondition waits until obj's condition t has the given status and reason, returning it.
func waitCondition(t testing.TB, obj client.Object, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	eventually(t, 20*time.Second, func() error {
		c, err := condition(context.Background(), obj, typ)
		if err != nil {
			return err
		}
		if c.Status != status || c.Reason != reason {
			return fmt.Errorf("%s %s: %s=%s/%s (%q), want %s/%s", obj.GetNamespace(), obj.GetName(), typ, c.Status, c.Reason, c.Message, status, reason)
		}
		got = c
		return nil
	})
	return got
}
