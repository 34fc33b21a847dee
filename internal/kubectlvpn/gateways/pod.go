package gateways

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// Pod finds the gateway's pod (label vpn.bnerd.net/gateway): the active one of a gateway with a
// standby, else a running, ready one first, the newest among equals. The string says why there is none to talk to.
func Pod(ctx context.Context, c client.Client, gw *vpnv1.VPNGateway) (*corev1.Pod, string) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(gw.Namespace), client.MatchingLabels(children.SelectorLabels(gw.Name))); err != nil {
		return nil, fmt.Sprintf("listing the gateway's pods failed: %v", err)
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Sprintf("no pod with label %s=%s", children.LabelGateway, gw.Name)
	}
	rank := func(p *corev1.Pod) int {
		switch {
		case p.DeletionTimestamp != nil:
			return 0
		case p.Status.Phase == corev1.PodRunning && PodReady(p) && p.Labels[children.LabelRole] == children.RoleActive:
			return 4
		case p.Status.Phase == corev1.PodRunning && PodReady(p):
			return 3
		case p.Status.Phase == corev1.PodRunning:
			return 2
		}
		return 1
	}
	sort.SliceStable(pods.Items, func(i, j int) bool {
		a, b := &pods.Items[i], &pods.Items[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra > rb
		}
		return a.CreationTimestamp.After(b.CreationTimestamp.Time)
	})
	p := pods.Items[0]
	return &p, ""
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// metricsPort is the agent's port named "metrics" in the pod, else the default 9090.
func metricsPort(p *corev1.Pod) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == children.PortMetrics && port.ContainerPort > 0 {
				return port.ContainerPort
			}
		}
	}
	return children.DefaultMetricsPort
}

// PodHasContainer reports whether the pod runs a container of that name.
func PodHasContainer(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}
