// Package diagnose is kubectl vpn diagnose: it collects what there is to know about a
// VPNGateway and its peers (conditions, Events, the agent's metrics and logs), judges it with
// one check per rule (checks.go), and prints a verdict for the gateway and each peer with the
// next step. Log lines are shown only in the shapes it knows (logs.go): a key never reaches
// its output, and it reads no Secret.
package diagnose

import (
	"context"
	"fmt"
	"io"
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

// Options are what kubectl vpn diagnose is asked.
type Options struct {
	Namespace string
	// Gateway is the VPNGateway's name (or a legacy IPsecGateway's, when there is no
	// VPNGateway of that name).
	Gateway string
	// Tail is how many lines of each container's log to read.
	Tail int64
	// Events is how many of the most recent Events to show.
	Events int
	// Interval is how long to wait before reading the metrics again (0: once).
	Interval time.Duration
	// Now is the clock the ages are measured with.
	Now func() time.Time
}

// Run collects everything about the gateway through c and access (nil: the pod cannot be
// reached; the output says so) and writes the diagnosis to w.
func Run(ctx context.Context, c client.Client, access gateways.AgentAccess, o Options, w io.Writer) error {
	ns, name := o.Namespace, o.Gateway
	if legacy, err := gateways.LoadLegacy(ctx, c, ns, name, false); err != nil {
		return err
	} else if len(legacy) > 0 && !gateways.VPNGatewayExists(ctx, c, ns, name) {
		status.PrintLegacy(w, status.LegacyReportOf(&legacy[0], o.Now()))
		fmt.Fprintf(w, "\n  %s is a legacy IPsecGateway: its conditions and tunnels are above. diagnose collects a VPNGateway's\n"+
			"  peers, events, metrics and logs; kubectl vpn migrate ipsecgateway %s -n %s --dry-run shows the VPNGateway it becomes.\n", name, name, ns)
		return nil
	}
	gws, err := gateways.Load(ctx, c, ns, name, false)
	if err != nil {
		return err
	}
	printDiagnosis(w, collect(ctx, c, access, gws[0], o))
	return nil
}

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
		}
		return ike, esp
	}
	ike = m.IPsec.IKEProposals
	for _, mp := range m.Peers {
		if mp.Name == p.Name && mp.IPsec != nil {
			esp = mp.IPsec.ESPProposals
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
