package loadbalancer_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/loadbalancer"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

var nsSeq atomic.Int32

func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("lb%d-%s", nsSeq.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(strings.ReplaceAll(name, "_", "-"), "-")
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// gateway creates a VPNGateway (for a real UID to own the Service) and returns its request.
func gateway(t *testing.T, ns, name string, protocol vpnv1.Protocol, lb vpnv1.LoadBalancerEndpoint) cloud.Request {
	t.Helper()
	mods := []gen.GatewayMod{gen.Protocol(protocol), gen.LoadBalancer(lb)}
	if protocol == vpnv1.ProtocolWireGuard {
		mods = append(mods, gen.WireGuardListenPort(51821))
	}
	gw := gen.VPNGateway(ns, name, mods...)
	if err := env.Client.Create(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	req := cloud.Request{
		Namespace: ns, Name: name, UID: gw.UID, Protocol: model.Protocol(protocol),
		Endpoint: model.Endpoint{Kind: model.EndpointLoadBalancer, LoadBalancerClass: lb.LoadBalancerClass, Annotations: lb.Annotations},
	}
	if protocol == vpnv1.ProtocolWireGuard {
		req.WireGuardPort = 51821
	}
	return req
}

func service(t *testing.T, req cloud.Request) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: req.Namespace, Name: loadbalancer.ServiceName(req.Name)}, svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

// counted is a client whose writes are counted.
func counted(t *testing.T) (client.Client, *testenv.WriteCounter) {
	t.Helper()
	var wc testenv.WriteCounter
	c, err := client.New(wc.Wrap(env.Config), client.Options{Scheme: operator.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c, &wc
}

func TestIPsecService(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	req := gateway(t, ns, "acme", vpnv1.ProtocolIPsec, vpnv1.LoadBalancerEndpoint{
		LoadBalancerClass: "example.com/udp-lb",
		Annotations:       map[string]string{"lb.example.com/pool": "public", "lb.example.com/keep-ip": "true"},
	})
	c, writes := counted(t)
	p := loadbalancer.New(c, loadbalancer.Config{})

	res, err := p.Ensure(ctx, req)
	if err != nil || res.Ready || res.Reason != cloud.ReasonProvisioning || res.Terminal || res.RetryAfter == 0 || !strings.Contains(res.Message, "example.com/udp-lb") {
		t.Fatalf("first Ensure: %+v, %v; want Provisioning with a RetryAfter", res, err)
	}
	if res.Pod.HostNetwork || res.Pod.NodeName != "" || res.Pod.NetworkAttachment != nil {
		t.Errorf("pod network %+v: a load-balanced gateway needs nothing special", res.Pod)
	}
	svc := service(t, req)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		t.Errorf("type %s, externalTrafficPolicy %s", svc.Spec.Type, svc.Spec.ExternalTrafficPolicy)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Error("a restarting agent (the pod not ready) would take the gateway out of its load balancer")
	}
	if ptr.Deref(svc.Spec.LoadBalancerClass, "") != "example.com/udp-lb" {
		t.Errorf("loadBalancerClass %v", svc.Spec.LoadBalancerClass)
	}
	if len(svc.Spec.Ports) != 2 {
		t.Fatalf("ports %+v", svc.Spec.Ports)
	}
	for i, want := range []struct {
		name string
		port int32
	}{{"ike", 500}, {"ike-natt", 4500}} {
		got := svc.Spec.Ports[i]
		if got.Name != want.name || got.Protocol != corev1.ProtocolUDP || got.Port != want.port || got.TargetPort.IntVal != want.port {
			t.Errorf("port %d: %+v, want %s UDP %d", i, got, want.name, want.port)
		}
	}
	wantSel := map[string]string{"app.kubernetes.io/instance": "acme", "vpn.bnerd.net/gateway": "acme"}
	if fmt.Sprint(svc.Spec.Selector) != fmt.Sprint(wantSel) {
		t.Errorf("selector %v, want %v", svc.Spec.Selector, wantSel)
	}
	if svc.Labels["app.kubernetes.io/managed-by"] != "bnerd-vpn-operator" {
		t.Errorf("labels %v", svc.Labels)
	}
	if svc.Annotations["lb.example.com/pool"] != "public" || svc.Annotations["lb.example.com/keep-ip"] != "true" {
		t.Errorf("annotations %v", svc.Annotations)
	}
	owner := metav1.GetControllerOf(svc)
	if owner == nil || owner.APIVersion != "vpn.bnerd.net/v1alpha1" || owner.Kind != "VPNGateway" || owner.Name != "acme" || owner.UID != req.UID || !ptr.Deref(owner.BlockOwnerDeletion, false) {
		t.Errorf("controller reference %+v", owner)
	}

	// Converged: no writes.
	before := writes.Count()
	if res, err := p.Ensure(ctx, req); err != nil || res.Reason != cloud.ReasonProvisioning {
		t.Fatalf("Ensure: %+v, %v", res, err)
	}
	if n := writes.Count() - before; n != 0 {
		t.Errorf("an unchanged Service was written %d times: %v", n, writes.ByKind())
	}

	// The load balancer implementation assigns the address.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.10"}}
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	res, err = p.Ensure(ctx, req)
	if err != nil || !res.Ready || res.Reason != cloud.ReasonReady || res.PublicAddress != "198.51.100.10" || res.Terminal {
		t.Fatalf("Ensure after the address arrived: %+v, %v", res, err)
	}

	// Annotations follow the gateway (a removed one goes: server-side apply).
	req.Endpoint.Annotations = map[string]string{"lb.example.com/pool": "internal"}
	if res, err := p.Ensure(ctx, req); err != nil || res.PublicAddress != "198.51.100.10" {
		t.Fatalf("Ensure: %+v, %v", res, err)
	}
	svc = service(t, req)
	if svc.Annotations["lb.example.com/pool"] != "internal" || svc.Annotations["lb.example.com/keep-ip"] != "" {
		t.Errorf("annotations after change %v", svc.Annotations)
	}

	// Delete removes it; again is a no-op.
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	err = env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Service after Delete: %v", err)
	}
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
}

func TestWireGuardService(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	req := gateway(t, ns, "wg", vpnv1.ProtocolWireGuard, vpnv1.LoadBalancerEndpoint{Annotations: map[string]string{"x": "y"}})
	p := loadbalancer.New(env.Client, loadbalancer.Config{})
	if _, err := p.Ensure(ctx, req); err != nil {
		t.Fatal(err)
	}
	svc := service(t, req)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "wireguard" || svc.Spec.Ports[0].Port != 51821 || svc.Spec.Ports[0].Protocol != corev1.ProtocolUDP {
		t.Errorf("ports %+v", svc.Spec.Ports)
	}
	if svc.Spec.LoadBalancerClass != nil {
		t.Errorf("loadBalancerClass %v set although none was asked for", *svc.Spec.LoadBalancerClass)
	}
	// Hostname-only load balancers are not enough.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	res, err := p.Ensure(ctx, req)
	if err != nil || res.Ready || res.Reason != cloud.ReasonProvisioning || !strings.Contains(res.Message, "lb.example.com") {
		t.Errorf("hostname-only: %+v, %v", res, err)
	}
	svc = service(t, req)
	svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "2001:db8::10"})
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Ensure(ctx, req); err != nil || !res.Ready || res.PublicAddress != "2001:db8::10" {
		t.Errorf("Ensure: %+v, %v", res, err)
	}
}

