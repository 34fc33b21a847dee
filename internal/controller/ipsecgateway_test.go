package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/status"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/loadbalancer"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/legacy"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// legacyGateway is the legacy form of ipsecGateway (host network, two exposures, one reverse
// exposure) with two tunnels; the reverse exposure's target lies in hq's subnets.
func legacyGateway(ns, name, node string) *ipsecv1.IPsecGateway {
	u := ipsecGateway(ns, name)
	u.Spec.Endpoint.HostNetwork.NodeName = node
	return &ipsecv1.IPsecGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ipsecv1.IPsecGatewaySpec{
			Endpoint:         u.Spec.Endpoint,
			Exposures:        u.Spec.Exposures,
			ReverseExposures: u.Spec.ReverseExposures,
			Tunnels: []ipsecv1.Tunnel{
				{Name: "hq", Peer: vpnv1.IPsecRemote{Address: "203.0.113.9", ID: "hq.example.com"},
					RemoteSubnets: []string{"10.20.0.0/16"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"}},
				{Name: "branch", Peer: vpnv1.IPsecRemote{Address: "203.0.113.10", ID: "branch.example.com"},
					RemoteSubnets: []string{"10.30.0.0/16"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "branch-psk", Key: "psk"}},
			},
		},
	}
}

// legacyCondition waits until the IPsecGateway's condition typ has the status and reason.
func legacyCondition(t testing.TB, g *ipsecv1.IPsecGateway, typ string, st metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		c := meta.FindStatusCondition(g.Status.Conditions, typ)
		if c == nil || c.Status != st || c.Reason != reason {
			return fmt.Errorf("IPsecGateway %s: %s is %+v, want %s/%s", g.Name, typ, c, st, reason)
		}
		got = c
		return nil
	})
	return got
}

// deleteLegacy removes the namespace's IPsecGateways (finalizers included) after the test.
func deleteLegacy(t testing.TB, ns string) {
	t.Cleanup(func() {
		ctx := context.Background()
		_ = env.Client.DeleteAllOf(ctx, &ipsecv1.IPsecGateway{}, client.InNamespace(ns))
		var list ipsecv1.IPsecGatewayList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return
		}
		for i := range list.Items {
			g := &list.Items[i]
			patch := client.MergeFrom(g.DeepCopy())
			g.Finalizers = nil
			_ = env.Client.Patch(ctx, g, patch)
		}
	})
}

// rendered is what the comparison looks at: the model (without what names the declaring
// object), the pod spec, the NetworkPolicy's rules and the Role's rules for config and Secrets.
type rendered struct {
	Model          string
	PodSpec        string
	Policy         string
	RoleConfigRule []rbacv1.PolicyRule
}

func renderedChildren(t testing.TB, ns, deployment, configMap string) rendered {
	t.Helper()
	ctx := context.Background()
	var out rendered
	m := &model.Gateway{}
	// The reverse exposures' Service addresses come in a later pass than the first model.
	eventually(t, 20*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: configMap}, cm); err != nil {
			return err
		}
		*m = model.Gateway{}
		if err := json.Unmarshal([]byte(cm.Data[children.ModelKey]), m); err != nil {
			return err
		}
		for _, r := range m.ReverseExposures {
			if !r.ServiceIP.IsValid() {
				return fmt.Errorf("reverse exposure %s has no Service address yet", r.Name)
			}
		}
		return nil
	})
	m.Kind, m.UID = "", ""
	for i := range m.Peers {
		m.Peers[i].UID = ""
	}
	for i := range m.ReverseExposures {
		m.ReverseExposures[i].ServiceIP = netip.Addr{} // each Service gets its own ClusterIP
	}
	raw, _ := json.MarshalIndent(m, "", " ")
	out.Model = string(raw)
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: deployment}, d); err != nil {
		t.Fatal(err)
	}
	// The agent and its init step are told the gateway's kind: the one difference there is.
	spec := d.Spec.Template.Spec.DeepCopy()
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if j := slices.Index(cs[i].Args, "--gateway-kind"); j >= 0 {
				cs[i].Args = slices.Delete(cs[i].Args, j, j+2)
			}
		}
	}
	raw, _ = json.Marshal(spec)
	out.PodSpec = strings.NewReplacer(deployment, "NAME", configMap, "CONFIG").Replace(string(raw))
	np := &networkingv1.NetworkPolicy{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: deployment}, np); err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal([]any{np.Spec.Ingress, np.Spec.Egress, np.Spec.PolicyTypes})
	out.Policy = string(raw)
	role := &rbacv1.Role{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: deployment}, role); err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "events") {
			out.RoleConfigRule = append(out.RoleConfigRule, r)
		}
	}
	return out
}

