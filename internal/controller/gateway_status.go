package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// Gateway condition reasons set by the operator (model reasons are used as they are).
const (
	ReasonReady               = "Ready"
	ReasonAllocated           = "Allocated"
	ReasonPoolExhausted       = "PoolExhausted"
	ReasonServiceCIDRConflict = "ServiceCIDRConflict"
	// ReasonNamespaceLimitReached: the gateway's namespace holds as many gateways or service
	// addresses as the operator allows it (NamespaceLimits).
	ReasonNamespaceLimitReached = "NamespaceLimitReached"
	// ReasonServiceCIDRReserved: spec.serviceCIDR overlaps the cluster's own ranges.
	ReasonServiceCIDRReserved = "ServiceCIDRReserved"
	ReasonServiceCIDRChanged  = "ServiceCIDRChanged"
	ReasonValid               = "Valid"
	ReasonAddressesPending    = "AddressesPending"
	ReasonNoConflicts         = "NoConflicts"
	ReasonApplied             = "Applied"
	ReasonApplyFailed         = "ApplyFailed"
	ReasonRenderFailed        = "RenderFailed"
	ReasonConfigInvalid       = "ConfigInvalid"
	ReasonAvailable           = "Available"
	ReasonUnavailable         = "Unavailable"
	ReasonNotCreated          = "NotCreated"
	// ReasonNotPermitted: the gateway asks for a host-network endpoint in a namespace the
	// cluster admin has not allowed one; nothing is rendered and no pod runs.
	ReasonNotPermitted = "NotPermitted"
	// ReasonEndpointBlocked: the endpoint is not permitted or held by another gateway
	// (Conflict); nothing is rendered and no pod runs until it is.
	ReasonEndpointBlocked = "EndpointBlocked"
	// ReasonChildRestored (an Event): a child of the gateway was changed outside the operator
	// and put back to its rendering.
	ReasonChildRestored = "ChildRestored"

	// ConditionGrantsValid: every grant can be honoured (no reverse-exposure conflicts,
	// no overlapping peer subnets).
	ConditionGrantsValid = "GrantsValid"
)

// conditionOrder is the order of the gateway's conditions; Ready summarises the others.
var conditionOrder = []string{
	vpnv1.ConditionAddressesAllocated,
	vpnv1.ConditionConfigValid,
	ConditionGrantsValid,
	ConditionKeyReady,
	vpnv1.ConditionEndpointReady,
	vpnv1.ConditionRendered,
	vpnv1.ConditionGatewayAvailable,
}

// outcome is one condition's status, reason and message.
type outcome struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

func ok(reason, msg string) outcome     { return outcome{metav1.ConditionTrue, reason, msg} }
func failed(reason, msg string) outcome { return outcome{metav1.ConditionFalse, reason, msg} }

// endpointResult is what the endpoint phase found.
type endpointResult struct {
	publicAddress string
	outcome       outcome
	pod           cloud.PodNetwork
}

// gatewayScope carries what one reconcile pass of a gateway found; status is computed from it
// in one place (computeGatewayStatus).
type gatewayScope struct {
	gw *vpnv1.VPNGateway
	// stale are the resourceVersions of gw older than this pass's writes (written.recall).
	stale []string
	// kind is the model kind of the declaring custom resource (empty: the VPNGateway gw; or
	// model.KindIPsecGateway: gw and peers are translated from legacy), obj that resource
	// (events are recorded on it, it owns the children).
	kind        string
	obj         client.Object
	legacy      *ipsecv1.IPsecGateway
	peers       []vpnv1.VPNPeer
	serviceCIDR netip.Prefix
	addresses   outcome
	// input is what the model was built from; built the model (nil when invalid: buildErrs).
	input      model.Input
	built      *model.Gateway
	buildErrs  []model.Error
	rendered   outcome
	endpoint   endpointResult
	deployment *appsv1.Deployment
	// blocked: the endpoint may not be used (not permitted, or another gateway's): no children.
	blocked bool
	// key is the KeyReady outcome; publicKey the WireGuard public key.
	key       outcome
	publicKey string
	// reverseServices: exposure name -> its Service, for those applied; reverseProblems: the
	// Services that could not be (name taken).
	reverseServices map[string]string
	reverseProblems []model.Problem
	// availability: the election of a gateway with a standby (nil without one).
	availability *vpnv1.AvailabilityStatus
	// rolloutPending: why the gateway keeps the images its pod runs (RolloutPending; empty:
	// it does not), and how soon it looks again; rolloutGated: the pass asked the rollout gate.
	rolloutPending string
	rolloutRetry   time.Duration
	rolloutGated   bool
}

// owner is the controller reference every child of the gateway carries: to the object that
// declared it, so garbage collection follows that object.
func (s *gatewayScope) owner() metav1.OwnerReference {
	if s.kind == model.KindIPsecGateway {
		return metav1.OwnerReference{
			APIVersion: ipsecv1.GroupVersion.String(), Kind: model.KindIPsecGateway,
			Name: s.legacy.Name, UID: s.legacy.UID,
			Controller: ptr(true), BlockOwnerDeletion: ptr(true),
		}
	}
	return gatewayOwner(s.gw)
}

