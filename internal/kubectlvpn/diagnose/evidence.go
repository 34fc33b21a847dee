package diagnose

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// diagnosis is everything collected about one gateway.
type diagnosis struct {
	data     *gateways.Gateway
	gateway  gatewayEvidence
	peers    []peerEvidence
	earlier  *gateways.AgentMetrics
	interval time.Duration
	// charon is the tail of charon's log (nil: not read, charonErr says why; charonNA: the
	// gateway runs no charon)
	charon    []logLine
	charonErr string
	charonNA  bool
	eventsErr string
}

// gatewayEvidence is what diagnose knows about the gateway itself.
type gatewayEvidence struct {
	Gateway *vpnv1.VPNGateway
	Pod     *corev1.Pod
	NoPod   string
	// Metrics is the agent's view (nil: not read, MetricsErr says why).
	Metrics    *gateways.AgentMetrics
	MetricsErr string
	Events     []eventFact
	// Agent is the tail of the agent's log (nil: not read, LogErr says why).
	Agent     []logLine
	AgentTail int
	LogErr    string
	Now       time.Time
}

// peerEvidence is everything diagnose knows about one peer.
type peerEvidence struct {
	Gateway *vpnv1.VPNGateway
	Peer    *vpnv1.VPNPeer
	// Decision is the model's (the operator's code) computed here; the peer's Authorized
	// condition wins when reported.
	Decision model.Decision
	// Reaches describes what the peer may reach, e.g. `web (100.64.0.10 8080)`; empty: nothing.
	Reaches []string
	// Offered are the gateway's exposures by name.
	Offered []string
	// IKEProposals and ESPProposals are the peer's tunnel's, defaults applied (as the model has them).
	IKEProposals, ESPProposals []string
	Events                     []eventFact
	// Metrics is the agent's view (nil: not read); Earlier an earlier sample Interval before.
	Metrics, Earlier *gateways.PeerMetrics
	Interval         time.Duration
	// Charon is the tail of charon's log (nil: not read); CharonLines how many were asked for.
	Charon      []logLine
	CharonLines int
	Now         time.Time
}

// peerCharon is the part of charon's log about this peer: its IKE_SAs (by connection name,
// or by address or identity while charon does not know the connection yet).
func (e *peerEvidence) peerCharon() []*ikeSA {
	if e.Charon == nil || e.Peer.Spec.IPsec == nil {
		return nil
	}
	entries, _ := parseCharon(e.Charon)
	return peerSAs(charonSAs(entries), e.Peer.Name, e.Peer.Spec.IPsec.Peer.Address, remoteIDOf(e.Peer))
}

func remoteIDOf(p *vpnv1.VPNPeer) string {
	if p.Spec.IPsec == nil {
		return ""
	}
	if p.Spec.IPsec.Peer.ID != "" {
		return p.Spec.IPsec.Peer.ID
	}
	return p.Spec.IPsec.Peer.Address
}

// eventFact is one Event on the gateway or a peer (core/v1 or events.k8s.io/v1).
type eventFact struct {
	UID     string    `json:"-"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name"`
	Count   int32     `json:"count"`
}

