// Package loadbalancer is the endpoint provider for any cluster with a load balancer
// implementation: a Service of type LoadBalancer, "<gateway>-gateway-lb", selecting the
// gateway pod on its tunnel ports (UDP 500 and 4500 for IPsec, the listen port for
// WireGuard) with externalTrafficPolicy Local, so the pod sees the peers' real addresses. A
// gateway with a standby has two pods: the Service selects the active one only.
// The public address is the first IP in the Service's load balancer ingress status.
//
// The Service is server-side applied, owned by the VPNGateway (controller reference), and
// labelled app.kubernetes.io/managed-by=bnerd-vpn-operator; an unchanged Service is not
// re-applied (hash annotation), so a converged gateway costs no writes.
package loadbalancer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// Defaults of Config.
const (
	DefaultFieldOwner   = "bnerd-vpn-operator"
	DefaultPendingRetry = 5 * time.Second
	// AnnotationAppliedHash holds the hash of the configuration last applied.
	AnnotationAppliedHash = "vpn.bnerd.net/applied-hash"
)

// Port names on the Service (the same as the gateway pod's container ports).
const (
	PortIKE       = children.PortIKE
	PortNATT      = children.PortNATT
	PortWireGuard = children.PortWireGuard
)

// ServiceName is the name of a VPNGateway's LoadBalancer Service.
func ServiceName(gateway string) string { return gateway + "-gateway-lb" }

// ServiceNameFor is the name of the LoadBalancer Service of a gateway of the given model
// kind: a legacy IPsecGateway's ends in "-ipsecgw-lb", never a VPNGateway's.
func ServiceNameFor(kind, gateway string) string {
	if kind == model.KindIPsecGateway {
		return children.NameFor(kind, gateway) + "-lb"
	}
	return ServiceName(gateway)
}

// Config configures the provider.
type Config struct {
	// FieldOwner is the server-side apply field manager; DefaultFieldOwner when empty.
	FieldOwner string
	// PendingRetry is the RetryAfter while the load balancer has no address yet (when the
	// reconciler does not watch the Service); DefaultPendingRetry when zero.
	PendingRetry time.Duration
}

// Provider is the LoadBalancer endpoint provider.
type Provider struct {
	c   client.Client
	cfg Config
}

var _ cloud.Provider = (*Provider)(nil)

// New builds a provider writing through c. Reads go through c as well: with the manager's
// cached client, Services labelled app.kubernetes.io/managed-by=bnerd-vpn-operator must be
// in the cache (and watched, to see the address arrive).
func New(c client.Client, cfg Config) *Provider {
	if cfg.FieldOwner == "" {
		cfg.FieldOwner = DefaultFieldOwner
	}
	if cfg.PendingRetry <= 0 {
		cfg.PendingRetry = DefaultPendingRetry
	}
	return &Provider{c: c, cfg: cfg}
}

// Service renders the gateway's Service as an apply configuration.
func Service(req cloud.Request) *corev1ac.ServiceApplyConfiguration {
	spec := corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeLoadBalancer).
		WithExternalTrafficPolicy(corev1.ServiceExternalTrafficPolicyLocal).
		// The pod's readiness is its agent's; the tunnels do not depend on it (charon and the
		// WireGuard device run in containers of their own). A restarting agent must not take
		// the gateway out of its load balancer: that would cut every tunnel for as long.
		WithPublishNotReadyAddresses(true).
		WithSelector(selector(req))
	names := map[uint16]string{cloud.IKEPort: PortIKE, cloud.NATTPort: PortNATT}
	for _, p := range cloud.TunnelPorts(req.Protocol, req.WireGuardPort) {
		name := names[p.Port]
		if req.Protocol == model.ProtocolWireGuard {
			name = PortWireGuard
		}
		spec.WithPorts(corev1ac.ServicePort().WithName(name).WithProtocol(corev1.ProtocolUDP).
			WithPort(int32(p.Port)).WithTargetPort(intOrString(p.Port)))
	}
	if c := req.Endpoint.LoadBalancerClass; c != "" {
		spec.WithLoadBalancerClass(c)
	}
	apiVersion, kind := vpnv1.GroupVersion.String(), "VPNGateway"
	if req.Kind == model.KindIPsecGateway {
		apiVersion, kind = ipsecv1.GroupVersion.String(), model.KindIPsecGateway
	}
	svc := corev1ac.Service(ServiceNameFor(req.Kind, req.Name), req.Namespace).
		WithLabels(children.LabelsFor(req.Kind, req.Name)).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(apiVersion).WithKind(kind).
			WithName(req.Name).WithUID(req.UID).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(spec)
	if len(req.Endpoint.Annotations) > 0 {
		svc.WithAnnotations(req.Endpoint.Annotations)
	}
	return svc
}

// selector selects the gateway's pod; with a standby only the active one (the operator
// labels the pod holding the gateway's Lease children.LabelRole: children.RoleActive).
func selector(req cloud.Request) map[string]string {
	sel := children.SelectorLabelsFor(req.Kind, req.Name)
	if req.Standby {
		sel[children.LabelRole] = children.RoleActive
	}
	return sel
}

