package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// An exposure of a Service: a gateway in its own network namespace DNATs to the ClusterIP; a
// host-network gateway (where kube-proxy cannot translate a ClusterIP a second time) to one
// ready endpoint on the endpoint's port, following the endpoints as they change, and says so
// when there is none (keeping the last good configuration).
func TestServiceTarget(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 8080, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP},
		}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"100.96.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"100.96.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](18080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(corev1.ProtocolUDP)},
		},
	}
	create(t, svc, slice)
	exposures := []vpnv1.Exposure{{Name: "web", Target: vpnv1.ExposureTarget{
		Service: &vpnv1.ServiceRef{Name: "web"},
		Ports:   vpnv1.Ports(vpnv1.PortSpec{Port: 80, TargetPort: 8080}, vpnv1.PortSpec{Port: 53, Protocol: vpnv1.PortProtocolUDP}),
	}}}
	hostGW := ipsecGateway(ns, "host")
	hostGW.Spec.Endpoint.HostNetwork.NodeName = "node-" + ns
	hostGW.Spec.Exposures, hostGW.Spec.ReverseExposures = exposures, nil
	podGW := ipsecGateway(ns, "pod")
	podGW.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}
	podGW.Spec.Exposures, podGW.Spec.ReverseExposures = exposures, nil
	create(t, hostGW, podGW)

	target := func(gw string, addr string, ports ...uint16) func() error {
		return func() error {
			m, err := renderedModel(ctx, ns, gw)
			if err != nil {
				return err
			}
			x := m.Exposures[0]
			got := []uint16{}
			for _, p := range x.Ports {
				got = append(got, p.TargetPort)
			}
			if x.Target != netip.MustParseAddr(addr) || fmt.Sprint(got) != fmt.Sprint(ports) {
				return fmt.Errorf("gateway %s: exposure target %s ports %v, want %s %v", gw, x.Target, got, addr, ports)
			}
			return nil
		}
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, target("pod", svc.Spec.ClusterIP, 8080, 53))
	eventually(t, 20*time.Second, target("host", "100.96.0.9", 18080, 5353))

	// The lower address becomes ready: the choice follows (the lowest ready address).
	slice.Endpoints[1].Conditions.Ready = ptr.To(true)
	if err := env.Client.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, target("host", "100.96.0.7", 18080, 5353))

	// No endpoint: a False condition naming the field; the last good configuration stays.
	if err := env.Client.Delete(ctx, slice); err != nil {
		t.Fatal(err)
	}
	c := waitCondition(t, hostGW, vpnv1.ConditionConfigValid, metav1.ConditionFalse, model.ReasonTargetServiceNoEndpoints)
	if want := "spec.exposures[0].target.service.name"; !containsAll(c.Message, want, `"web"`) {
		t.Errorf("condition message %q does not name %s and the Service", c.Message, want)
	}
	if err := target("host", "100.96.0.7", 18080, 5353)(); err != nil {
		t.Errorf("the last good configuration went: %v", err)
	}
	if err := target("pod", svc.Spec.ClusterIP, 8080, 53)(); err != nil {
		t.Errorf("a gateway sending to the ClusterIP changed: %v", err)
	}

	// An exposure port the Service does not serve.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(podGW), podGW); err != nil {
		t.Fatal(err)
	}
	podGW.Spec.Exposures[0].Target.Ports[0] = vpnv1.PortSpec{Port: 80, TargetPort: 9999}.Value()
	if err := env.Client.Update(ctx, podGW); err != nil {
		t.Fatal(err)
	}
	c = waitCondition(t, podGW, vpnv1.ConditionConfigValid, metav1.ConditionFalse, model.ReasonTargetServicePortNotFound)
	if !containsAll(c.Message, "spec.exposures[0].target.ports[0]", "tcp/9999") {
		t.Errorf("condition message %q", c.Message)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
