package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/loadbalancer"
)

// A LoadBalancer gateway: the operator creates the Service (owned by the gateway), waits for
// its address, and publishes it as the gateway's public address.
func TestLoadBalancerEndpoint(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "lb")
	gw.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}
	create(t, gw)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonProvisioning)

	svc := &corev1.Service{}
	eventually(t, 20*time.Second, func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: loadbalancer.ServiceName("lb")}, svc)
	})
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != gw.UID {
		t.Fatalf("service %s: type %s, owners %+v", svc.Name, svc.Spec.Type, svc.OwnerReferences)
	}
	// The cloud's load balancer controller assigns the address.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.50"}}
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	if gw.Status.PublicAddress != "203.0.113.50" {
		t.Errorf("public address %q, want the load balancer's 203.0.113.50", gw.Status.PublicAddress)
	}
	// The IPsec local ID follows the public address.
	eventually(t, 20*time.Second, func() error {
		m, err := renderedModel(ctx, ns, "lb")
		if err != nil {
			return err
		}
		if m.PublicAddress != "203.0.113.50" {
			return fmt.Errorf("rendered public address %q", m.PublicAddress)
		}
		return nil
	})
}

// Without an OpenStack provider, floating IP endpoints say so (and nothing crashes).
func TestOpenStackNotConfigured(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ns := namespace(t)
	gw := ipsecGateway(ns, "fip")
	gw.Spec.Endpoint = vpnv1.Endpoint{FloatingIPPool: "public"}
	create(t, gw)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonProviderNotConfigured)
	waitCondition(t, gw, vpnv1.ConditionReady, metav1.ConditionFalse, cloud.ReasonProviderNotConfigured)
}

// Two IPsec gateways on one node's host network: the younger one is told about the conflict,
// and gets the node as soon as the older one is deleted (not at the next slow re-check).
func TestHostNetworkConflictResolvedOnDelete(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	older, younger := ipsecGateway(ns, "older"), ipsecGateway(ns, "younger")
	older.Spec.Endpoint.HostNetwork.NodeName = "node-shared"
	younger.Spec.Endpoint.HostNetwork.NodeName = "node-shared"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-shared"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	create(t, older)
	waitCondition(t, older, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	create(t, younger)
	c := waitCondition(t, younger, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonConflict)
	if !strings.Contains(c.Message, "older") {
		t.Errorf("conflict message %q does not name the gateway holding the node", c.Message)
	}
	if err := env.Client.Delete(ctx, older); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, younger, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
}