func ownedByUID(t testing.TB, o client.Object, kind string, uid types.UID) {
	t.Helper()
	refs := o.GetOwnerReferences()
	if len(refs) != 1 || refs[0].Kind != kind || refs[0].UID != uid || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("%T %s: owners %+v, want one controller reference to %s %s", o, o.GetName(), refs, kind, uid)
	}
}

// A legacy IPsecGateway reconciles to the children of its unified equivalent (the VPNGateway
// and VPNPeers Translate gives): the same model, pod, NetworkPolicy rules and Secret grants,
// all owned by the IPsecGateway. Deleting it releases its service CIDR: the unified gateway
// created next claims the very same one.
func TestLegacyGatewayRendersAsItsUnifiedEquivalent(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	deleteLegacy(t, ns)
	g := legacyGateway(ns, "acme", "node-legacy-a")
	g.Spec.ServiceCIDR = "100.64.231.0/24"
	create(t, pskSecret(ns, "hq"), pskSecret(ns, "branch"), g)
	legacyCondition(t, g, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	legacyCondition(t, g, controller.ConditionGrantsValid, metav1.ConditionTrue, controller.ReasonNoConflicts)

	name, cmName := children.NameFor(model.KindIPsecGateway, "acme"), children.ConfigMapNameFor(model.KindIPsecGateway, "acme")
	for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &networkingv1.NetworkPolicy{}} {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, o); err != nil {
			t.Fatalf("%T %s: %v", o, name, err)
		}
		ownedByUID(t, o, "IPsecGateway", g.UID)
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: cmName}, cm); err != nil {
		t.Fatal(err)
	}
	ownedByUID(t, cm, "IPsecGateway", g.UID)
	rev := &corev1.Service{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ReverseServiceName("acme", "erp")}, rev); err != nil {
		t.Fatal(err)
	}
	ownedByUID(t, rev, "IPsecGateway", g.UID)
	legacyOut := renderedChildren(t, ns, name, cmName)
	if !strings.Contains(legacyOut.Model, `"hq"`) || !strings.Contains(legacyOut.Model, `"branch"`) {
		t.Fatalf("the legacy model lacks its tunnels:\n%s", legacyOut.Model)
	}

	// Deleting the legacy gateway releases its service CIDR (and its children go with it).
	if err := env.Client.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), &ipsecv1.IPsecGateway{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("legacy gateway still there (%v)", err)
		}
		return nil
	})

	// envtest runs no garbage collector: remove the children as it would.
	for _, o := range []client.Object{rev, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}} {
		if err := env.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}

	// The unified equivalent, same name and namespace, claims the same service CIDR.
	gw, peers := legacy.Translate(g)
	unified := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme"}, Spec: gw.Spec}
	create(t, unified)
	for i := range peers {
		create(t, &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: peers[i].Name}, Spec: peers[i].Spec})
	}
	waitCondition(t, unified, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	waitCondition(t, unified, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	eventually(t, 20*time.Second, func() error {
		m, err := renderedModel(ctx, ns, "acme")
		if err != nil {
			return err
		}
		if len(m.Peers) != 2 || len(m.ReverseExposures) != 1 || !m.ReverseExposures[0].ServiceIP.IsValid() {
			return fmt.Errorf("%d peers rendered, reverse exposures %+v", len(m.Peers), m.ReverseExposures)
		}
		return nil
	})
	unifiedOut := renderedChildren(t, ns, children.Name("acme"), children.ConfigMapName("acme"))
	if legacyOut.Model != unifiedOut.Model {
		t.Errorf("models differ\nlegacy:\n%s\nunified:\n%s", legacyOut.Model, unifiedOut.Model)
	}
	if legacyOut.PodSpec != unifiedOut.PodSpec {
		t.Errorf("pod specs differ\nlegacy:  %s\nunified: %s", legacyOut.PodSpec, unifiedOut.PodSpec)
	}
	if legacyOut.Policy != unifiedOut.Policy {
		t.Errorf("network policies differ\nlegacy:  %s\nunified: %s", legacyOut.Policy, unifiedOut.Policy)
	}
	if fmt.Sprint(legacyOut.RoleConfigRule) != fmt.Sprint(unifiedOut.RoleConfigRule) {
		t.Errorf("role rules differ\nlegacy:  %v\nunified: %v", legacyOut.RoleConfigRule, unifiedOut.RoleConfigRule)
	}
}

// A VPNGateway and an IPsecGateway of the same name in one namespace: each gets its own
// children, owned by itself, its own service CIDR, and neither is told of a conflict.
func TestLegacyAndUnifiedGatewayOfTheSameName(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	deleteLegacy(t, ns)
	g := legacyGateway(ns, "acme", "node-same-a")
	u := ipsecGateway(ns, "acme")
	u.Spec.Endpoint.HostNetwork.NodeName = "node-same-b"
	u.Spec.ReverseExposures = nil // "<gateway>-<exposure>" Services are first come, first served
	create(t, pskSecret(ns, "hq"), pskSecret(ns, "branch"), pskSecret(ns, "site"), g, u,
		gen.VPNPeer(ns, "site", gen.OnGateway("acme"), gen.RemoteSubnets("10.40.0.0/16")))
	legacyCondition(t, g, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	legacyCondition(t, g, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	waitCondition(t, u, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	waitCondition(t, u, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	if g.Status.ServiceCIDR == "" || g.Status.ServiceCIDR == u.Status.ServiceCIDR {
		t.Errorf("service CIDRs: legacy %q, unified %q", g.Status.ServiceCIDR, u.Status.ServiceCIDR)
	}
	for _, c := range []struct {
		name, kind string
		uid        types.UID
		obj        client.Object
	}{
		{children.Name("acme"), "VPNGateway", u.UID, &appsv1.Deployment{}},
		{children.ConfigMapName("acme"), "VPNGateway", u.UID, &corev1.ConfigMap{}},
		{children.NameFor(model.KindIPsecGateway, "acme"), "IPsecGateway", g.UID, &appsv1.Deployment{}},
		{children.ConfigMapNameFor(model.KindIPsecGateway, "acme"), "IPsecGateway", g.UID, &corev1.ConfigMap{}},
	} {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: c.name}, c.obj); err != nil {
			t.Fatalf("%T %s: %v", c.obj, c.name, err)
		}
		ownedByUID(t, c.obj, c.kind, c.uid)
	}
	m, err := renderedModel(ctx, ns, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Peers) != 1 || m.Peers[0].Name != "site" || m.Kind != "" {
		t.Errorf("the VPNGateway's model: kind %q, peers %+v", m.Kind, m.Peers)
	}
}

// A legacy host-network gateway holds its node against a younger VPNGateway (the one
// gateway per node rule spans both kinds), and releasing it (the migration's annotation)
// hands the node over at once: its pod goes, the VPNGateway's comes; the released gateway's
// finalizer goes, it says Migrated, and the new gateway can claim its service CIDR.
func TestLegacyHostNetworkNodeAndMigration(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	deleteLegacy(t, ns)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-migrate"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	g := legacyGateway(ns, "acme", "node-migrate")
	create(t, pskSecret(ns, "hq"), pskSecret(ns, "branch"), g)
	legacyCondition(t, g, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	legacyCondition(t, g, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	if !slices.Contains(g.Finalizers, controller.FinalizerAddresses) || g.Status.ServiceCIDR == "" || g.Status.PublicAddress != "198.51.100.10" {
		t.Fatalf("legacy gateway: finalizers %v, status %+v", g.Finalizers, g.Status)
	}
	if len(g.Status.Exposures) != 2 || g.Status.Exposures[0].VirtualIP == "" {
		t.Errorf("exposures' virtual IPs: %+v", g.Status.Exposures)
	}

	u := ipsecGateway(ns, "acme")
	u.Spec.Endpoint.HostNetwork.NodeName = "node-migrate"
	u.Spec.ServiceCIDR = g.Status.ServiceCIDR // what kubectl vpn migrate carries over
	create(t, u)
	c := waitCondition(t, u, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonConflict)
	if !strings.Contains(c.Message, "IPsecGateway "+ns+"/acme") {
		t.Errorf("conflict message %q does not name the legacy gateway", c.Message)
	}

	patch := client.MergeFrom(g.DeepCopy())
	if g.Annotations == nil {
		g.Annotations = map[string]string{}
	}
	g.Annotations[ipsecv1.AnnotationMigratedTo] = "acme"
	if err := env.Client.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	legacyCondition(t, g, vpnv1.ConditionReady, metav1.ConditionFalse, controller.ReasonMigrated)
	if slices.Contains(g.Finalizers, controller.FinalizerAddresses) {
		t.Errorf("a released gateway keeps its finalizer")
	}
	eventually(t, 20*time.Second, func() error {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.NameFor(model.KindIPsecGateway, "acme")}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the released gateway's Deployment is still there (%v)", err)
		}
		return nil
	})
	waitCondition(t, u, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	waitCondition(t, u, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	waitCondition(t, u, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	t.Logf("the VPNGateway took the node %s after the release", time.Since(released).Round(100*time.Millisecond))
	if u.Status.ServiceCIDR != g.Status.ServiceCIDR {
		t.Errorf("the new gateway's service CIDR %s, the legacy one's %s", u.Status.ServiceCIDR, g.Status.ServiceCIDR)
	}

	// No longer reconciled: a spec change renders nothing.
	cmName := children.ConfigMapNameFor(model.KindIPsecGateway, "acme")
	patch = client.MergeFrom(g.DeepCopy())
	g.Spec.Exposures = g.Spec.Exposures[:1]
	if err := env.Client.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: cmName}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("a released gateway got a ConfigMap again (%v)", err)
	}
	// Deleting it releases nothing: it is gone at once (no finalizer), the new gateway stays Ready.
	if err := env.Client.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), &ipsecv1.IPsecGateway{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	waitCondition(t, u, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	waitCondition(t, u, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
}

// A migration hands the legacy gateway's floating IP — pinned or allocated from a pool — to the
// VPNGateway pinned to it: on release the legacy port and security group go and the address is
// disassociated and untagged, never released; the new gateway, waiting in Conflict (no pod) until
// then, adopts it within its cutover recheck. Deleting the legacy CR afterwards touches nothing.
func TestMigratedLegacyGatewayHandsItsFloatingIPOver(t *testing.T) {
	for _, pool := range []bool{false, true} {
		t.Run(map[bool]string{false: "pinned", true: "pool"}[pool], func(t *testing.T) { testFloatingIPHandOver(t, pool) })
	}
}

func testFloatingIPHandOver(t *testing.T, pool bool) {
	installNADCRD(t)
	osc := newTestCloud(t)
	fake, extNet := osc.fake, osc.extNet
	fake.AddFloatingIP(extNet, "203.0.113.78", "")
	osc.startOperator(t, openstack.Config{CutoverRetry: time.Second})
	ctx := context.Background()
	ns := namespace(t)
	deleteLegacy(t, ns)
	g := legacyGateway(ns, "acme", "")
	g.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: "203.0.113.78"}
	if pool {
		g.Spec.Endpoint = vpnv1.Endpoint{FloatingIPPool: extNet}
	}
	create(t, pskSecret(ns, "hq"), pskSecret(ns, "branch"), g)
	legacyCondition(t, g, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	addr := g.Status.PublicAddress
	fip, ok := fake.FloatingIPByAddress(addr)
	if !ok || fip.PortID == nil || *fip.PortID == "" {
		t.Fatalf("floating IP %s %+v (found %v): not on the legacy gateway's port", addr, fip, ok)
	}
	legacyPort := *fip.PortID
	fips := fake.Inventory().FloatingIPs

	// the successor, pinned to the address, waits in Conflict and runs no pod
	gw := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acme"}, Spec: vpnv1.VPNGatewaySpec{
		Protocol: vpnv1.ProtocolIPsec, ServiceCIDR: g.Status.ServiceCIDR,
		Endpoint: vpnv1.Endpoint{FloatingIP: addr},
	}}
	create(t, gw)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonConflict)
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionFalse, controller.ReasonEndpointBlocked)

	patch := client.MergeFrom(g.DeepCopy())
	g.Annotations = map[string]string{ipsecv1.AnnotationMigratedTo: "acme"}
	if err := env.Client.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	legacyCondition(t, g, vpnv1.ConditionReady, metav1.ConditionFalse, controller.ReasonMigrated)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	if gw.Status.PublicAddress != addr {
		t.Fatalf("the successor's public address %q, want %s", gw.Status.PublicAddress, addr)
	}
	fake.WaitIdle()
	after, ok := fake.FloatingIPByAddress(addr)
	switch {
	case !ok:
		t.Fatal("the floating IP was released")
	case after.PortID == nil || *after.PortID == legacyPort:
		t.Fatalf("floating IP %+v: not on the successor's port", after)
	case fake.Inventory().FloatingIPs != fips:
		t.Errorf("floating IPs %d, want %d (none released, none allocated)", fake.Inventory().FloatingIPs, fips)
	}
	for _, port := range fake.PortList() {
		if port.ID == legacyPort {
			t.Errorf("the legacy gateway's port %s is left behind", legacyPort)
		}
	}

	// deleting the released legacy CR touches nothing
	before := fake.Inventory()
	if err := env.Client.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), &ipsecv1.IPsecGateway{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	fake.WaitIdle()
	if inv := fake.Inventory(); inv != before {
		t.Errorf("deleting the released CR changed the cloud: before %+v, after %+v", before, inv)
	}
}

// The agent writes the tunnels' state into the IPsecGateway's status (tunnels[], tunnelsUp)
// with the rendered Role's permissions (as the gateway's ServiceAccount), next to the
// operator's conditions, and may not write any VPNPeer's status.
func TestLegacyAgentWritesTunnels(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	deleteLegacy(t, ns)
	g := legacyGateway(ns, "acme", "node-agent-a")
	create(t, pskSecret(ns, "hq"), pskSecret(ns, "branch"), g)
	legacyCondition(t, g, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	legacyCondition(t, g, vpnv1.ConditionConfigValid, metav1.ConditionTrue, controller.ReasonValid)

	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapNameFor(model.KindIPsecGateway, "acme")}, cm); err != nil {
		t.Fatal(err)
	}
	b, err := render.FromConfigMapData(cm.Data, render.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Model.Kind != model.KindIPsecGateway {
		t.Fatalf("model kind %q", b.Model.Kind)
	}
	// The agent's client: the gateway's ServiceAccount.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + children.NameFor(model.KindIPsecGateway, "acme")}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w := &status.Writer{Client: c, Namespace: ns}
	established := time.Now().Add(-time.Minute)
	snap := agent.Snapshot{Taken: time.Now(), Peers: map[string]agent.PeerSnapshot{
		"hq":     {PeerState: agent.PeerState{State: agent.StateEstablished, EstablishedAt: established, BytesIn: 100, BytesOut: 200}},
		"branch": {PeerState: agent.PeerState{State: agent.StateAuthFailed, Message: "peer rejected our PSK"}},
	}}
	if err := w.Report(ctx, b, snap); err != nil {
		t.Fatalf("the agent's status write: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
		t.Fatal(err)
	}
	if g.Status.TunnelsUp != "1/2" || len(g.Status.Tunnels) != 2 {
		t.Fatalf("tunnels %+v, up %q", g.Status.Tunnels, g.Status.TunnelsUp)
	}
	br, hq := g.Status.Tunnels[0], g.Status.Tunnels[1]
	if hq.Name != "hq" || hq.State != status.TunnelEstablished || hq.BytesIn != 100 || hq.BytesOut != 200 || hq.EstablishedAt == nil {
		t.Errorf("hq: %+v", hq)
	}
	if br.Name != "branch" || br.State != status.TunnelDown || !strings.Contains(br.LastError, "AuthFailed") {
		t.Errorf("branch: %+v", br)
	}
	if meta.FindStatusCondition(g.Status.Conditions, vpnv1.ConditionRendered) == nil || g.Status.ServiceCIDR == "" {
		t.Errorf("the operator's status is gone after the agent's write: %+v", g.Status)
	}
	// The operator's next status write leaves the agent's fields alone.
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.Exposures = g.Spec.Exposures[:1]
	if err := env.Client.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		if g.Status.ObservedGeneration != g.Generation || len(g.Status.Exposures) != 1 {
			return fmt.Errorf("status not yet of generation %d: %+v", g.Generation, g.Status)
		}
		return nil
	})
	if g.Status.TunnelsUp != "1/2" || len(g.Status.Tunnels) != 2 {
		t.Errorf("the operator's write dropped the tunnels: %+v, up %q", g.Status.Tunnels, g.Status.TunnelsUp)
	}

	// The Role is enforced: the same client may not write a VPNPeer's status (there is none to
	// write for a legacy gateway) nor another IPsecGateway's.
	create(t, gen.VPNPeer(ns, "hq", gen.OnGateway("other"), gen.RemoteSubnets("10.50.0.0/16")))
	err = kube.ApplyStatus(ctx, c, vpnv1.GroupVersion.WithKind("VPNPeer"), ns, "hq", status.FieldOwner, &vpnv1.VPNPeerStatus{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the legacy agent wrote a VPNPeer's status: %v", err)
	}
	other := legacyGateway(ns, "other", "node-agent-b")
	other.Spec.Tunnels = other.Spec.Tunnels[:1]
	create(t, other)
	err = kube.ApplyStatus(ctx, c, ipsecv1.GroupVersion.WithKind("IPsecGateway"), ns, "other", status.FieldOwner, &ipsecv1.IPsecGatewayStatus{TunnelsUp: "9/9"})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the agent wrote another IPsecGateway's status: %v", err)
	}
}

// A legacy LoadBalancer gateway's Service is its own (named so no VPNGateway's is, owned by
// the IPsecGateway), and releasing the gateway leaves it alone: the endpoint is never touched.
func TestLegacyLoadBalancerEndpointKeptOnRelease(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	deleteLegacy(t, ns)
	g := legacyGateway(ns, "lb", "")
	g.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}
	create(t, pskSecret(ns, "hq"), pskSecret(ns, "branch"), g)
	legacyCondition(t, g, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonProvisioning)
	svc := &corev1.Service{}
	name := loadbalancer.ServiceNameFor(model.KindIPsecGateway, "lb")
	if name == loadbalancer.ServiceName("lb") {
		t.Fatalf("the legacy LoadBalancer Service takes the VPNGateway's name %s", name)
	}
	eventually(t, 20*time.Second, func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc)
	})
	ownedByUID(t, svc, "IPsecGateway", g.UID)
	if svc.Spec.Selector[children.LabelIPsecGateway] != "lb" || svc.Spec.Selector[children.LabelGateway] != "" {
		t.Errorf("the Service selects %v", svc.Spec.Selector)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.51"}}
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	legacyCondition(t, g, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	if g.Status.PublicAddress != "203.0.113.51" {
		t.Errorf("public address %q", g.Status.PublicAddress)
	}

	// Its readiness is exported for alerting, in a series of its own kind.
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
			return err
		}
		c := meta.FindStatusCondition(g.Status.Conditions, vpnv1.ConditionReady)
		if c == nil {
			return fmt.Errorf("no Ready condition")
		}
		got := readySeries(t, "bnerd_vpn_ipsecgateway_ready", ns, "lb")
		if len(got) != 1 || got[c.Reason] != 0 {
			return fmt.Errorf("series %v, want exactly {%s: 0}", got, c.Reason)
		}
		return nil
	})
	if got := readySeries(t, "bnerd_vpn_gateway_ready", ns, "lb"); len(got) != 0 {
		t.Errorf("a legacy gateway in the VPNGateways' series: %v", got)
	}

	// The new gateway asks for the legacy one's service CIDR: held until the release.
	u := ipsecGateway(ns, "lb")
	u.Spec.Endpoint.HostNetwork.NodeName = "node-" + ns // none: rechecked only every minute
	u.Spec.ServiceCIDR = g.Status.ServiceCIDR
	u.Spec.ReverseExposures = nil
	create(t, u)
	waitCondition(t, u, vpnv1.ConditionAddressesAllocated, metav1.ConditionFalse, controller.ReasonServiceCIDRConflict)

	patch := client.MergeFrom(g.DeepCopy())
	g.Annotations = map[string]string{ipsecv1.AnnotationMigratedTo: "lb"}
	if err := env.Client.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	legacyCondition(t, g, vpnv1.ConditionReady, metav1.ConditionFalse, controller.ReasonMigrated)
	eventually(t, 20*time.Second, func() error {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.NameFor(model.KindIPsecGateway, "lb")}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Deployment still there (%v)", err)
		}
		return nil
	})
	// The release wakes the gateway waiting for the CIDR (no other event would).
	waitCondition(t, u, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	if got := readySeries(t, "bnerd_vpn_ipsecgateway_ready", ns, "lb"); len(got) != 0 {
		t.Errorf("a released gateway still has series %v (it would alert)", got)
	}
	kept := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kept); err != nil || kept.UID != svc.UID || !kept.DeletionTimestamp.IsZero() {
		t.Errorf("the released gateway's LoadBalancer Service: %v (uid %s, was %s)", err, kept.UID, svc.UID)
	}
}

// readySeries reads a gateway readiness metric for one gateway: reason -> value.
func readySeries(t *testing.T, metric, ns, name string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == ns && l["gateway"] == name {
				out[l["reason"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
