// Package cloud provisions a gateway's public endpoint: where its public address comes from
// and what the gateway pod needs to receive the tunnel traffic. One small interface, Provider,
// with idempotent, ctx-first Ensure and Delete, is implemented by
//
//   - openstack: a Neutron security group, port and floating IP (allocated or pinned), and the
//     Multus network attachment that gives the gateway pod that port as its second NIC;
//   - loadbalancer: a Service of type LoadBalancer selecting the gateway pod;
//   - hostnetwork: the gateway pod in a node's network namespace.
//
// Providers are chosen by the gateway's endpoint kind through a Chooser built with explicit
// constructors (no init() registries). Every resource a provider creates is named or tagged
// with the gateway's UID, so an Ensure after a crash between create and status write adopts
// what exists instead of creating it twice.
//
// Outcomes: Ensure returns (Result, nil) for everything the reconciler reports as a condition
// — Ready, still Provisioning, or a terminal problem (quota, credentials, not found,
// conflict) with Terminal set — and (Result, *Error) with Terminal false for transient
// failures (5xx, timeouts) that the reconciler retries with backoff.
package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Reasons of the EndpointReady condition.
const (
	// ReasonProvisioning: the endpoint is being created or waits for an address; also the
	// reason of transient errors (retried with backoff).
	ReasonProvisioning = "Provisioning"
	// ReasonReady: the endpoint has its public address.
	ReasonReady = "Ready"
	// ReasonQuotaExceeded: the cloud refused to create a resource over quota.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonNotFound: something the endpoint names does not exist (external network, pinned
	// floating IP, node, or a node without an address).
	ReasonNotFound = "NotFound"
	// ReasonAuthFailed: the cloud rejected the operator's credentials (HTTP 401/403).
	ReasonAuthFailed = "AuthFailed"
	// ReasonConflict: the endpoint is held by someone else (a pinned floating IP associated
	// with another port, two host-network gateways wanting the same node).
	ReasonConflict = "Conflict"
	// ReasonProviderNotConfigured: the operator runs without the provider the endpoint needs.
	ReasonProviderNotConfigured = "ProviderNotConfigured"
	// ReasonInvalidConfiguration: the cloud rejected a request as malformed (HTTP 400) or the
	// provider's own configuration cannot be used (a NAD template that is not JSON).
	ReasonInvalidConfiguration = "InvalidConfiguration"
)

// Well-known tunnel ports.
const (
	IKEPort              uint16 = 500
	NATTPort             uint16 = 4500
	DefaultWireGuardPort uint16 = vpnv1.DefaultWireGuardListenPort
	// ESPProtocol is the IP protocol number of ESP.
	ESPProtocol = 50
)

// Request is what a provider needs to know about one gateway.
type Request struct {
	Namespace string
	Name      string
	// UID of the VPNGateway: every cloud resource is named or tagged with it, and the
	// LoadBalancer Service's controller reference points at it.
	UID types.UID
	// Kind of the gateway's custom resource: empty for a VPNGateway, model.KindIPsecGateway
	// for a legacy IPsecGateway (its objects in the cluster are named and owned accordingly).
	Kind     string
	Protocol model.Protocol
	// WireGuardPort is the device's listen port (0 means 51820); unused for IPsec.
	WireGuardPort uint16
	Endpoint      model.Endpoint
	// PeerAddresses, when every peer's address is a fixed IP, restricts who may reach the
	// tunnel ports; nil allows everyone.
	PeerAddresses []netip.Addr
	// Standby: the gateway runs an active and a standby pod (model.StandbyOf); only the
	// active one may receive the tunnels.
	Standby bool
}

// Validate checks the fields every provider relies on.
func (r Request) Validate() error {
	switch {
	case r.Namespace == "" || r.Name == "":
		return errors.New("request names no gateway")
	case r.UID == "":
		return fmt.Errorf("gateway %s/%s has no UID", r.Namespace, r.Name)
	case r.Protocol != model.ProtocolIPsec && r.Protocol != model.ProtocolWireGuard:
		return fmt.Errorf("gateway %s/%s: unknown protocol %q", r.Namespace, r.Name, r.Protocol)
	}
	return nil
}

// String names the gateway for messages.
func (r Request) String() string { return r.Namespace + "/" + r.Name }

// Port is a transport protocol and port number.
type Port struct {
	Protocol string // "udp"
	Port     uint16
}

// TunnelPorts are the UDP ports the gateway receives its tunnels on: IKE and NAT-T for IPsec
// (ESP itself is IP protocol 50, see ESPProtocol), the listen port for WireGuard.
func TunnelPorts(p model.Protocol, wireGuardPort uint16) []Port {
	if p == model.ProtocolWireGuard {
		if wireGuardPort == 0 {
			wireGuardPort = DefaultWireGuardPort
		}
		return []Port{{"udp", wireGuardPort}}
	}
	return []Port{{"udp", IKEPort}, {"udp", NATTPort}}
}

