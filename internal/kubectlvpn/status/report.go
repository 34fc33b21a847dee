package main

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// gatewayConditionOrder is the order in which the operator summarises a gateway's conditions
// into Ready: Ready is False with the reason and message of the first one that is not True
// (internal/controller/gateway_status.go, conditionOrder).
var gatewayConditionOrder = []string{
	vpnv1.ConditionAddressesAllocated,
	vpnv1.ConditionConfigValid,
	"GrantsValid",
	"KeyReady",
	vpnv1.ConditionEndpointReady,
	vpnv1.ConditionRendered,
	vpnv1.ConditionGatewayAvailable,
}

// conditionCredentialsReady is the operator's peer condition on the referenced Secrets.
const conditionCredentialsReady = "CredentialsReady"

// gatewayData is what the API server holds about one gateway, and what its agent says.
type gatewayData struct {
	gw    *vpnv1.VPNGateway
	peers []vpnv1.VPNPeer // sorted by name
	// decisions are model.Authorize's, computed here from the gateway and its peers.
	decisions map[string]model.Decision
	pod       *corev1.Pod
	// noPod says why there is no pod to ask; metricsErr why the metrics could not be read.
	noPod      string
	metrics    *agentMetrics
	metricsErr string
}

// loadGateways reads the gateways asked for (one by name, or all of a namespace, or all) and
// every peer of theirs. Secrets are never read.
func loadGateways(ctx context.Context, c client.Client, namespace, name string, all bool) ([]*gatewayData, error) {
	var gws []vpnv1.VPNGateway
	switch {
	case name != "":
		var gw vpnv1.VPNGateway
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &gw); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("VPNGateway %s/%s not found", namespace, name)
			}
			return nil, err
		}
		gws = []vpnv1.VPNGateway{gw}
	default:
		var list vpnv1.VPNGatewayList
		opts := []client.ListOption{}
		if !all {
			opts = append(opts, client.InNamespace(namespace))
		}
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, err
		}
		gws = list.Items
	}
	sort.Slice(gws, func(i, j int) bool {
		if gws[i].Namespace != gws[j].Namespace {
			return gws[i].Namespace < gws[j].Namespace
		}
		return gws[i].Name < gws[j].Name
	})
	peersByNS := map[string][]vpnv1.VPNPeer{}
	var out []*gatewayData
	for i := range gws {
		gw := &gws[i]
		ps, seen := peersByNS[gw.Namespace]
		if !seen {
			var list vpnv1.VPNPeerList
			if err := c.List(ctx, &list, client.InNamespace(gw.Namespace)); err != nil {
				return nil, err
			}
			ps = list.Items
			peersByNS[gw.Namespace] = ps
		}
		d := &gatewayData{gw: gw}
		for _, p := range ps {
			if p.Spec.GatewayRef == gw.Name {
				d.peers = append(d.peers, p)
			}
		}
		sort.Slice(d.peers, func(i, j int) bool { return d.peers[i].Name < d.peers[j].Name })
		d.decisions = decide(gw, d.peers)
		out = append(out, d)
	}
	return out, nil
}

// decide runs the operator's authorization (internal/model) over the gateway and its peers,
// with the scope built as the operator's PeerScope builds it from the gateway's status. The
// operator's own configuration (the cluster's ranges) and the Secrets' types are not known
// here: where they make a peer dark, the peer's Authorized condition says so.
func decide(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer) map[string]model.Decision {
	var live []vpnv1.VPNPeer
	for _, p := range peers {
		if p.DeletionTimestamp.IsZero() {
			live = append(live, p)
		}
	}
	scope := model.Scope{LocalID: model.GatewayLocalID(gw, gw.Status.PublicAddress)}
	if c, err := netip.ParsePrefix(gw.Status.ServiceCIDR); err == nil {
		scope.ServiceCIDR = c
	}
	d, _ := model.Authorize(gw, live, scope)
	return d
}

