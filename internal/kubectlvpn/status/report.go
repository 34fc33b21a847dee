// Package status is kubectl vpn status: the report on gateways, their peers' tunnels and who
// may reach what (a stable shape for -o json and yaml, docs/kubectl-vpn.md), its tables, and
// the legacy IPsecGateways' report.
package status

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
)

// GatewayConditionOrder is the order in which the operator summarises a gateway's conditions
// into Ready: Ready is False with the reason and message of the first one that is not True
// (internal/controller/gateway_status.go, conditionOrder).
var GatewayConditionOrder = []string{
	vpnv1.ConditionAddressesAllocated,
	vpnv1.ConditionConfigValid,
	"GrantsValid",
	"KeyReady",
	vpnv1.ConditionEndpointReady,
	vpnv1.ConditionRendered,
	vpnv1.ConditionGatewayAvailable,
}

// ConditionCredentialsReady is the operator's peer condition on the referenced Secrets.
const ConditionCredentialsReady = "CredentialsReady"

// Report is status's machine-readable output (-o json|yaml).
type Report struct {
	Kind       string          `json:"kind"`
	APIVersion string          `json:"apiVersion"`
	Gateways   []GatewayReport `json:"gateways"`
	// IPsecGateways are the legacy gateways (ipsec.bnerd.net) asked for.
	IPsecGateways []LegacyReport `json:"ipsecGateways,omitempty"`
}

// The report's kind and apiVersion.
const (
	ReportAPIVersion = "kubectl-vpn.bnerd.net/v1alpha1"
	ReportKind       = "VPNStatus"
)

// GatewayReport is one VPNGateway in the report.
type GatewayReport struct {
	Namespace     string         `json:"namespace"`
	Name          string         `json:"name"`
	Protocol      string         `json:"protocol"`
	Endpoint      EndpointReport `json:"endpoint"`
	PublicAddress string         `json:"publicAddress"`
	ServiceCIDR   string         `json:"serviceCIDR"`
	// Ready is the gateway's Ready condition; Cause the first condition (in the operator's
	// order) that is not True, nil while Ready.
	Ready            ConditionReport         `json:"ready"`
	Cause            *CauseReport            `json:"cause"`
	Peers            []PeerReport            `json:"peers"`
	Exposures        []ExposureReport        `json:"exposures"`
	ReverseExposures []ReverseExposureReport `json:"reverseExposures"`
	// Availability is the gateway's active/standby pair; nil for a gateway without a standby.
	Availability *AvailabilityReport `json:"availability,omitempty"`
	Agent        AgentReport         `json:"agent"`
}

// AvailabilityReport is a gateway's active/standby pair as the operator reports it.
type AvailabilityReport struct {
	// ActivePod carries the tunnels; empty while no pod does.
	ActivePod string `json:"activePod"`
	// StandbyPods are ready to take over.
	StandbyPods []string `json:"standbyPods"`
	// LastTakeover is the last time a pod became active; nil before the first.
	LastTakeover *vpnv1.Takeover `json:"lastTakeover,omitempty"`
}

// EndpointReport is the gateway's endpoint.
type EndpointReport struct {
	// Kind is loadBalancer, floatingIPPool, floatingIP or hostNetwork.
	Kind string `json:"kind"`
	// Detail is the load balancer class, the pool, the address or the node.
	Detail string `json:"detail,omitempty"`
}

// ConditionReport is one condition as the operator (or agent) reported it.
type ConditionReport struct {
	// Status is True, False or Unknown (also when the condition was not reported).
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Reported is false when the operator (or agent) has not written the condition; for
	// Authorized the values are then the plugin's own computation.
	Reported bool `json:"reported"`
}

