package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// runningPod creates a pod in ns and gives it an address, as the kubelet would.
func runningPod(t testing.TB, ns, name, ip string, hostNetwork bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			HostNetwork:                  hostNetwork,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "client:test"}},
		},
	}
	create(t, p)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
	return p
}

// labelledNamespace creates a namespace with labels (cleaned up like namespace's).
func labelledNamespace(t testing.TB, suffix string, labels map[string]string) string {
	t.Helper()
	name := namespace(t)
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-") + "-" + suffix
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteAll(t, name)
		// envtest never removes a namespace: its labels would go on matching later tests' selectors.
		n := &corev1.Namespace{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Name: name}, n); err == nil && len(n.Labels) > 0 {
			patch := client.MergeFrom(n.DeepCopy())
			n.Labels = map[string]string{corev1.LabelMetadataName: name}
			_ = env.Client.Patch(context.Background(), n, patch)
		}
	})
	return name
}

// A reverse exposure is reached from its tenant only: the gateway's namespace and the
// namespaces it selects. The ruleset's clients are exactly those pods' addresses (not
// host-network pods, not another namespace's, not outside internalSourceCIDRs), following pods
// as they come and go; each exposure gets its <gateway>-<exposure> Service, listed in the
// status, and the NetworkPolicy admits the reverse ports from those namespaces only.
func TestReverseExposuresReachedFromTheirTenant(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	partner := labelledNamespace(t, "partner", map[string]string{"vpn.example.com/acme": "client"})
	stranger := labelledNamespace(t, "stranger", nil)

	runningPod(t, ns, "app", "10.244.1.10", false)
	runningPod(t, ns, "node-agent", "10.244.9.9", true) // host network: never a client
	runningPod(t, ns, "outside", "192.0.2.77", false)   // outside internalSourceCIDRs
	runningPod(t, partner, "reporting", "10.244.2.20", false)
	runningPod(t, stranger, "intruder", "10.244.3.30", false)

	gw := ipsecGateway(ns, "gw")
	gw.Spec.ReverseExposures[0].Target.Ports = vpnv1.Ports(vpnv1.PortSpec{Port: 1433}, vpnv1.PortSpec{Port: 161, TargetPort: 1161, Protocol: "udp"})
	gw.Spec.ReverseExposureNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"vpn.example.com/acme": "client"}}
	owner := gen.VPNPeer(ns, "owner", gen.RemoteSubnets("10.20.0.0/16"), gen.ReverseGrants("erp"))
	create(t, gw, pskSecret(ns, "owner"), owner)

	expectClients := func(want ...string) {
		t.Helper()
		eventually(t, 20*time.Second, func() error {
			m, err := renderedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			var got []string
			for _, a := range m.ReverseClients {
				got = append(got, a.String())
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("reverse clients %v, want %v", got, want)
			}
			return nil
		})
	}
	expectClients("10.244.1.10", "10.244.2.20")

	t.Run("the exposure's Service sends its ports to the gateway ports, and the status names it", func(t *testing.T) {
		svc := &corev1.Service{}
		eventually(t, 20*time.Second, func() error {
			return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gw-erp"}, svc)
		})
		var got []string
		for _, p := range svc.Spec.Ports {
			got = append(got, fmt.Sprintf("%s %d->%s", p.Protocol, p.Port, p.TargetPort.String()))
		}
		if want := []string{"TCP 1433->20000", "UDP 161->20001"}; !slices.Equal(got, want) {
			t.Errorf("Service ports %v, want %v", got, want)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Selector[children.LabelGateway] != "gw" {
			t.Errorf("Service type %s selector %v", svc.Spec.Type, svc.Spec.Selector)
		}
		// The host-network gateway translates the Service itself for clients on its node.
		eventually(t, 20*time.Second, func() error {
			m, err := renderedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			if got := m.ReverseExposures[0].ServiceIP.String(); got != svc.Spec.ClusterIP {
				return fmt.Errorf("model Service IP %s, want the ClusterIP %s", got, svc.Spec.ClusterIP)
			}
			return nil
		})
		eventually(t, 20*time.Second, func() error {
			cur := &vpnv1.VPNGateway{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
				return err
			}
			if len(cur.Status.ReverseExposures) != 1 {
				return fmt.Errorf("status reverse exposures %+v", cur.Status.ReverseExposures)
			}
			r := cur.Status.ReverseExposures[0]
			if r.Service != "gw-erp" || !slices.Equal(r.Ports, []string{"1433/TCP", "161/UDP"}) || r.VirtualIP == "" {
				return fmt.Errorf("status reverse exposure %+v", r)
			}
			return nil
		})
	})

	t.Run("the NetworkPolicy admits the reverse ports from the tenant's namespaces only", func(t *testing.T) {
		np := &networkingv1.NetworkPolicy{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("gw")}, np); err != nil {
			t.Fatal(err)
		}
		var rule *networkingv1.NetworkPolicyIngressRule
		for i, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port != nil && *p.Port == intstr.FromInt32(20000) {
					rule = &np.Spec.Ingress[i]
				}
			}
		}
		if rule == nil {
			t.Fatalf("no ingress rule for gateway port 20000: %+v", np.Spec.Ingress)
		}
		if len(rule.From) != 2 || rule.From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != ns ||
			rule.From[1].NamespaceSelector.MatchLabels["vpn.example.com/acme"] != "client" {
			t.Errorf("reverse rule from %+v", rule.From)
		}
		for _, f := range rule.From {
			if f.IPBlock != nil {
				t.Errorf("reverse rule admits an IP block %s", f.IPBlock.CIDR)
			}
		}
	})

	t.Run("pods that come and go, and a namespace labelled in, change the clients", func(t *testing.T) {
		late := runningPod(t, ns, "late", "10.244.1.11", false)
		expectClients("10.244.1.10", "10.244.1.11", "10.244.2.20")
		if err := env.Client.Delete(ctx, late); err != nil {
			t.Fatal(err)
		}
		expectClients("10.244.1.10", "10.244.2.20")
		nsObj := &corev1.Namespace{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: stranger}, nsObj); err != nil {
			t.Fatal(err)
		}
		nsObj.Labels = map[string]string{"vpn.example.com/acme": "client"}
		if err := env.Client.Update(ctx, nsObj); err != nil {
			t.Fatal(err)
		}
		expectClients("10.244.1.10", "10.244.2.20", "10.244.3.30")
	})

	t.Run("a removed reverse exposure's Service is deleted", func(t *testing.T) {
		cur := &vpnv1.VPNGateway{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.ReverseExposures[0].Name = "erp2"
		if err := env.Client.Patch(ctx, cur, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, func() error {
			var list corev1.ServiceList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return err
			}
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			if !slices.Equal(names, []string{"gw-erp2"}) {
				return fmt.Errorf("Services %v, want only gw-erp2", names)
			}
			return nil
		})
	})
}

// A reverse exposure's Service name taken by something else is never taken over: the gateway
// says so (GrantsValid=False, ReverseServiceConflict) and the other Service stays as it was.
func TestReverseServiceNameTaken(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw-erp", Labels: map[string]string{"app": "theirs"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "theirs"}},
	}
	create(t, theirs)
	gw := ipsecGateway(ns, "gw")
	create(t, gw, pskSecret(ns, "owner"), gen.VPNPeer(ns, "owner", gen.RemoteSubnets("10.20.0.0/16"), gen.ReverseGrants("erp")))
	c := waitCondition(t, gw, controller.ConditionGrantsValid, metav1.ConditionFalse, controller.ReasonReverseServiceConflict)
	if !strings.Contains(c.Message, "gw-erp") {
		t.Errorf("condition %q does not name the Service", c.Message)
	}
	got := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Selector["app"] != "theirs" || len(got.OwnerReferences) != 0 || got.Spec.Ports[0].Port != 80 {
		t.Errorf("the other Service was changed: %+v", got)
	}
}