// Ensure implements cloud.Provider.
func (p *Provider) Ensure(ctx context.Context, req cloud.Request) (cloud.Result, error) {
	if err := req.Validate(); err != nil {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "%v", err)), nil
	}
	if req.Endpoint.Kind != model.EndpointLoadBalancer {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s: the LoadBalancer provider cannot serve a %q endpoint", req, req.Endpoint.Kind)), nil
	}
	name := ServiceNameFor(req.Kind, req.Name)
	svc := Service(req)
	raw, err := json.Marshal(svc)
	if err != nil {
		return cloud.Settle(fmt.Errorf("encoding Service %s: %w", name, err))
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:16])

	existing := &corev1.Service{}
	err = p.c.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: name}, existing)
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return cloud.Settle(p.apiError(err, "reading Service "+name))
	}
	if existing != nil {
		if owner := metav1.GetControllerOf(existing); owner == nil || owner.UID != req.UID {
			if owner != nil && owner.Kind == "VPNGateway" && owner.Name == req.Name && existing.DeletionTimestamp != nil {
				return cloud.Result{Reason: cloud.ReasonProvisioning, Message: fmt.Sprintf("waiting for Service %s of an earlier gateway %s to be deleted", name, req), RetryAfter: p.cfg.PendingRetry}, nil
			}
			if owner != nil && owner.Kind == "VPNGateway" && owner.Name == req.Name {
				// Left by an earlier gateway of the same name (garbage collection pending).
				if err := p.c.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}); client.IgnoreNotFound(err) != nil {
					return cloud.Settle(p.apiError(err, "deleting Service "+name+" of an earlier gateway"))
				}
				return cloud.Result{Reason: cloud.ReasonProvisioning, Message: fmt.Sprintf("replacing Service %s left by an earlier gateway %s", name, req), RetryAfter: p.cfg.PendingRetry}, nil
			}
			return cloud.Failed(cloud.Terminalf(cloud.ReasonConflict, time.Minute,
				"Service %s/%s exists and is not this gateway's; delete or rename it", req.Namespace, name)), nil
		}
		if ptr.Deref(existing.Spec.LoadBalancerClass, "") != req.Endpoint.LoadBalancerClass {
			// The class is immutable: a new class means a new Service (and a new address).
			if err := p.c.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}); client.IgnoreNotFound(err) != nil {
				return cloud.Settle(p.apiError(err, "deleting Service "+name+" to change its loadBalancerClass"))
			}
			return cloud.Result{Reason: cloud.ReasonProvisioning, Message: fmt.Sprintf("recreating Service %s for loadBalancerClass %q", name, req.Endpoint.LoadBalancerClass), RetryAfter: p.cfg.PendingRetry}, nil
		}
	}
	if existing == nil || existing.Annotations[AnnotationAppliedHash] != hash {
		svc.WithAnnotations(map[string]string{AnnotationAppliedHash: hash})
		if err := p.c.Apply(ctx, svc, client.FieldOwner(p.cfg.FieldOwner), client.ForceOwnership); err != nil {
			return cloud.Settle(p.apiError(err, "applying Service "+name))
		}
	}
	if existing != nil {
		for _, in := range existing.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return cloud.Result{
					PublicAddress: in.IP, Ready: true, Reason: cloud.ReasonReady,
					Message: fmt.Sprintf("load balancer Service %s has address %s", name, in.IP),
				}, nil
			}
		}
		for _, in := range existing.Status.LoadBalancer.Ingress {
			if in.Hostname != "" {
				return cloud.Result{Reason: cloud.ReasonProvisioning, RetryAfter: 30 * time.Second,
					Message: fmt.Sprintf("load balancer Service %s reports only the hostname %s; the gateway needs an IP address", name, in.Hostname)}, nil
			}
		}
	}
	msg := fmt.Sprintf("waiting for the load balancer to give Service %s an address", name)
	if c := req.Endpoint.LoadBalancerClass; c != "" {
		msg += fmt.Sprintf(" (loadBalancerClass %s)", c)
	}
	return cloud.Result{Reason: cloud.ReasonProvisioning, Message: msg, RetryAfter: p.cfg.PendingRetry}, nil
}

// Delete implements cloud.Provider: the gateway's Service goes (if it is the gateway's).
func (p *Provider) Delete(ctx context.Context, req cloud.Request) error {
	name := ServiceNameFor(req.Kind, req.Name)
	existing := &corev1.Service{}
	err := p.c.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: name}, existing)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return p.apiError(err, "reading Service "+name)
	}
	if owner := metav1.GetControllerOf(existing); owner == nil || owner.UID != req.UID {
		return nil // not ours
	}
	if existing.DeletionTimestamp != nil {
		return nil
	}
	if err := p.c.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}); client.IgnoreNotFound(err) != nil {
		return p.apiError(err, "deleting Service "+name)
	}
	return nil
}

// apiError maps a Kubernetes API error: forbidden -> AuthFailed and invalid -> InvalidConfiguration
// (both terminal), anything else transient.
func (p *Provider) apiError(err error, what string) error {
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return cloud.Terminalf(cloud.ReasonAuthFailed, time.Minute, "%s: the operator is not allowed to: %v", what, err)
	case apierrors.IsInvalid(err):
		return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "%s: %v", what, err)
	}
	return cloud.Transient(err, "%s: %v", what, err)
}

func intOrString(port uint16) intstr.IntOrString { return intstr.FromInt32(int32(port)) }
