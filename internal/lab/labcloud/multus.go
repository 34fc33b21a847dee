package labcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
)

// NetworkSelection is one entry of a pod's k8s.v1.cni.cncf.io/networks annotation in its JSON
// form (the form the operator writes).
type NetworkSelection struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Interface string `json:"interface,omitempty"`
}

// Selections reads a pod's networks annotation; none when it has none.
func Selections(pod *corev1.Pod) ([]NetworkSelection, error) {
	v := pod.Annotations[cloud.NetworksAnnotation]
	if v == "" {
		return nil, nil
	}
	var sel []NetworkSelection
	if err := json.Unmarshal([]byte(v), &sel); err != nil {
		return nil, fmt.Errorf("%s of pod %s/%s is not the JSON form: %w", cloud.NetworksAnnotation, pod.Namespace, pod.Name, err)
	}
	for i := range sel {
		if sel[i].Namespace == "" {
			sel[i].Namespace = pod.Namespace
		}
		if sel[i].Interface == "" {
			sel[i].Interface = fmt.Sprintf("net%d", i+1)
		}
	}
	return sel, nil
}

// nadConfig is a NetworkAttachmentDefinition's spec.config.
func nadConfig(ctx context.Context, c client.Reader, s NetworkSelection) (string, error) {
	nad := &unstructured.Unstructured{}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	if err := c.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Name}, nad); err != nil {
		return "", fmt.Errorf("NetworkAttachmentDefinition %s/%s: %w", s.Namespace, s.Name, err)
	}
	config, _, _ := unstructured.NestedString(nad.Object, "spec", "config")
	if config == "" {
		return "", fmt.Errorf("NetworkAttachmentDefinition %s/%s has no spec.config", s.Namespace, s.Name)
	}
	return config, nil
}

// Dispatch is Multus' part of a pod sandbox's CNI ADD or DEL, after the cluster network
// (eth0) is set up: it reads the pod's networks annotation and runs each named
// NetworkAttachmentDefinition's config, unchanged, into the pod's namespace as the interface
// the annotation names. ADD fails when a NAD is missing (the pod does not start without its
// NIC, as with Multus); DEL of a pod or NAD that is gone succeeds (CNI DEL must), deleting
// what it can.
func (a *Attacher) Dispatch(ctx context.Context, c client.Reader, add bool, p Pod) error {
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, pod); err != nil {
		if !add && apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	sel, err := Selections(pod)
	if err != nil {
		return err
	}
	if p.UID == "" {
		p.UID = string(pod.UID)
	}
	var errs []error
	for _, s := range sel {
		config, err := nadConfig(ctx, c, s)
		if err != nil {
			if !add && apierrors.IsNotFound(err) {
				continue
			}
			errs = append(errs, err)
			continue
		}
		q := p
		q.IfName = s.Interface
		if add {
			_, err = a.Add(ctx, config, q)
		} else {
			err = a.Del(ctx, config, q)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