// grants are the exposures and reverse exposures a decision gives a peer (as model.Build
// fills them: everything under DefaultAllow, the peer's block when Authorized).
func grants(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer, d model.Decision) (exp, rev []string) {
	if !d.Authorized {
		return nil, nil
	}
	if d.Reason == model.ReasonDefaultAllow {
		for _, e := range gw.Spec.Exposures {
			exp = appendNew(exp, e.Name)
		}
		for _, r := range gw.Spec.ReverseExposures {
			rev = appendNew(rev, r.Name)
		}
	} else if a := p.Spec.Authorization; a != nil {
		for _, e := range a.Exposures {
			exp = appendNew(exp, e)
		}
		for _, r := range a.ReverseExposures {
			rev = appendNew(rev, r)
		}
	}
	slices.Sort(exp)
	slices.Sort(rev)
	return exp, rev
}

// effectiveAuthorized: the operator's Authorized condition when it reported one, else the
// model's decision; the model's grants count only where the operator does not deny them.
func (d *gatewayData) effectiveAuthorized(p *vpnv1.VPNPeer) bool {
	dec := d.decisions[p.Name]
	if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized); c != nil && c.Status != metav1.ConditionTrue {
		return false
	}
	return dec.Authorized
}

// reaches are the exposures the peer may reach, by name (sorted), and its reverse exposures.
func (d *gatewayData) reaches(p *vpnv1.VPNPeer) (exp, rev []string) {
	if !d.effectiveAuthorized(p) {
		return nil, nil
	}
	return grants(d.gw, p, d.decisions[p.Name])
}

// loadAgent finds the gateway's pod and reads its agent's metrics (when asked to).
func (d *gatewayData) loadAgent(ctx context.Context, c client.Client, a agentAccess, metrics bool) {
	d.pod, d.noPod = gatewayPod(ctx, c, d.gw)
	if !metrics {
		return
	}
	if d.pod == nil {
		d.metricsErr = d.noPod
		return
	}
	if a == nil {
		d.metricsErr = "no access to the API server's pod proxy"
		return
	}
	m, err := readMetrics(ctx, a, d.gw, d.pod)
	if err != nil {
		d.metricsErr = "not reachable through the API server's pod proxy: " + shortError(err)
		return
	}
	d.metrics = m
}