func TestChangingClassRecreates(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	req := gateway(t, ns, "acme", vpnv1.ProtocolIPsec, vpnv1.LoadBalancerEndpoint{LoadBalancerClass: "a.example/lb"})
	p := loadbalancer.New(env.Client, loadbalancer.Config{})
	if _, err := p.Ensure(ctx, req); err != nil {
		t.Fatal(err)
	}
	first := service(t, req).UID
	req.Endpoint.LoadBalancerClass = "b.example/lb"
	res, err := p.Ensure(ctx, req)
	if err != nil || res.Reason != cloud.ReasonProvisioning || !strings.Contains(res.Message, "recreating") {
		t.Fatalf("Ensure with a new class: %+v, %v", res, err)
	}
	if _, err := p.Ensure(ctx, req); err != nil {
		t.Fatal(err)
	}
	svc := service(t, req)
	if svc.UID == first || ptr.Deref(svc.Spec.LoadBalancerClass, "") != "b.example/lb" {
		t.Errorf("Service %s class %v, want a new one with b.example/lb", svc.UID, svc.Spec.LoadBalancerClass)
	}
}

func TestForeignServiceConflicts(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	req := gateway(t, ns, "acme", vpnv1.ProtocolIPsec, vpnv1.LoadBalancerEndpoint{LoadBalancerClass: "x.example/lb"})
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: loadbalancer.ServiceName("acme")},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	p := loadbalancer.New(env.Client, loadbalancer.Config{})
	res, err := p.Ensure(ctx, req)
	if err != nil || res.Reason != cloud.ReasonConflict || !res.Terminal {
		t.Fatalf("Ensure: %+v, %v; want Conflict", res, err)
	}
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := service(t, req); got.UID != foreign.UID || got.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("the foreign Service was touched: %+v", got.Spec)
	}
}

func TestChooser(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	req := gateway(t, ns, "acme", vpnv1.ProtocolIPsec, vpnv1.LoadBalancerEndpoint{LoadBalancerClass: "x.example/lb"})
	ch := cloud.NewChooser(nil, loadbalancer.New(env.Client, loadbalancer.Config{}), nil)
	if res, err := ch.Ensure(ctx, req); err != nil || res.Reason != cloud.ReasonProvisioning {
		t.Fatalf("Ensure via chooser: %+v, %v", res, err)
	}
	service(t, req)
	if err := ch.DeleteAll(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: loadbalancer.ServiceName("acme")}, &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("after DeleteAll: %v", err)
	}
}

// A gateway with a standby: the Service selects the active pod only, and goes back to
// selecting the gateway's pod when the standby is turned off.
func TestStandbySelectsTheActivePod(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	req := gateway(t, ns, "acme", vpnv1.ProtocolIPsec, vpnv1.LoadBalancerEndpoint{})
	req.Standby = true
	p := loadbalancer.New(env.Client, loadbalancer.Config{})
	if _, err := p.Ensure(ctx, req); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"app.kubernetes.io/instance": "acme", "vpn.bnerd.net/gateway": "acme", "vpn.bnerd.net/role": "active"}
	if got := service(t, req).Spec.Selector; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("selector %v, want %v", got, want)
	}
	req.Standby = false
	if _, err := p.Ensure(ctx, req); err != nil {
		t.Fatal(err)
	}
	delete(want, "vpn.bnerd.net/role")
	if got := service(t, req).Spec.Selector; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("selector without a standby %v, want %v", got, want)
	}
}
