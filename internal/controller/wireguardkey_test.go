package controller_test

import (
	"context"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// wireguardGateway is a WireGuard gateway on node-wg without settings (no key reference).
func wireguardGateway(ns, name string) *vpnv1.VPNGateway {
	return gen.VPNGateway(ns, name, gen.Protocol(vpnv1.ProtocolWireGuard), gen.HostNetwork("node-wg", "198.51.100.20"))
}

// Without a key reference the operator generates the private key into a Secret the gateway
// owns, and publishes only the public key; a named Secret that is missing is a condition.
func TestWireGuardKey(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := wireguardGateway(ns, "wg")
	create(t, gw)
	waitCondition(t, gw, controller.ConditionKeyReady, metav1.ConditionTrue, controller.ReasonKeyPresent) // generated on the first pass
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wg-wireguard-key"}, sec); err != nil {
		t.Fatal(err)
	}
	key, err := wgtypes.ParseKey(string(sec.Data["privateKey"]))
	if err != nil {
		t.Fatalf("generated key: %v", err)
	}
	if gw.Status.WireGuardPublicKey != key.PublicKey().String() {
		t.Errorf("status public key %q does not match the generated private key", gw.Status.WireGuardPublicKey)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != gw.UID {
		t.Errorf("generated Secret owners %+v", sec.OwnerReferences)
	}

	named := wireguardGateway(ns, "named")
	named.Spec.Endpoint.HostNetwork.Address = "198.51.100.21"
	named.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{PrivateKeySecretRef: &vpnv1.SecretKeyRef{Name: "missing", Key: "k"}}
	create(t, named)
	waitCondition(t, named, controller.ConditionKeyReady, metav1.ConditionFalse, controller.ReasonKeyNotFound)
	waitCondition(t, named, vpnv1.ConditionReady, metav1.ConditionFalse, controller.ReasonKeyNotFound)
}
