package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// installNADCRD installs a minimal Multus NetworkAttachmentDefinition CRD (what Multus ships).
func installNADCRD(t *testing.T) {
	t.Helper()
	if err := labcloud.InstallNADCRD(context.Background(), env.Config); err != nil {
		t.Fatal(err)
	}
}

// testCloud is the in-repo Neutron/Keystone with the operator's user, an external network
// ("public", 203.0.113.0/24) and the gateways' transit network.
type testCloud struct {
	fake           *neutronfake.Server
	extNet, intNet string
}

func newTestCloud(t *testing.T) testCloud {
	t.Helper()
	fake := neutronfake.New()
	t.Cleanup(fake.Close)
	fake.AddUser("vpn-operator", "s3cr3t-pw")
	extNet, _ := fake.AddNetwork("public", true, "203.0.113.0/24")
	intNet, _ := fake.AddNetwork("vpn-transit", false, "100.100.0.0/24")
	return testCloud{fake: fake, extNet: extNet, intNet: intNet}
}

// startOperator runs the operator with an OpenStack provider for the cloud (through a clouds.yaml,
// as installs configure it); cfg.NetworkID defaults to the transit network.
func (c testCloud) startOperator(t *testing.T, cfg openstack.Config) {
	t.Helper()
	if cfg.NetworkID == "" {
		cfg.NetworkID = c.intNet
	}
	clouds := fmt.Appendf(nil, "clouds:\n  test:\n    auth:\n      auth_url: %s\n      username: vpn-operator\n      password: s3cr3t-pw\n      project_name: vpn\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n", c.fake.AuthURL())
	p, err := openstack.NewFromCloudsYAML(clouds, "test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	oc := operatorConfig()
	oc.OpenStack = p
	startOperator(t, oc, nil)
}

// A floating-IP-pool gateway through the whole reconciler, against real gophercloud and an
// in-repo Neutron: the floating IP becomes the public address, the pod gets its port as a
// Multus second NIC, and deleting the gateway leaves nothing behind in the cloud.
func TestOpenStackEndpointThroughOperator(t *testing.T) {
	installNADCRD(t)
	osc := newTestCloud(t)
	fake, extNet := osc.fake, osc.extNet
	before := fake.Inventory()
	osc.startOperator(t, openstack.Config{})
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "fip")
	gw.Spec.Endpoint = vpnv1.Endpoint{FloatingIPPool: extNet}
	create(t, gw)

	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	if gw.Status.PublicAddress == "" {
		t.Fatal("no public address")
	}
	if inv := fake.Inventory().Sub(before); inv.Ports != 1 || inv.FloatingIPs != 1 || inv.SecurityGroups != 1 {
		t.Fatalf("cloud resources after Ensure: %+v", inv)
	}
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, "Applied")
	// The agent learns the port as the uplink its tunnels bind to and answer through.
	var port neutronfake.Port
	for _, p := range fake.PortList() {
		if strings.Contains(strings.Join(p.Tags, ","), string(gw.UID)) || strings.Contains(p.Name, string(gw.UID)) {
			port = p
		}
	}
	if len(port.FixedIPs) == 0 {
		t.Fatalf("no port of the gateway in %+v", fake.PortList())
	}
	m, err := renderedModel(ctx, ns, "fip")
	if err != nil {
		t.Fatal(err)
	}
	if u := m.Uplink; u == nil || u.Interface != cloud.NetworkAttachmentInterface || u.Address.String() != port.FixedIPs[0].IPAddress+"/24" || u.Gateway.String() != "100.100.0.1" {
		t.Fatalf("rendered uplink %+v, want net1 with the port's %s/24 via 100.100.0.1", u, port.FixedIPs[0].IPAddress)
	}
	nad := &unstructured.Unstructured{}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	eventually(t, 20*time.Second, func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fip-gateway-uplink"}, nad)
	})
	if refs := nad.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != gw.UID {
		t.Errorf("attachment owners %+v", refs)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: children.Name("fip")}, d); err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Annotations[cloud.NetworksAnnotation]; got == "" {
		t.Errorf("gateway pod does not request its cloud port (annotation %s missing)", cloud.NetworksAnnotation)
	}

	// Deleting the gateway releases the cloud resources before the finalizer goes.
	if err := env.Client.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), gw); err == nil {
			return fmt.Errorf("gateway still exists")
		}
		if inv := fake.Inventory().Sub(before); inv != (neutronfake.Inventory{}) {
			return fmt.Errorf("leaked: %+v", inv)
		}
		return nil
	})
}

// A cutover: the gateway pinned to a floating IP still on the client's VM waits with
// EndpointReady=False (Conflict, naming the VM's port) and runs no pod meanwhile — charon would
// otherwise initiate toward the client from the cluster's egress address and could pull the
// client's tunnel off the VM. Once the VM's port lets go of the address, the gateway takes it
// within seconds (the cutover recheck) and its pod is created.
func TestPinnedFloatingIPCutover(t *testing.T) {
	installNADCRD(t)
	osc := newTestCloud(t)
	fake := osc.fake
	vmPort := fake.AddPort(osc.intNet, "legacy-vpn-vm")
	fip := fake.AddFloatingIP(osc.extNet, "203.0.113.77", vmPort)
	osc.startOperator(t, openstack.Config{CutoverRetry: time.Second})
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "pinned")
	gw.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: "203.0.113.77"}
	create(t, gw, pskSecret(ns, "site"), gen.VPNPeer(ns, "site", gen.OnGateway("pinned"), gen.RemoteSubnets("10.20.0.0/16")))

	c := waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionFalse, cloud.ReasonConflict)
	if !strings.Contains(c.Message, vmPort) {
		t.Errorf("the condition does not name the VM's port: %s", c.Message)
	}
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionFalse, controller.ReasonEndpointBlocked)
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: children.Name("pinned")}, d); !apierrors.IsNotFound(err) {
		t.Fatalf("a gateway pod is created while the VM still holds the address: %v", err)
	}

	released := time.Now()
	fake.DisassociateFloatingIP(fip)
	waitCondition(t, gw, vpnv1.ConditionEndpointReady, metav1.ConditionTrue, cloud.ReasonReady)
	eventually(t, 20*time.Second, func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: children.Name("pinned")}, d)
	})
	t.Logf("the gateway took the address and created its pod %s after the VM released it", time.Since(released).Round(100*time.Millisecond))
	if gw.Status.PublicAddress != "203.0.113.77" {
		t.Errorf("public address %q", gw.Status.PublicAddress)
	}
}