// collect reads everything diagnose looks at. Whatever cannot be read is recorded as such.
func collect(ctx context.Context, c client.Client, access gateways.AgentAccess, data *gateways.Gateway, o Options) *diagnosis {
	gw := data.VPNGateway
	data.LoadAgent(ctx, c, access, true)
	dg := &diagnosis{data: data}
	if data.Metrics != nil && o.Interval > 0 {
		first := data.Metrics
		select {
		case <-ctx.Done():
		case <-time.After(o.Interval):
			if m, err := gateways.ReadMetrics(ctx, access, gw, data.Pod); err == nil {
				dg.earlier, data.Metrics, dg.interval = first, m, o.Interval
			}
		}
	}
	now := o.Now()
	events, evErr := gatewayEvents(ctx, c, data, o.Events)
	if evErr != nil {
		dg.eventsErr = gateways.ShortError(evErr)
	}
	ge := gatewayEvidence{Gateway: gw, Pod: data.Pod, NoPod: data.NoPod, Metrics: data.Metrics, MetricsErr: data.MetricsErr, Now: now, AgentTail: int(o.Tail)}
	for _, ev := range events {
		if ev.Kind == "VPNGateway" {
			ge.Events = append(ge.Events, ev)
		}
	}
	var charon []logLine
	if data.Pod != nil && access != nil {
		if raw, err := access.Logs(ctx, gw.Namespace, data.Pod.Name, children.ContainerAgent, o.Tail); err != nil {
			ge.LogErr = gateways.ShortError(err)
		} else {
			ge.Agent = splitLog(raw)
		}
		switch {
		case gw.Spec.Protocol != vpnv1.ProtocolIPsec:
			dg.charonNA = true
		case !gateways.PodHasContainer(data.Pod, children.ContainerCharon):
			dg.charonErr = "the pod has no charon container"
		default:
			if raw, err := access.Logs(ctx, gw.Namespace, data.Pod.Name, children.ContainerCharon, o.Tail); err != nil {
				dg.charonErr = gateways.ShortError(err)
			} else {
				charon = splitLog(raw)
				if charon == nil {
					charon = []logLine{}
				}
			}
		}
	} else {
		why := data.NoPod
		if data.Pod != nil {
			why = "no access to the API server for the pod's logs"
		}
		ge.LogErr, dg.charonErr = why, why
		dg.charonNA = gw.Spec.Protocol != vpnv1.ProtocolIPsec
	}
	dg.gateway, dg.charon = ge, charon

	rep := status.GatewayReportOf(data, now)
	vips := map[string]status.ExposureReport{}
	var offered []string
	for _, e := range rep.Exposures {
		vips[e.Name] = e
		offered = append(offered, e.Name)
	}
	for i := range data.Peers {
		p := &data.Peers[i]
		pe := peerEvidence{Gateway: gw, Peer: p, Decision: data.Decisions[p.Name], Offered: offered,
			Interval: dg.interval, Charon: charon, CharonLines: int(o.Tail), Now: now}
		exp, _ := data.Reaches(p)
		for _, n := range exp {
			e := vips[n]
			pe.Reaches = append(pe.Reaches, fmt.Sprintf("%s (%s %s)", n, status.OrDash(e.VirtualIP), status.OrDash(strings.Join(e.Ports, ","))))
		}
		pe.IKEProposals, pe.ESPProposals = effectiveProposals(gw, p)
		for _, ev := range events {
			if ev.Kind == "VPNPeer" && ev.Name == p.Name {
				pe.Events = append(pe.Events, ev)
			}
		}
		if data.Metrics != nil {
			pe.Metrics = data.Metrics.Peers[p.Name]
			if pe.Metrics == nil {
				pe.Metrics = &gateways.PeerMetrics{}
			}
			if dg.earlier != nil {
				pe.Earlier = dg.earlier.Peers[p.Name]
				if pe.Earlier == nil {
					pe.Earlier = &gateways.PeerMetrics{}
				}
			}
		}
		dg.peers = append(dg.peers, pe)
	}
	return dg
}

