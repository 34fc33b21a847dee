package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// endpointRequest is what the endpoint providers need to know about a gateway.
// kind is the model kind of the gateway's custom resource (empty: VPNGateway).
func endpointRequest(kind string, gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer) cloud.Request {
	req := cloud.Request{
		Namespace: gw.Namespace, Name: gw.Name, UID: gw.UID, Kind: kind,
		Protocol: model.Protocol(gw.Spec.Protocol),
		Endpoint: modelEndpoint(gw.Spec.Endpoint),
	}
	if gw.Spec.WireGuard != nil {
		req.WireGuardPort = uint16(gw.Spec.WireGuard.ListenPort)
	}
	// The tunnel ports are opened to the peers only when every peer has a fixed address.
	var addrs []netip.Addr
	for _, p := range peers {
		var host string
		switch {
		case p.Spec.IPsec != nil:
			host = p.Spec.IPsec.Peer.Address
		case p.Spec.WireGuard != nil && p.Spec.WireGuard.Endpoint != "":
			if ap, err := netip.ParseAddrPort(p.Spec.WireGuard.Endpoint); err == nil {
				host = ap.Addr().String()
			}
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return req // a dynamic or named peer: open to everyone
		}
		addrs = append(addrs, a)
	}
	if len(peers) > 0 {
		req.PeerAddresses = addrs
	}
	return req
}

// modelEndpoint mirrors the API's endpoint for the providers (the API server validated it).
func modelEndpoint(ep vpnv1.Endpoint) model.Endpoint {
	switch {
	case ep.FloatingIPPool != "":
		return model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: ep.FloatingIPPool}
	case ep.FloatingIP != "":
		a, _ := netip.ParseAddr(ep.FloatingIP)
		return model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: a}
	case ep.LoadBalancer != nil:
		return model.Endpoint{Kind: model.EndpointLoadBalancer, LoadBalancerClass: ep.LoadBalancer.LoadBalancerClass, Annotations: ep.LoadBalancer.Annotations}
	case ep.HostNetwork != nil:
		a, _ := netip.ParseAddr(ep.HostNetwork.Address)
		return model.Endpoint{Kind: model.EndpointHostNetwork, NodeName: ep.HostNetwork.NodeName, NodeNames: ep.HostNetwork.Nodes, HostAddress: a}
	}
	return model.Endpoint{}
}

// ensureEndpoint provisions the public endpoint; a transient failure is returned for retry
// with backoff, everything else lands in the EndpointReady condition.
func (r *GatewayReconciler) ensureEndpoint(ctx context.Context, s *gatewayScope) (time.Duration, error) {
	req := endpointRequest(s.kind, s.gw, s.peers)
	req.Standby = model.StandbyOf(s.kind, s.gw, r.Options.Model)
	res, err := r.Endpoints.Ensure(ctx, req)
	s.endpoint = endpointResult{publicAddress: res.PublicAddress, pod: res.Pod}
	switch {
	case res.Ready:
		s.endpoint.outcome = ok(cloud.ReasonReady, res.Message)
	default:
		reason := res.Reason
		if reason == "" {
			reason = cloud.ReasonProvisioning
		}
		s.endpoint.outcome = failed(reason, res.Message)
	}
	if err != nil {
		if e, ok := cloud.AsError(err); ok && e.Terminal {
			return res.RetryAfter, nil
		}
		return 0, err
	}
	return res.RetryAfter, nil
}

// uplinkOf is the model's view of the endpoint's second NIC; nil without one (or with an
// address the provider did not fill in, which never happens for a rendered attachment).
func uplinkOf(att *cloud.NetworkAttachment) *model.Uplink {
	if att == nil {
		return nil
	}
	addr, err := netip.ParsePrefix(att.Address)
	if err != nil {
		return nil
	}
	u := &model.Uplink{Interface: cloud.NetworkAttachmentInterface, Address: addr}
	if gw, err := netip.ParseAddr(att.GatewayIP); err == nil {
		u.Gateway = gw
	}
	return u
}

// networkAttachment is the Multus NetworkAttachmentDefinition giving the pod its cloud port.
func networkAttachment(att *cloud.NetworkAttachment, owner metav1.OwnerReference) (*unstructured.Unstructured, error) {
	var cfg map[string]any
	if err := json.Unmarshal([]byte(att.Config), &cfg); err != nil {
		return nil, fmt.Errorf("network attachment config is not JSON: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"config": att.Config}}}
	u.SetAPIVersion("k8s.cni.cncf.io/v1")
	u.SetKind("NetworkAttachmentDefinition")
	u.SetNamespace(att.Namespace)
	u.SetName(att.Name)
	u.SetLabels(map[string]string{LabelManagedBy: LabelManagedByValue})
	u.SetOwnerReferences([]metav1.OwnerReference{owner})
	return u, nil
}

func applyNetworkAttachment(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying NetworkAttachmentDefinition %s (is Multus installed?): %w", u.GetName(), err)
	}
	return nil
}
