package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// appliedModel reads the model the gateway's agent runs (its ConfigMap).
func appliedModel(ctx context.Context, ns, gw string) (*model.Gateway, error) {
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapName(gw)}, cm); err != nil {
		return nil, err
	}
	return render.DecodeModel([]byte(cm.Data[render.KeyModel]))
}

func modelPeer(m *model.Gateway, name string) *model.Peer {
	for i := range m.Peers {
		if m.Peers[i].Name == name {
			return &m.Peers[i]
		}
	}
	return nil
}

// A gateway whose configuration turns invalid keeps its last good configuration, but every
// revocation made meanwhile lands at once: a grant removed, a peer deleted. A grant added
// meanwhile waits for a valid configuration.
func TestRevocationLandsOnAnInvalidGateway(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ns := namespace(t)
	ctx := context.Background()
	gw := ipsecGateway(ns, "gw")
	a := gen.VPNPeer(ns, "a", gen.RemoteSubnets("10.20.0.0/16"), gen.Grants("api", "db"), gen.ReverseGrants("erp"))
	b := gen.VPNPeer(ns, "b", gen.RemoteSubnets("10.30.0.0/16"), gen.Grants("api"))
	create(t, gw, pskSecret(ns, "a"), pskSecret(ns, "b"), a, b)
	waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
	eventually(t, 20*time.Second, func() error {
		m, err := appliedModel(ctx, ns, "gw")
		if err != nil {
			return err
		}
		if pa := modelPeer(m, "a"); pa == nil || !slices.Equal(pa.Exposures, []string{"api", "db"}) {
			return fmt.Errorf("peer a in the model: %+v", pa)
		}
		return nil
	})

	update := func(obj client.Object, mut func()) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			mut()
			return env.Client.Update(ctx, obj)
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Invalid: an exposure whose target Service does not exist.
	update(gw, func() {
		gw.Spec.Exposures = append(gw.Spec.Exposures, vpnv1.Exposure{Name: "missing",
			Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "no-such-service"}, Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 80})}})
	})
	waitCondition(t, gw, vpnv1.ConditionConfigValid, metav1.ConditionFalse, model.ReasonTargetServiceNotFound)

	t.Run("a grant removed", func(t *testing.T) {
		update(a, func() { a.Spec.Authorization.Exposures = []string{"api"} })
		eventually(t, 20*time.Second, func() error {
			m, err := appliedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			if pa := modelPeer(m, "a"); pa == nil || !slices.Equal(pa.Exposures, []string{"api"}) {
				return fmt.Errorf("peer a in the model: %+v", pa)
			}
			return nil
		})
		// Rendered names what was revoked (the status is written after the ConfigMap).
		eventually(t, 20*time.Second, func() error {
			c := waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionFalse, controller.ReasonConfigInvalid)
			if !strings.Contains(c.Message, `peer "a": exposure "db"`) {
				return fmt.Errorf("Rendered does not say what was revoked: %q", c.Message)
			}
			return nil
		})
		waitCondition(t, gw, vpnv1.ConditionConfigValid, metav1.ConditionFalse, model.ReasonTargetServiceNotFound)
	})

	t.Run("a peer deleted", func(t *testing.T) {
		if err := env.Client.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, func() error {
			m, err := appliedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			if modelPeer(m, "b") != nil {
				return fmt.Errorf("peer b is still in the model")
			}
			return nil
		})
	})

	t.Run("a grant added waits for a valid configuration", func(t *testing.T) {
		// One update that revokes api and adds db: once the revocation shows, the pass that
		// saw the update is done, and db must not have come with it.
		update(a, func() { a.Spec.Authorization.Exposures = []string{"db"} })
		eventually(t, 20*time.Second, func() error {
			m, err := appliedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			pa := modelPeer(m, "a")
			if pa == nil || slices.Contains(pa.Exposures, "api") {
				return fmt.Errorf("peer a in the model: %+v", pa)
			}
			if len(pa.Exposures) != 0 {
				t.Fatalf("peer a was granted %v by an invalid configuration", pa.Exposures)
			}
			return nil
		})
		// Valid again: the current spec applies, the new grant included.
		update(gw, func() { gw.Spec.Exposures = gw.Spec.Exposures[:len(gw.Spec.Exposures)-1] })
		waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
		eventually(t, 20*time.Second, func() error {
			m, err := appliedModel(ctx, ns, "gw")
			if err != nil {
				return err
			}
			if pa := modelPeer(m, "a"); pa == nil || !slices.Equal(pa.Exposures, []string{"db"}) {
				return fmt.Errorf("peer a in the model: %+v", pa)
			}
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapName("gw")}, cm); err != nil {
				return err
			}
			if r, ok := cm.Annotations[controller.AnnotationRevoked]; ok {
				return fmt.Errorf("a valid configuration still carries the revocations: %q", r)
			}
			return nil
		})
	})
}