// effectiveProposals are the IKE and ESP proposals of the peer's tunnel with the operator's
// defaults applied, as model.Build resolves them.
func effectiveProposals(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer) (ike, esp []string) {
	if gw.Spec.Protocol != vpnv1.ProtocolIPsec {
		return nil, nil
	}
	g := gw.DeepCopy()
	g.Spec.Exposures, g.Spec.ReverseExposures = nil, nil
	cidr, err := netip.ParsePrefix(gw.Status.ServiceCIDR)
	if err != nil {
		cidr = netip.MustParsePrefix("100.64.0.0/24")
	}
	m, errs := model.Build(model.Input{Gateway: g, Peers: []vpnv1.VPNPeer{*p}, Config: model.Config{PoolCIDR: model.DefaultPoolCIDR},
		ServiceCIDR: cidr, PublicAddress: gw.Status.PublicAddress})
	if len(errs) > 0 || m.IPsec == nil {
		if gw.Spec.IPsec != nil {
			ike = gw.Spec.IPsec.IKE.Proposals
		}
		if p.Spec.IPsec != nil {
			esp = p.Spec.IPsec.ESP.Proposals
			if p.Spec.IPsec.IKE != nil && len(p.Spec.IPsec.IKE.Proposals) > 0 {
				ike = p.Spec.IPsec.IKE.Proposals
			}
		}
		return ike, esp
	}
	ike = m.IPsec.IKEProposals
	for _, mp := range m.Peers {
		if mp.Name == p.Name && mp.IPsec != nil {
			esp = mp.IPsec.ESPProposals
			ike = m.IPsec.IKEFor(mp.IPsec).IKEProposals
		}
	}
	return ike, esp
}

// gatewayEvents are the Events on the gateway and its peers, from core/v1 and
// events.k8s.io/v1 (one store, two views: merged by UID), oldest first, the last n.
func gatewayEvents(ctx context.Context, c client.Client, d *gateways.Gateway, n int) ([]eventFact, error) {
	ns := d.VPNGateway.Namespace
	peers := map[string]bool{}
	for _, p := range d.Peers {
		peers[p.Name] = true
	}
	wanted := func(kind, name string) bool {
		return (kind == "VPNGateway" && name == d.VPNGateway.Name) || (kind == "VPNPeer" && peers[name])
	}
	byUID := map[string]eventFact{}
	add := func(e eventFact) {
		if !wanted(e.Kind, e.Name) {
			return
		}
		key := e.UID
		if key == "" {
			key = fmt.Sprintf("%s/%s/%s/%s", e.Kind, e.Name, e.Reason, e.Time)
		}
		if old, ok := byUID[key]; !ok || e.Time.After(old.Time) {
			byUID[key] = e
		}
	}
	var errs []string
	for _, kind := range []string{"VPNGateway", "VPNPeer"} {
		var list corev1.EventList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{"involvedObject.kind": kind}); err != nil {
			errs = append(errs, "core/v1: "+gateways.ShortError(err))
			break
		}
		for _, e := range list.Items {
			add(coreEvent(&e))
		}
	}
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		errs = append(errs, "events.k8s.io/v1: "+gateways.ShortError(err))
	} else {
		for _, e := range list.Items {
			add(newEvent(&e))
		}
	}
	out := make([]eventFact, 0, len(byUID))
	for _, e := range byUID {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.Before(out[j].Time)
		}
		return out[i].Reason < out[j].Reason
	})
	if n >= 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	if len(errs) == 2 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// firstTime is the first of ts that is set.
func firstTime(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// coreEvent is a core/v1 Event as diagnose shows it.
func coreEvent(e *corev1.Event) eventFact {
	count := e.Count
	var series time.Time
	if e.Series != nil {
		count, series = e.Series.Count, e.Series.LastObservedTime.Time
	}
	return eventFact{UID: string(e.UID), Type: e.Type, Reason: e.Reason, Message: e.Message,
		Kind: e.InvolvedObject.Kind, Name: e.InvolvedObject.Name, Count: count,
		Time: firstTime(series, e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time)}
}

// newEvent is an events.k8s.io/v1 Event as diagnose shows it.
func newEvent(e *eventsv1.Event) eventFact {
	count := e.DeprecatedCount
	var series time.Time
	if e.Series != nil {
		count, series = e.Series.Count, e.Series.LastObservedTime.Time
	}
	return eventFact{UID: string(e.UID), Type: e.Type, Reason: e.Reason, Message: e.Note,
		Kind: e.Regarding.Kind, Name: e.Regarding.Name, Count: count,
		Time: firstTime(series, e.DeprecatedLastTimestamp.Time, e.EventTime.Time, e.DeprecatedFirstTimestamp.Time, e.CreationTimestamp.Time)}
}