// shortError is an error on one line, at most 200 characters.
func shortError(err error) string {
	s := err.Error()
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// --- the report (kubectl vpn status -o json|yaml): a stable shape, see docs/kubectl-vpn.md ---

// statusReport is status's machine-readable output.
type statusReport struct {
	Kind       string          `json:"kind"`
	APIVersion string          `json:"apiVersion"`
	Gateways   []gatewayReport `json:"gateways"`
	// IPsecGateways are the legacy gateways (ipsec.bnerd.net) asked for.
	IPsecGateways []legacyReport `json:"ipsecGateways,omitempty"`
}

const (
	reportAPIVersion = "kubectl-vpn.bnerd.net/v1alpha1"
	statusKind       = "VPNStatus"
)

type gatewayReport struct {
	Namespace     string         `json:"namespace"`
	Name          string         `json:"name"`
	Protocol      string         `json:"protocol"`
	Endpoint      endpointReport `json:"endpoint"`
	PublicAddress string         `json:"publicAddress"`
	ServiceCIDR   string         `json:"serviceCIDR"`
	// Ready is the gateway's Ready condition; Cause the first condition (in the operator's
	// order) that is not True, nil while Ready.
	Ready            conditionReport         `json:"ready"`
	Cause            *causeReport            `json:"cause"`
	Peers            []peerReport            `json:"peers"`
	Exposures        []exposureReport        `json:"exposures"`
	ReverseExposures []reverseExposureReport `json:"reverseExposures"`
	Agent            agentReport             `json:"agent"`
}

type endpointReport struct {
	// Kind is loadBalancer, floatingIPPool, floatingIP or hostNetwork.
	Kind string `json:"kind"`
	// Detail is the load balancer class, the pool, the address or the node.
	Detail string `json:"detail,omitempty"`
}

type conditionReport struct {
	// Status is True, False or Unknown (also when the condition was not reported).
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Reported is false when the operator (or agent) has not written the condition; for
	// Authorized the values are then the plugin's own computation.
	Reported bool `json:"reported"`
}

type causeReport struct {
	Condition string `json:"condition"`
	Status    string `json:"status"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
}

type peerReport struct {
	Name             string          `json:"name"`
	Authorized       conditionReport `json:"authorized"`
	CredentialsReady conditionReport `json:"credentialsReady"`
	Connected        conditionReport `json:"connected"`
	// EstablishedAt (RFC 3339) and EstablishedForSeconds while Connected; null otherwise.
	EstablishedAt         *metav1.Time `json:"establishedAt"`
	EstablishedForSeconds *int64       `json:"establishedForSeconds"`
	BytesIn               int64        `json:"bytesIn"`
	BytesOut              int64        `json:"bytesOut"`
	PacketsIn             int64        `json:"packetsIn"`
	PacketsOut            int64        `json:"packetsOut"`
	// LastHandshake is WireGuard's; null for IPsec and before the first.
	LastHandshake *metav1.Time `json:"lastHandshake"`
	// AuthorizationDrops from the agent's metrics; null when they could not be read.
	AuthorizationDrops *dropsReport `json:"authorizationDrops"`
	// Exposures and ReverseExposures the peer may reach (names).
	Exposures        []string `json:"exposures"`
	ReverseExposures []string `json:"reverseExposures"`
}

type dropsReport struct {
	In  int64 `json:"in"`
	Out int64 `json:"out"`
}

type exposureReport struct {
	Name      string       `json:"name"`
	VirtualIP string       `json:"virtualIP"`
	Target    targetReport `json:"target"`
	Ports     []string     `json:"ports"`
	// ReachableBy are the peers that may reach it (sorted).
	ReachableBy []string `json:"reachableBy"`
}

type targetReport struct {
	Address string `json:"address,omitempty"`
	Service string `json:"service,omitempty"`
}

type reverseExposureReport struct {
	Name      string   `json:"name"`
	VirtualIP string   `json:"virtualIP"`
	Target    string   `json:"target"`
	Ports     []string `json:"ports"`
	// Grantees are the peers that hold the grant (at most one is valid).
	Grantees []string `json:"grantees"`
}

type agentReport struct {
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

func condition(conds []metav1.Condition, t string) conditionReport {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return conditionReport{Status: string(metav1.ConditionUnknown)}
	}
	return conditionReport{Status: string(c.Status), Reason: c.Reason, Message: c.Message, Reported: true}
}

// readiness is the gateway's Ready condition and its first failing cause, in the operator's
// order.
func readiness(gw *vpnv1.VPNGateway) (conditionReport, *causeReport) {
	ready := condition(gw.Status.Conditions, vpnv1.ConditionReady)
	if !ready.Reported {
		ready.Reason, ready.Message = "NotReported", "the operator has not reported this gateway's status yet"
	}
	if ready.Status == string(metav1.ConditionTrue) {
		return ready, nil
	}
	for _, t := range gatewayConditionOrder {
		c := meta.FindStatusCondition(gw.Status.Conditions, t)
		if c != nil && c.Status != metav1.ConditionTrue {
			return ready, &causeReport{Condition: t, Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		}
	}
	return ready, nil
}

func endpointOf(e vpnv1.Endpoint) endpointReport {
	switch {
	case e.LoadBalancer != nil:
		return endpointReport{Kind: "loadBalancer", Detail: e.LoadBalancer.LoadBalancerClass}
	case e.FloatingIPPool != "":
		return endpointReport{Kind: "floatingIPPool", Detail: e.FloatingIPPool}
	case e.FloatingIP != "":
		return endpointReport{Kind: "floatingIP", Detail: e.FloatingIP}
	case e.HostNetwork != nil:
		d := e.HostNetwork.NodeName
		if e.HostNetwork.Address != "" {
			d += "@" + e.HostNetwork.Address
		}
		return endpointReport{Kind: "hostNetwork", Detail: d}
	}
	return endpointReport{Kind: "none"}
}

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

// report builds the gateway's status report at time now.
func (d *gatewayData) report(now time.Time) gatewayReport {
	gw := d.gw
	r := gatewayReport{
		Namespace: gw.Namespace, Name: gw.Name, Protocol: string(gw.Spec.Protocol),
		Endpoint: endpointOf(gw.Spec.Endpoint), PublicAddress: gw.Status.PublicAddress,
		ServiceCIDR: gw.Status.ServiceCIDR, Peers: []peerReport{}, Exposures: []exposureReport{},
		ReverseExposures: []reverseExposureReport{},
	}
	r.Ready, r.Cause = readiness(gw)
	reach := map[string][]string{}
	revHolders := map[string][]string{}
	for i := range d.peers {
		p := &d.peers[i]
		pr := peerReport{
			Name:             p.Name,
			Authorized:       condition(p.Status.Conditions, vpnv1.ConditionAuthorized),
			CredentialsReady: condition(p.Status.Conditions, conditionCredentialsReady),
			Connected:        condition(p.Status.Conditions, vpnv1.ConditionConnected),
			Exposures:        []string{},
			ReverseExposures: []string{},
		}
		if !pr.Authorized.Reported {
			dec := d.decisions[p.Name]
			pr.Authorized.Status, pr.Authorized.Reason, pr.Authorized.Message = string(metav1.ConditionFalse), dec.Reason, dec.Message
			if dec.Authorized {
				pr.Authorized.Status = string(metav1.ConditionTrue)
			}
		}
		if t := p.Status.Tunnel; t != nil {
			pr.BytesIn, pr.BytesOut, pr.PacketsIn, pr.PacketsOut = t.BytesIn, t.BytesOut, t.PacketsIn, t.PacketsOut
			pr.LastHandshake = t.LastHandshake
			if t.EstablishedAt != nil && pr.Connected.Status == string(metav1.ConditionTrue) {
				pr.EstablishedAt = t.EstablishedAt
				s := int64(now.Sub(t.EstablishedAt.Time) / time.Second)
				pr.EstablishedForSeconds = &s
			}
		}
		if d.metrics != nil {
			pr.AuthorizationDrops = &dropsReport{}
			if m := d.metrics.Peers[p.Name]; m != nil {
				pr.AuthorizationDrops.In, pr.AuthorizationDrops.Out = m.DropsIn, m.DropsOut
			}
		}
		exp, rev := d.reaches(p)
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
		er := exposureReport{Name: e.Name, VirtualIP: vip["e/"+e.Name], Ports: parsePorts(e.Target.Ports), ReachableBy: []string{}}
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
		rr := reverseExposureReport{Name: e.Name, VirtualIP: vip["r/"+e.Name], Target: e.Target.Address,
			Ports: parsePorts(e.Target.Ports), Grantees: []string{}}
		if rr.VirtualIP == "" {
			rr.VirtualIP = e.VirtualIP
		}
		rr.Grantees = append(rr.Grantees, revHolders[e.Name]...)
		r.ReverseExposures = append(r.ReverseExposures, rr)
	}
	switch {
	case d.pod == nil:
		r.Agent.Error = d.noPod
	case d.metrics != nil:
		r.Agent.Pod, r.Agent.Metrics = d.pod.Name, true
		r.Agent.RulesetRepairs, r.Agent.ConfigRejected, r.Agent.SpoofedDrops = d.metrics.RulesetRepairs, d.metrics.ConfigRejected, d.metrics.SpoofedDrops
	default:
		r.Agent.Pod, r.Agent.Error = d.pod.Name, d.metricsErr
	}
	return r
}
