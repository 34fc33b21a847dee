package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// cloudNode is a Node whose server has a NIC on the gateways' network (a trunk's parent with
// trunk); the Node is removed when the test ends.
func (c testCloud) cloudNode(t *testing.T, name string, trunk bool) *corev1.Node {
	t.Helper()
	server := fmt.Sprintf("5ab0de00-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffffffff)
	if _, err := c.fake.AddVMPort(c.intNet, name, server, trunk); err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "openstack:///" + server}}
	create(t, n)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	return n
}

// trunkCarrying names the node whose trunk carries the port (by the trunk's parent port's
// name) and the VLAN; "" when none does.
func (c testCloud) trunkCarrying(portID string) (string, int) {
	names := map[string]string{}
	for _, p := range c.fake.PortList() {
		names[p.ID] = p.Name
	}
	for _, tr := range c.fake.TrunkList() {
		for _, s := range tr.SubPorts {
			if s.PortID == portID {
				return names[tr.PortID], s.SegmentationID
			}
		}
	}
	return "", 0
}

// gatewayPodOn stands in for the scheduler and the Deployment: the gateway's pod as its
// Deployment's template makes it, placed on node.
func gatewayPodOn(t *testing.T, d *appsv1.Deployment, name, node string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: name, Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	p.Spec.NodeName = node
	create(t, p)
	return p
}

// A floating-IP gateway's port follows its pod through the operator: bound as a subport of the
// trunk of the node the pod runs on (with the VLAN its NetworkAttachmentDefinition names),
// moved when a newer pod runs on another node (nothing left on the first node's trunk); a pod
// on a node whose NIC is no trunk's parent gets a Warning event naming the node and leaves
// the binding where it was; deleting the gateway takes the port off its trunk and out of the
// cloud.
func TestUplinkFollowsTheGatewayPod(t *testing.T) {
	installNADCRD(t)
	osc := newTestCloud(t)
	ns := namespace(t)
	n1 := osc.cloudNode(t, ns+"-a", true)
	n2 := osc.cloudNode(t, ns+"-b", true)
	n3 := osc.cloudNode(t, ns+"-c", false)
	before := osc.fake.Inventory()
	osc.startOperator(t, openstack.Config{})
	ctx := context.Background()

	gw := ipsecGateway(ns, "fip")
	gw.Spec.Endpoint = vpnv1.Endpoint{FloatingIPPool: osc.extNet}
	create(t, gw)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	var port neutronfake.Port
	for _, p := range osc.fake.PortList() {
		if p.Name == openstack.NamePrefix+string(gw.UID) {
			port = p
		}
	}
	d := &appsv1.Deployment{}
	eventually(t, 20*time.Second, func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: children.Name("fip")}, d)
	})
	if port.ID == "" || d.Spec.Template.Annotations[cloud.NetworksAnnotation] == "" {
		t.Fatalf("no port (%+v) or no attachment on the pod template", port)
	}

	carriedBy := func(node string) func() error {
		return func() error {
			on, vlan := osc.trunkCarrying(port.ID)
			if on != node || vlan < openstack.MinVLAN {
				return fmt.Errorf("port %s is on the trunk of %q (VLAN %d), want %s's", port.ID, on, vlan, node)
			}
			return nil
		}
	}
	gatewayPodOn(t, d, "fip-1", n1.Name)
	eventually(t, 20*time.Second, carriedBy(n1.Name))
	gatewayPodOn(t, d, "fip-2", n2.Name)
	eventually(t, 20*time.Second, carriedBy(n2.Name))

	gatewayPodOn(t, d, "fip-3", n3.Name)
	eventually(t, 20*time.Second, func() error {
		var events eventsv1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == controller.ReasonUplinkBindingFailed && e.Regarding.Name == "fip" && strings.Contains(e.Note, n3.Name) && strings.Contains(e.Note, "trunk") {
				return nil
			}
		}
		return fmt.Errorf("no %s event naming node %s", controller.ReasonUplinkBindingFailed, n3.Name)
	})
	if err := carriedBy(n2.Name)(); err != nil {
		t.Errorf("after the failed binding: %v", err)
	}

	if err := env.Client.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if on, _ := osc.trunkCarrying(port.ID); on != "" {
			return fmt.Errorf("the port is still on %s's trunk", on)
		}
		if inv := osc.fake.Inventory().Sub(before); inv != (neutronfake.Inventory{}) {
			return fmt.Errorf("leaked: %+v", inv)
		}
		return nil
	})
}
