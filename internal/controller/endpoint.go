package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// resolveEndpoint finds the gateway's public address. Host network works here; the cloud
// providers (OpenStack floating IPs, LoadBalancer Services) are reported as not configured
// until their providers are wired in.
func (r *GatewayReconciler) resolveEndpoint(ctx context.Context, gw *vpnv1.VPNGateway) endpointResult {
	ep := gw.Spec.Endpoint
	switch {
	case ep.HostNetwork != nil:
		if ep.HostNetwork.Address != "" {
			return endpointResult{ep.HostNetwork.Address, ok(ReasonEndpointReady, "host network on node "+ep.HostNetwork.NodeName)}
		}
		node := &corev1.Node{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: ep.HostNetwork.NodeName}, node)
		if apierrors.IsNotFound(err) {
			return endpointResult{"", failed(ReasonNodeNotFound, fmt.Sprintf("node %q does not exist", ep.HostNetwork.NodeName))}
		} else if err != nil {
			return endpointResult{"", failed(ReasonNodeNotFound, fmt.Sprintf("reading node %q: %v", ep.HostNetwork.NodeName, err))}
		}
		for _, want := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
			for _, a := range node.Status.Addresses {
				if a.Type == want {
					return endpointResult{a.Address, ok(ReasonEndpointReady, "host network on node "+node.Name)}
				}
			}
		}
		return endpointResult{"", failed(ReasonNoNodeAddress, fmt.Sprintf("node %q reports no ExternalIP or InternalIP; set spec.endpoint.hostNetwork.address", node.Name))}
	case ep.FloatingIP != "":
		return endpointResult{ep.FloatingIP, failed(ReasonProviderMissing, "the OpenStack endpoint provider is not configured in this operator")}
	case ep.FloatingIPPool != "":
		return endpointResult{"", failed(ReasonProviderMissing, "the OpenStack endpoint provider is not configured in this operator")}
	case ep.LoadBalancer != nil:
		return endpointResult{"", failed(ReasonProviderMissing, "the LoadBalancer endpoint provider is not configured in this operator")}
	}
	return endpointResult{"", failed(ReasonProviderMissing, "spec.endpoint names no provider")}
}
