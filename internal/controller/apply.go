package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// annotatable is what every client-go apply configuration offers for its metadata.
type annotatable interface {
	runtime.ApplyConfiguration
	GetName() *string
}

// child pairs a rendered apply configuration with an empty object of its kind, to look up
// what the cache holds.
type child struct {
	ac       annotatable
	annotate func(map[string]string)
	existing client.Object
}

func childrenOf(k *children.Children) []child {
	out := []child{
		{k.ServiceAccount, func(a map[string]string) { k.ServiceAccount.WithAnnotations(a) }, &corev1.ServiceAccount{}},
		{k.Role, func(a map[string]string) { k.Role.WithAnnotations(a) }, &rbacv1.Role{}},
		{k.RoleBinding, func(a map[string]string) { k.RoleBinding.WithAnnotations(a) }, &rbacv1.RoleBinding{}},
		{k.ConfigMap, func(a map[string]string) { k.ConfigMap.WithAnnotations(a) }, &corev1.ConfigMap{}},
		{k.NetworkPolicy, func(a map[string]string) { k.NetworkPolicy.WithAnnotations(a) }, &networkingv1.NetworkPolicy{}},
		{k.Deployment, func(a map[string]string) { k.Deployment.WithAnnotations(a) }, &appsv1.Deployment{}},
	}
	for _, svc := range k.ReverseServices {
		out = append(out, child{svc, func(a map[string]string) { svc.WithAnnotations(a) }, &corev1.Service{}})
	}
	return out
}

// applyAll server-side applies every child whose rendered form differs from what was last
// applied (tracked by a hash annotation), so a converged gateway costs no writes.
func applyAll(ctx context.Context, c client.Client, namespace string, k *children.Children) error {
	for _, ch := range childrenOf(k) {
		name := *ch.ac.GetName()
		raw, err := json.Marshal(ch.ac)
		if err != nil {
			return fmt.Errorf("encoding %T %s: %w", ch.existing, name, err)
		}
		sum := sha256.Sum256(raw)
		hash := hex.EncodeToString(sum[:16])
		err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, ch.existing)
		if err == nil && ch.existing.GetAnnotations()[AnnotationAppliedHash] == hash {
			continue
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading %T %s: %w", ch.existing, name, err)
		}
		ch.annotate(map[string]string{AnnotationAppliedHash: hash})
		if err := c.Apply(ctx, ch.ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %T %s: %w", ch.existing, name, err)
		}
	}
	return nil
}

// applyStatus server-side applies a status subresource owned by the operator's field manager.
func applyStatus(ctx context.Context, c client.Client, obj client.Object, kind string, status any) error {
	return kube.ApplyStatus(ctx, c, vpnv1.GroupVersion.WithKind(kind), obj.GetNamespace(), obj.GetName(), FieldOwner, status)
}
