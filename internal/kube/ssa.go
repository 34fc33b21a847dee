// Package kube holds small helpers for talking to the API server shared by the operator and
// the gateway agent.
package kube

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyStatus server-side applies status (any struct that converts to the object's status)
// on the status subresource of the named object, as fieldOwner. Only the fields in status are
// claimed, so several field managers can share one status (e.g. the operator's Authorized
// condition and the agent's Connected condition).
func ApplyStatus(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, namespace, name, fieldOwner string, status any) error {
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing %s %s/%s status: %w", gvk.Kind, namespace, name, err)
	}
	return nil
}
