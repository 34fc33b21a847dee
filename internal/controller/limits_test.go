package controller_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// One tenant cannot take the address space of every other: beyond its namespace's limits a
// gateway gets no service CIDR (NamespaceLimitReached, naming the limit and its setting) and no
// pod, while another namespace still gets addresses; what a gateway already holds is kept, and
// a release in the namespace lets the refused gateway in.
func TestNamespaceLimits(t *testing.T) {
	cfg := operatorConfig()
	cfg.Model.PoolCIDR = netip.MustParsePrefix("100.66.0.0/20") // sixteen /24s
	cfg.Options.Limits = controller.NamespaceLimits{Gateways: 2, Addresses: 3 * 256}
	startOperator(t, cfg, nil)
	ctx := context.Background()
	squatter, other := namespace(t), namespace(t)

	a := ipsecGateway(squatter, "a")
	b := ipsecGateway(squatter, "b")
	b.Spec.ServiceCIDR = "100.66.8.0/23" // a's /24 and this /23: 768 addresses, the limit
	create(t, a, b)
	waitCondition(t, a, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	waitCondition(t, b, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)

	refused := func(t *testing.T, gw *vpnv1.VPNGateway, flag string) {
		t.Helper()
		c := waitCondition(t, gw, vpnv1.ConditionAddressesAllocated, metav1.ConditionFalse, controller.ReasonNamespaceLimitReached)
		if !strings.Contains(c.Message, flag) || !strings.Contains(c.Message, gw.Namespace) {
			t.Errorf("the refusal does not name the namespace and %s: %q", flag, c.Message)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
			t.Fatal(err)
		}
		if gw.Status.ServiceCIDR != "" {
			t.Errorf("%s holds %s beyond its namespace's limits", gw.Name, gw.Status.ServiceCIDR)
		}
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: gw.Namespace, Name: children.Name(gw.Name)}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s has a Deployment beyond its namespace's limits (%v)", gw.Name, err)
		}
	}

	t.Run("a third gateway is refused by the gateway count", func(t *testing.T) {
		c := ipsecGateway(squatter, "c")
		create(t, c)
		refused(t, c, "--max-gateways-per-namespace")
	})

	t.Run("a /16 asked in another namespace is refused by the address count", func(t *testing.T) {
		big := ipsecGateway(other, "big")
		big.Spec.ServiceCIDR = "100.70.0.0/16"
		create(t, big)
		refused(t, big, "--max-service-addresses-per-namespace")
	})

	t.Run("another namespace still gets addresses", func(t *testing.T) {
		fine := ipsecGateway(other, "fine")
		create(t, fine)
		waitCondition(t, fine, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
	})

	t.Run("a release in the namespace lets the refused gateway in", func(t *testing.T) {
		if err := env.Client.Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
		c := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: squatter, Name: "c"}}
		// No retry is minutes away: only the release wakes c.
		waitCondition(t, c, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
		// b kept its /23 all along.
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			t.Fatal(err)
		}
		if b.Status.ServiceCIDR != "100.66.8.0/23" {
			t.Errorf("b holds %q", b.Status.ServiceCIDR)
		}
	})
}