// Result is the endpoint's state, for the EndpointReady condition and the gateway's pod.
type Result struct {
	// PublicAddress peers connect to (empty until known). For IPsec it is also the default
	// local ID.
	PublicAddress string
	// Ready is true when PublicAddress is final and the pod can be started with Pod.
	Ready bool
	// Reason and Message of the EndpointReady condition (Reason* constants).
	Reason  string
	Message string
	// Pod is what the gateway pod needs for this endpoint.
	Pod PodNetwork
	// Terminal: retrying soon will not help (configuration, quota, credentials, conflict);
	// do not requeue with backoff. RetryAfter may still ask for a slow re-check, because
	// state outside the cluster (a freed quota, a rotated credential) is not watched.
	Terminal bool
	// RetryAfter, when non-zero, is when Ensure should be called again (waiting for a load
	// balancer address, or a slow re-check of a terminal condition).
	RetryAfter time.Duration
}

// PodNetwork is what the gateway pod's spec needs.
type PodNetwork struct {
	// HostNetwork runs the pod in the node's network namespace (spec.hostNetwork, and
	// dnsPolicy ClusterFirstWithHostNet).
	HostNetwork bool
	// NodeName pins the pod to a node (spec.nodeName or a node affinity on
	// kubernetes.io/hostname).
	NodeName string
	// NetworkAttachment, when set, is a Multus NetworkAttachmentDefinition the operator
	// creates (owned by the gateway) and the pod requests as its second NIC.
	NetworkAttachment *NetworkAttachment
}

// NetworkAttachment describes the Multus NetworkAttachmentDefinition (k8s.cni.cncf.io/v1)
// giving the gateway pod its cloud port: create it as Namespace/Name with spec.config =
// Config, and annotate the pod with k8s.v1.cni.cncf.io/networks: Namespace/Name.
type NetworkAttachment struct {
	Name      string
	Namespace string
	// Config is the NAD's spec.config: the CNI configuration JSON, with the port's MAC and
	// address filled in.
	Config string
	// PortID, MAC and FixedIP of the cloud port behind the second NIC.
	PortID  string
	MAC     string
	FixedIP string
	// Address is FixedIP with its subnet's prefix length; GatewayIP the subnet's gateway
	// (empty when the subnet has none): the gateway's replies leave through the NIC to it.
	Address   string
	GatewayIP string
}

// NetworksAnnotation is the pod annotation through which Multus attaches extra networks.
const NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"

// NetworkAttachmentInterface is the name of the second NIC inside the gateway pod.
const NetworkAttachmentInterface = "net1"

// PodAnnotation is the value of the gateway pod's NetworksAnnotation: this attachment as
// NetworkAttachmentInterface (the MAC and address are in the NAD's config).
func (a *NetworkAttachment) PodAnnotation() string {
	b, _ := json.Marshal([]map[string]string{{
		"name": a.Name, "namespace": a.Namespace, "interface": NetworkAttachmentInterface,
	}})
	return string(b)
}

// Provider provisions one kind of endpoint. Both methods are idempotent and safe to call
// again after any failure, including a crash between a create and the status write.
type Provider interface {
	// Ensure creates or adopts the endpoint's resources and reports its state. A transient
	// failure is returned as an error (an *Error with Terminal false, Reason Provisioning);
	// everything else, including terminal failures, as a Result with a nil error.
	Ensure(ctx context.Context, req Request) (Result, error)
	// Delete removes what Ensure created (a pinned floating IP is only disassociated). It
	// returns nil once nothing is left; an error means call it again.
	Delete(ctx context.Context, req Request) error
}

// Error is a provider failure with the condition reason it maps to. Its message never
// contains credentials.
type Error struct {
	Reason  string
	Message string
	// Terminal: do not retry with backoff (see Result.Terminal).
	Terminal   bool
	RetryAfter time.Duration
	// Err is the cause, when it is safe to keep (context errors, network timeouts).
	Err error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Transient is a retryable failure (reason Provisioning).
func Transient(cause error, format string, args ...any) *Error {
	return &Error{Reason: ReasonProvisioning, Message: fmt.Sprintf(format, args...), Err: cause}
}

// Terminalf is a failure retrying will not fix.
func Terminalf(reason string, retryAfter time.Duration, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...), Terminal: true, RetryAfter: retryAfter}
}

// AsError finds the *Error in err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// ResultFromError is the condition to report for an error returned by a provider: its
// reason and message when it is an *Error, Provisioning with the error's text otherwise.
func ResultFromError(err error) Result {
	if err == nil {
		return Result{}
	}
	if e, ok := AsError(err); ok {
		return Result{Reason: e.Reason, Message: e.Message, Terminal: e.Terminal, RetryAfter: e.RetryAfter}
	}
	return Result{Reason: ReasonProvisioning, Message: err.Error()}
}

