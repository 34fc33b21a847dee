package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/loadbalancer"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
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
	// The younger gets no children at all: two would share the node's table and ports.
	waitCondition(t, younger, vpnv1.ConditionRendered, metav1.ConditionFalse, controller.ReasonEndpointBlocked)
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("younger")}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the conflicting younger gateway has a Deployment (err %v)", err)
	}
	if err := env.Client.Delete(ctx, older); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, younger, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	eventually(t, 20*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.Name("younger")}, &appsv1.Deployment{})
	})
}

// Host network is the cluster admin's decision: a gateway in a namespace the admin has not
// labelled gets EndpointReady=False/NotPermitted and no pod; labelling the namespace lets it
// run, and removing the label takes the pod away again.
func TestHostNetworkNeedsThePermission(t *testing.T) {
	cfg := operatorConfig()
	sel, err := labels.Parse(controller.DefaultHostNetworkNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Options.HostNetworkNamespaces = sel
	startOperator(t, cfg, nil)
	ctx := context.Background()
	ns := namespace(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-permission"}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	gw := ipsecGateway(ns, "gw")
	gw.Spec.Endpoint.HostNetwork.NodeName = "node-permission"
	create(t, gw)
	c := waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, controller.ReasonNotPermitted)
	if !strings.Contains(c.Message, controller.DefaultHostNetworkNamespaces) || !strings.Contains(c.Message, ns) {
		t.Errorf("NotPermitted message %q names neither the namespace nor the selector", c.Message)
	}
	waitCondition(t, gw, vpnv1.ConditionReady, metav1.ConditionFalse, controller.ReasonNotPermitted)
	// A gateway that may not run claims no address space.
	waitCondition(t, gw, vpnv1.ConditionAddressesAllocated, metav1.ConditionFalse, controller.ReasonNotPermitted)
	held := &vpnv1.VPNGateway{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gw"}, held); err != nil {
		t.Fatal(err)
	}
	if held.Status.ServiceCIDR != "" {
		t.Errorf("a gateway that is not permitted holds service CIDR %s", held.Status.ServiceCIDR)
	}
	deployment := types.NamespacedName{Namespace: ns, Name: children.Name("gw")}
	if err := env.Client.Get(ctx, deployment, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a gateway that is not permitted has a Deployment (err %v)", err)
	}

	setLabel := func(value *string) {
		t.Helper()
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: ns}, n); err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		if value == nil {
			delete(n.Labels, "vpn.bnerd.net/host-network")
		} else {
			n.Labels["vpn.bnerd.net/host-network"] = *value
		}
		if err := env.Client.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	allowed := "allowed"
	setLabel(&allowed)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	waitCondition(t, gw, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	eventually(t, 20*time.Second, func() error { return env.Client.Get(ctx, deployment, &appsv1.Deployment{}) })

	setLabel(nil)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, controller.ReasonNotPermitted)
	eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, deployment, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the Deployment is still there (err %v)", err)
		}
		return nil
	})
}