// computeGatewayStatus is the gateway's whole status, derived from the scope. Conditions keep
// their lastTransitionTime while their status does not change.
func computeGatewayStatus(s *gatewayScope, now metav1.Time) vpnv1.VPNGatewayStatus {
	gw := s.gw
	st := vpnv1.VPNGatewayStatus{
		ObservedGeneration: gw.Generation,
		ServiceCIDR:        gw.Status.ServiceCIDR,
		PublicAddress:      s.endpoint.publicAddress,
		Exposures:          gw.Status.Exposures,
		ReverseExposures:   gw.Status.ReverseExposures,
		Peers:              int32(len(s.peers)),
		AuthorizedPeers:    gw.Status.AuthorizedPeers,
		Availability:       s.availability,
	}
	if s.serviceCIDR.IsValid() {
		st.ServiceCIDR = s.serviceCIDR.String()
	}

	outcomes := map[string]outcome{
		vpnv1.ConditionAddressesAllocated: s.addresses,
		vpnv1.ConditionEndpointReady:      s.endpoint.outcome,
		vpnv1.ConditionRendered:           s.rendered,
		vpnv1.ConditionGatewayAvailable:   deploymentOutcome(s.deployment),
		ConditionKeyReady:                 s.key,
	}
	st.WireGuardPublicKey = s.publicKey
	switch {
	case s.built != nil:
		outcomes[vpnv1.ConditionConfigValid] = ok(ReasonValid, "gateway and peers form a valid configuration")
		st.Exposures, st.ReverseExposures = exposureStatus(s.built, s.reverseServices)
		st.AuthorizedPeers = 0
		for _, p := range s.built.Peers {
			if p.Authorization.Authorized {
				st.AuthorizedPeers++
			}
		}
		outcomes[ConditionGrantsValid] = grantsOutcome(append(slices.Clone(s.built.Problems), s.reverseProblems...))
	case len(s.buildErrs) > 0:
		outcomes[vpnv1.ConditionConfigValid] = failed(s.buildErrs[0].Reason, joinErrors(s.buildErrs))
		outcomes[ConditionGrantsValid] = outcome{metav1.ConditionUnknown, ReasonConfigInvalid, "configuration is invalid"}
	default:
		outcomes[vpnv1.ConditionConfigValid] = outcome{metav1.ConditionUnknown, ReasonAddressesPending, "waiting for a service CIDR"}
		outcomes[ConditionGrantsValid] = outcome{metav1.ConditionUnknown, ReasonAddressesPending, "waiting for a service CIDR"}
	}

	conds := append([]metav1.Condition(nil), gw.Status.Conditions...)
	ready := ok(ReasonReady, "gateway is serving")
	for _, t := range conditionOrder {
		o := outcomes[t]
		if o.status != metav1.ConditionTrue && ready.status == metav1.ConditionTrue {
			ready = failed(o.reason, t+": "+o.message)
		}
		setCondition(&conds, t, o, gw.Generation, now)
	}
	setCondition(&conds, vpnv1.ConditionReady, ready, gw.Generation, now)
	// Not among the causes of Ready: a gateway waiting for new images serves as before.
	if s.rolloutPending != "" {
		setCondition(&conds, ConditionRolloutPending, outcome{metav1.ConditionTrue, ReasonConcurrencyLimit, s.rolloutPending}, gw.Generation, now)
	} else {
		meta.RemoveStatusCondition(&conds, ConditionRolloutPending)
	}
	st.Conditions = orderConditions(conds, append([]string{vpnv1.ConditionReady}, conditionOrder...))
	return st
}

func setCondition(conds *[]metav1.Condition, t string, o outcome, gen int64, now metav1.Time) {
	if o.reason == "" {
		o = outcome{metav1.ConditionUnknown, "Unknown", "not evaluated"}
	}
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: t, Status: o.status, Reason: o.reason, Message: truncate(o.message, 32768),
		ObservedGeneration: gen, LastTransitionTime: now,
	})
}

// orderConditions returns conds with the known types first in the given order, others after.
func orderConditions(conds []metav1.Condition, order []string) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(conds))
	for _, t := range order {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			out = append(out, *c)
		}
	}
	for _, c := range conds {
		if !contains(order, c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// exposureStatus lists the exposures with their virtual IPs; reverse exposures with their
// Service and its ports where the Service was applied (services: exposure -> Service name).
func exposureStatus(m *model.Gateway, services map[string]string) (fwd, rev []vpnv1.ExposureStatus) {
	for _, e := range m.Exposures {
		fwd = append(fwd, vpnv1.ExposureStatus{Name: e.Name, VirtualIP: e.VirtualIP.String()})
	}
	for _, r := range m.ReverseExposures {
		st := vpnv1.ExposureStatus{Name: r.Name, VirtualIP: r.VirtualIP.String()}
		if svc, ok := services[r.Name]; ok {
			st.Service, st.Ports = svc, children.ReverseServicePorts(r)
		}
		rev = append(rev, st)
	}
	return fwd, rev
}

func grantsOutcome(problems []model.Problem) outcome {
	if len(problems) == 0 {
		return ok(ReasonNoConflicts, "every grant can be honoured")
	}
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, p.Message)
	}
	return failed(problems[0].Reason, strings.Join(msgs, "; "))
}

func deploymentOutcome(d *appsv1.Deployment) outcome {
	if d == nil {
		return failed(ReasonNotCreated, "gateway Deployment does not exist yet")
	}
	if d.Status.AvailableReplicas > 0 {
		return ok(ReasonAvailable, "gateway pod is available")
	}
	return failed(ReasonUnavailable, fmt.Sprintf("gateway pod is not available (%d/%d ready)", d.Status.ReadyReplicas, d.Status.Replicas))
}

func joinErrors(errs []model.Error) string {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