// Failed turns a terminal *Error into the Result Ensure returns for it.
func Failed(e *Error) Result {
	return Result{Reason: e.Reason, Message: e.Message, Terminal: true, RetryAfter: e.RetryAfter}
}

// Settle is how a provider ends Ensure on failure: terminal errors become a Result with a
// nil error, transient ones stay errors (with their condition in the Result as well).
func Settle(err error) (Result, error) {
	e, ok := AsError(err)
	if !ok {
		e = Transient(err, "%v", err)
	}
	if e.Terminal {
		return Failed(e), nil
	}
	return ResultFromError(e), e
}

// Chooser picks the provider for a gateway's endpoint kind.
type Chooser struct {
	openstack, loadBalancer, hostNetwork Provider
}

// NewChooser builds a Chooser. A nil provider means the operator runs without it: gateways
// asking for it get ProviderNotConfigured (terminal).
func NewChooser(openstack, loadBalancer, hostNetwork Provider) *Chooser {
	return &Chooser{openstack: openstack, loadBalancer: loadBalancer, hostNetwork: hostNetwork}
}

// For returns the provider of kind. An unconfigured provider is returned as one whose Ensure
// reports ProviderNotConfigured and whose Delete does nothing; an unknown kind is an error.
func (c *Chooser) For(kind model.EndpointKind) (Provider, error) {
	var p Provider
	var what string
	switch kind {
	case model.EndpointFloatingIP, model.EndpointFloatingIPPool:
		p, what = c.openstack, "OpenStack"
	case model.EndpointLoadBalancer:
		p, what = c.loadBalancer, "LoadBalancer"
	case model.EndpointHostNetwork:
		p, what = c.hostNetwork, "host network"
	default:
		return nil, fmt.Errorf("unknown endpoint kind %q", kind)
	}
	if p == nil {
		return notConfigured{what: what, kind: kind}, nil
	}
	return p, nil
}

// Ensure calls Ensure on the provider of req.Endpoint.Kind.
func (c *Chooser) Ensure(ctx context.Context, req Request) (Result, error) {
	p, err := c.For(req.Endpoint.Kind)
	if err != nil {
		return Failed(Terminalf(ReasonInvalidConfiguration, 0, "gateway %s: %v", req, err)), nil
	}
	return p.Ensure(ctx, req)
}

// Delete calls Delete on the provider of req.Endpoint.Kind.
func (c *Chooser) Delete(ctx context.Context, req Request) error {
	p, err := c.For(req.Endpoint.Kind)
	if err != nil {
		return nil // nothing was ever created for an unknown kind
	}
	return p.Delete(ctx, req)
}

// DeleteAll calls Delete on every configured provider, for a gateway being finalized whose
// endpoint kind may have changed during its life. It stops at the first error.
// HandOver releases a migrated gateway's cloud endpoint to its successor without giving up
// the address: an OpenStack floating IP is disassociated and untagged, never released (see
// HandOverer). Other endpoints need nothing: a host address or a LoadBalancer Service stays.
func (c *Chooser) HandOver(ctx context.Context, req Request) error {
	switch req.Endpoint.Kind {
	case model.EndpointFloatingIP, model.EndpointFloatingIPPool:
		if h, ok := c.openstack.(HandOverer); ok {
			return h.HandOver(ctx, req)
		}
	}
	return nil
}

// HandOverer is a Provider whose endpoint can be handed to another gateway.
type HandOverer interface {
	HandOver(ctx context.Context, req Request) error
}

func (c *Chooser) DeleteAll(ctx context.Context, req Request) error {
	for _, p := range []Provider{c.openstack, c.loadBalancer, c.hostNetwork} {
		if p == nil {
			continue
		}
		if err := p.Delete(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

type notConfigured struct {
	what string
	kind model.EndpointKind
}

func (n notConfigured) Ensure(_ context.Context, req Request) (Result, error) {
	return Failed(Terminalf(ReasonProviderNotConfigured, 0,
		"gateway %s asks for a %s endpoint, but the %s endpoint provider is not configured in this operator", req, n.kind, n.what)), nil
}

func (notConfigured) Delete(context.Context, Request) error { return nil }

// Node is the node a gateway pod was scheduled to, as an uplink binding needs it.
type Node struct {
	Name string
	// ProviderID is the node's spec.providerID ("openstack:///<server ID>" on OpenStack).
	ProviderID string
}

// UplinkBinder is implemented by a provider whose NetworkAttachment carries traffic only once
// the cloud delivers the port's frames to the node the pod runs on (OpenStack: the port a
// subport of that node's trunk). BindUplink moves the gateway's port to node, wherever it was
// bound before, and is idempotent; changed reports whether it moved anything, message says
// where the port is bound now. A failure is an *Error like Ensure's.
type UplinkBinder interface {
	BindUplink(ctx context.Context, req Request, node Node) (changed bool, message string, err error)
}