// CauseReport is the first condition (in the operator's order) that keeps a gateway from Ready.
type CauseReport struct {
	Condition string `json:"condition"`
	Status    string `json:"status"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
}

// PeerReport is one VPNPeer of a gateway.
type PeerReport struct {
	Name             string          `json:"name"`
	Authorized       ConditionReport `json:"authorized"`
	CredentialsReady ConditionReport `json:"credentialsReady"`
	Connected        ConditionReport `json:"connected"`
	// EstablishedAt (RFC 3339) and EstablishedForSeconds while Connected; null otherwise.
	EstablishedAt         *metav1.Time `json:"establishedAt"`
	EstablishedForSeconds *int64       `json:"establishedForSeconds"`
	BytesIn               int64        `json:"bytesIn"`
	BytesOut              int64        `json:"bytesOut"`
	PacketsIn             int64        `json:"packetsIn"`
	PacketsOut            int64        `json:"packetsOut"`
	// Rekeys of the peer's SAs the gateway pod counted since it started (IPsec).
	Rekeys int64 `json:"rekeys"`
	// LastHandshake is WireGuard's; null for IPsec and before the first.
	LastHandshake *metav1.Time `json:"lastHandshake"`
	// Endpoint is where the peer's tunnel last came from (address:port, as the gateway saw it);
	// "" when the agent has not recorded one.
	Endpoint string `json:"endpoint"`
	// AuthorizationDrops from the agent's metrics; null when they could not be read.
	AuthorizationDrops *DropsReport `json:"authorizationDrops"`
	// Exposures and ReverseExposures the peer may reach (names).
	Exposures        []string `json:"exposures"`
	ReverseExposures []string `json:"reverseExposures"`
}

// DropsReport are the packets the agent dropped by authorization, per direction.
type DropsReport struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

// ExposureReport is one of the gateway's exposures.
type ExposureReport struct {
	Name      string       `json:"name"`
	VirtualIP string       `json:"virtualIP"`
	Target    TargetReport `json:"target"`
	Ports     []string     `json:"ports"`
	// ReachableBy are the peers that may reach it (sorted).
	ReachableBy []string `json:"reachableBy"`
}

// TargetReport is what an exposure forwards to: an address or a Service.
type TargetReport struct {
	Address string `json:"address,omitempty"`
	Service string `json:"service,omitempty"`
}

// ReverseExposureReport is one of the gateway's reverse exposures.
type ReverseExposureReport struct {
	Name      string   `json:"name"`
	VirtualIP string   `json:"virtualIP"`
	Target    string   `json:"target"`
	Ports     []string `json:"ports"`
	// Grantees are the peers that hold the grant (at most one is valid).
	Grantees []string `json:"grantees"`
}

// AgentReport is what was read from the gateway's pod.
type AgentReport struct {
	// Pod is the gateway pod asked; empty when there is none (Error says why).
	Pod string `json:"pod"`
	// Metrics is true when the agent's metrics were read; Error says why not.
	Metrics bool   `json:"metrics"`
	Error   string `json:"error,omitempty"`
	// RulesetRepairs and ConfigRejected from the metrics; null when not read. SpoofedDrops
	// (kernel ESP's spoof check) is also null on a gateway without it.
	RulesetRepairs *int64 `json:"rulesetRepairs"`
	ConfigRejected *int64 `json:"configRejected"`
	SpoofedDrops   *int64 `json:"spoofedDrops"`
}

// condition is the report of condition t ("Unknown", not Reported, when it is not there).
func condition(conds []metav1.Condition, t string) ConditionReport {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return ConditionReport{Status: string(metav1.ConditionUnknown)}
	}
	return ConditionReport{Status: string(c.Status), Reason: c.Reason, Message: c.Message, Reported: true}
}

// Readiness is the gateway's Ready condition and its first failing cause, in the operator's
// order.
func Readiness(gw *vpnv1.VPNGateway) (ConditionReport, *CauseReport) {
	ready := condition(gw.Status.Conditions, vpnv1.ConditionReady)
	if !ready.Reported {
		ready.Reason, ready.Message = "NotReported", "the operator has not reported this gateway's status yet"
	}
	if ready.Status == string(metav1.ConditionTrue) {
		return ready, nil
	}
	for _, t := range GatewayConditionOrder {
		c := meta.FindStatusCondition(gw.Status.Conditions, t)
		if c != nil && c.Status != metav1.ConditionTrue {
			return ready, &CauseReport{Condition: t, Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		}
	}
	return ready, nil
}

// endpointOf is the report of the gateway's endpoint kind and its detail.
func endpointOf(e vpnv1.Endpoint) EndpointReport {
	switch {
	case e.LoadBalancer != nil:
		return EndpointReport{Kind: "loadBalancer", Detail: e.LoadBalancer.LoadBalancerClass}
	case e.FloatingIPPool != "":
		return EndpointReport{Kind: "floatingIPPool", Detail: e.FloatingIPPool}
	case e.FloatingIP != "":
		return EndpointReport{Kind: "floatingIP", Detail: e.FloatingIP}
	case e.HostNetwork != nil:
		d := hostNodes(e.HostNetwork)
		if e.HostNetwork.Address != "" {
			d += "@" + e.HostNetwork.Address
		}
		return EndpointReport{Kind: "hostNetwork", Detail: d}
	}
	return EndpointReport{Kind: "none"}
}

// parsePorts are the ports as the API's port type reads them, else as they were written.
func parsePorts(raw []intstr.IntOrString) []string {
	out := []string{}
	for i := range raw {
		r := &raw[i]
		if p, err := vpnv1.ParsePort(*r); err == nil {
			v := p.Value()
			out = append(out, v.String())
		} else {
			out = append(out, r.String())
		}
	}
	return out
}

// GatewayReportOf is the gateway's report at time now.
func GatewayReportOf(d *gateways.Gateway, now time.Time) GatewayReport {
	gw := d.VPNGateway
	r := GatewayReport{
		Namespace: gw.Namespace, Name: gw.Name, Protocol: string(gw.Spec.Protocol),
		Endpoint: endpointOf(gw.Spec.Endpoint), PublicAddress: gw.Status.PublicAddress,
		ServiceCIDR: gw.Status.ServiceCIDR, Peers: []PeerReport{}, Exposures: []ExposureReport{},
		ReverseExposures: []ReverseExposureReport{},
	}
	r.Ready, r.Cause = Readiness(gw)
	reach := map[string][]string{}
	revHolders := map[string][]string{}
	for i := range d.Peers {
		p := &d.Peers[i]
		pr := PeerReport{
			Name:             p.Name,
			Authorized:       condition(p.Status.Conditions, vpnv1.ConditionAuthorized),
			CredentialsReady: condition(p.Status.Conditions, ConditionCredentialsReady),
			Connected:        condition(p.Status.Conditions, vpnv1.ConditionConnected),
			Exposures:        []string{},
			ReverseExposures: []string{},
		}
		if !pr.Authorized.Reported {
			dec := d.Decisions[p.Name]
			pr.Authorized.Status, pr.Authorized.Reason, pr.Authorized.Message = string(metav1.ConditionFalse), dec.Reason, dec.Message
			if dec.Authorized {
				pr.Authorized.Status = string(metav1.ConditionTrue)
			}
		}
		if t := p.Status.Tunnel; t != nil {
			pr.BytesIn, pr.BytesOut, pr.PacketsIn, pr.PacketsOut, pr.Rekeys = t.BytesIn, t.BytesOut, t.PacketsIn, t.PacketsOut, t.Rekeys
			pr.LastHandshake, pr.Endpoint = t.LastHandshake, t.Endpoint
			if t.EstablishedAt != nil && pr.Connected.Status == string(metav1.ConditionTrue) {
				pr.EstablishedAt = t.EstablishedAt
				s := int64(now.Sub(t.EstablishedAt.Time) / time.Second)
				pr.EstablishedForSeconds = &s
			}
		}
		if d.Metrics != nil {
			pr.AuthorizationDrops = &DropsReport{}
			if m := d.Metrics.Peers[p.Name]; m != nil {
				pr.AuthorizationDrops.In, pr.AuthorizationDrops.Out = m.DropsIn, m.DropsOut
			}
		}
		exp, rev := d.Reaches(p)
		pr.Exposures = append(pr.Exposures, exp...)
		pr.ReverseExposures = append(pr.ReverseExposures, rev...)
		for _, e := range exp {
			reach[e] = append(reach[e], p.Name)
		}
		for _, e := range rev {
			revHolders[e] = append(revHolders[e], p.Name)
		}
		r.Peers = append(r.Peers, pr)
	}
	vip := map[string]string{}
	for _, e := range gw.Status.Exposures {
		vip["e/"+e.Name] = e.VirtualIP
	}
	for _, e := range gw.Status.ReverseExposures {
		vip["r/"+e.Name] = e.VirtualIP
	}
	for _, e := range gw.Spec.Exposures {
		er := ExposureReport{Name: e.Name, VirtualIP: vip["e/"+e.Name], Ports: parsePorts(e.Target.Ports), ReachableBy: []string{}}
		if er.VirtualIP == "" {
			er.VirtualIP = e.VirtualIP
		}
		if e.Target.Service != nil {
			er.Target.Service = e.Target.Service.Name
		} else {
			er.Target.Address = e.Target.Address
		}
		er.ReachableBy = append(er.ReachableBy, reach[e.Name]...)
		r.Exposures = append(r.Exposures, er)
	}
	for _, e := range gw.Spec.ReverseExposures {
		rr := ReverseExposureReport{Name: e.Name, VirtualIP: vip["r/"+e.Name], Target: e.Target.Address,
			Ports: parsePorts(e.Target.Ports), Grantees: []string{}}
		if rr.VirtualIP == "" {
			rr.VirtualIP = e.VirtualIP
		}
		rr.Grantees = append(rr.Grantees, revHolders[e.Name]...)
		r.ReverseExposures = append(r.ReverseExposures, rr)
	}
	r.Availability = availabilityOf(gw)
	switch {
	case d.Pod == nil:
		r.Agent.Error = d.NoPod
	case d.Metrics != nil:
		r.Agent.Pod, r.Agent.Metrics = d.Pod.Name, true
		r.Agent.RulesetRepairs, r.Agent.ConfigRejected, r.Agent.SpoofedDrops = d.Metrics.RulesetRepairs, d.Metrics.ConfigRejected, d.Metrics.SpoofedDrops
	default:
		r.Agent.Pod, r.Agent.Error = d.Pod.Name, d.MetricsErr
	}
	return r
}

// availabilityOf is the gateway's pair: reported once the gateway asks for a standby (its own
// field, or the operator's default when the operator reports a pair).
func availabilityOf(gw *vpnv1.VPNGateway) *AvailabilityReport {
	a := gw.Status.Availability
	asked := gw.Spec.Availability != nil && gw.Spec.Availability.Standby != nil && *gw.Spec.Availability.Standby
	if a == nil && !asked {
		return nil
	}
	r := &AvailabilityReport{StandbyPods: []string{}}
	if a != nil {
		r.ActivePod, r.LastTakeover = a.ActivePod, a.LastTakeover
		r.StandbyPods = append(r.StandbyPods, a.StandbyPods...)
	}
	return r
}

// hostNodes is a host-network endpoint's node, or its nodes joined by commas (a gateway with
// a standby).
func hostNodes(hn *vpnv1.HostNetworkEndpoint) string {
	if len(hn.Nodes) > 0 {
		return strings.Join(hn.Nodes, ",")
	}
	return hn.NodeName
}
