package controller

import (
	"context"
	"fmt"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Reasons of the gateway's KeyReady condition (WireGuard).
const (
	ConditionKeyReady   = "KeyReady"
	ReasonKeyPresent    = "KeyPresent"
	ReasonKeyGenerated  = "KeyGenerated"
	ReasonKeyNotFound   = "SecretNotFound"
	ReasonKeyInvalid    = "InvalidKey"
	ReasonNotApplicable = "NotApplicable"
)

// ensureWireGuardKey makes sure a WireGuard gateway has a private key: the Secret the user
// named, or the operator's own Secret, generated (and owned by the gateway) when absent. The
// public key goes into status for the client's device; the private key never leaves memory.
func (r *GatewayReconciler) ensureWireGuardKey(ctx context.Context, s *gatewayScope) error {
	gw := s.gw
	if gw.Spec.Protocol != vpnv1.ProtocolWireGuard {
		s.key = ok(ReasonNotApplicable, "IPsec gateways use pre-shared keys per peer")
		return nil
	}
	ref, generated := model.WireGuardKeyRef(gw)
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: gw.Namespace, Name: ref.Name}, sec)
	switch {
	case apierrors.IsNotFound(err) && generated:
		key, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return fmt.Errorf("generating the WireGuard key: %w", err)
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: gw.Namespace, Name: ref.Name,
				Labels:          map[string]string{LabelManagedBy: LabelManagedByValue},
				OwnerReferences: []metav1.OwnerReference{gatewayOwner(gw)},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{ref.Key: []byte(key.String())},
		}
		if err := r.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Secret %s for the WireGuard key: %w", ref.Name, err)
		}
		s.publicKey = key.PublicKey().String()
		s.key = ok(ReasonKeyGenerated, fmt.Sprintf("generated a private key in Secret %q", ref.Name))
		r.Recorder.Eventf(gw, nil, corev1.EventTypeNormal, ReasonKeyGenerated, "GenerateKey", "generated the WireGuard private key in Secret %s", ref.Name)
		return nil
	case apierrors.IsNotFound(err):
		s.key = failed(ReasonKeyNotFound, fmt.Sprintf("Secret %q named by spec.wireguard.privateKeySecretRef does not exist", ref.Name))
		return nil
	case err != nil:
		return err
	}
	if !model.CredentialSecretAllowed(string(sec.Type)) {
		s.key = failed(ReasonSecretTypeNotAllowed, fmt.Sprintf("Secret %q named by spec.wireguard.privateKeySecretRef is of type %q; the private key must be kept in an Opaque Secret", ref.Name, sec.Type))
		return nil
	}
	key, err := wgtypes.ParseKey(string(sec.Data[ref.Key]))
	if err != nil {
		s.key = failed(ReasonKeyInvalid, fmt.Sprintf("Secret %q key %q does not hold a base64 WireGuard private key", ref.Name, ref.Key))
		return nil
	}
	s.publicKey = key.PublicKey().String()
	s.key = ok(ReasonKeyPresent, fmt.Sprintf("private key in Secret %q", ref.Name))
	return nil
}

func gatewayOwner(gw *vpnv1.VPNGateway) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway",
		Name: gw.Name, UID: gw.UID,
		Controller: ptr(true), BlockOwnerDeletion: ptr(true),
	}
}
