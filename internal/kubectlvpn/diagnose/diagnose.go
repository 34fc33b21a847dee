package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

type diagnoseOptions struct {
	tail     int64
	events   int
	interval time.Duration
}

func newDiagnoseCommand(o *options) *cobra.Command {
	d := diagnoseOptions{}
	cmd := &cobra.Command{
		Use:   "diagnose GATEWAY",
		Short: "Collect a gateway's conditions, events, agent metrics and logs, and give a verdict per peer",
		Long: `Collects what there is to know about VPNGateway GATEWAY and its peers — their conditions, the
recent Events on them, the gateway agent's metrics (tunnels, rekeys, authorization drops,
ruleset repairs, rejected configurations; read twice, --interval apart, through the API
server's pod proxy) and the errors in the last lines of the agent's and charon's logs — and
prints a verdict for the gateway and for each peer, with the next step: e.g. a proposal
mismatch names what the client proposes and what the gateway allows, an authentication
failure the identities involved (never the key), no IKE packets at all the ports to open.

Log lines are shown only in the shapes diagnose knows (proposals, notifies, identities,
addresses): a pre-shared key never reaches its output. What cannot be read (no pod, no
permission for pods/proxy or pods/log) is said, and the verdicts use the rest. A GATEWAY that
is a legacy IPsecGateway (and no VPNGateway) gets its conditions and tunnels' state.`,
		Example: `  kubectl vpn diagnose acme-gw -n acme
  kubectl vpn diagnose acme-gw -n acme --interval 0 --tail 500`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return diagnose(cmd.Context(), o, args[0], d)
		},
	}
	cmd.Flags().Int64Var(&d.tail, "tail", 200, "lines of each container's log to read")
	cmd.Flags().IntVar(&d.events, "events", 20, "most recent Events to show")
	cmd.Flags().DurationVar(&d.interval, "interval", 3*time.Second, "read the metrics again after this long to see whether drops rise (0: once)")
	return cmd
}

// diagnosis is everything collected about one gateway.
type diagnosis struct {
	data     *gatewayData
	gateway  gatewayEvidence
	peers    []peerEvidence
	earlier  *agentMetrics
	interval time.Duration
	// charon is the tail of charon's log (nil: not read, charonErr says why; charonNA: the
	// gateway runs no charon)
	charon    []logLine
	charonErr string
	charonNA  bool
	eventsErr string
}

func diagnose(ctx context.Context, o *options, name string, d diagnoseOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ns, _, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.newClient()
	if err != nil {
		return err
	}
	if legacy, err := loadLegacy(ctx, c, ns, name, false); err != nil {
		return err
	} else if len(legacy) > 0 && !vpnGatewayExists(ctx, c, ns, name) {
		printLegacyStatus(o.streams.Out, legacyReportOf(&legacy[0], o.now()))
		fmt.Fprintf(o.streams.Out, "\n  %s is a legacy IPsecGateway: its conditions and tunnels are above. diagnose collects a VPNGateway's\n"+
			"  peers, events, metrics and logs; kubectl vpn migrate ipsecgateway %s -n %s --dry-run shows the VPNGateway it becomes.\n", name, name, ns)
		return nil
	}
	gws, err := loadGateways(ctx, c, ns, name, false)
	if err != nil {
		return err
	}
	dg := collect(ctx, o, c, gws[0], d)
	printDiagnosis(o.streams.Out, dg)
	return nil
}

// collect reads everything diagnose looks at. Whatever cannot be read is recorded as such.
func collect(ctx context.Context, o *options, c client.Client, data *gatewayData, d diagnoseOptions) *diagnosis {
	gw := data.gw
	access, err := o.newAgentAccess()
	if err != nil {
		warnf(o, "cannot reach the gateway pod: %v", err)
	}
	data.loadAgent(ctx, c, access, true)
	dg := &diagnosis{data: data}
	if data.metrics != nil && d.interval > 0 {
		first := data.metrics
		select {
		case <-ctx.Done():
		case <-time.After(d.interval):
			if m, err := readMetrics(ctx, access, gw, data.pod); err == nil {
				dg.earlier, data.metrics, dg.interval = first, m, d.interval
			}
		}
	}
	now := o.now()
	events, evErr := gatewayEvents(ctx, c, data, d.events)
	if evErr != nil {
		dg.eventsErr = shortError(evErr)
	}
	ge := gatewayEvidence{Gateway: gw, Pod: data.pod, NoPod: data.noPod, Metrics: data.metrics, MetricsErr: data.metricsErr, Now: now, AgentTail: int(d.tail)}
	for _, ev := range events {
		if ev.Kind == "VPNGateway" {
			ge.Events = append(ge.Events, ev)
		}
	}
	var charon []logLine
	if data.pod != nil && access != nil {
		if raw, err := access.Logs(ctx, gw.Namespace, data.pod.Name, children.ContainerAgent, d.tail); err != nil {
			ge.LogErr = shortError(err)
		} else {
			ge.Agent = splitLog(raw)
		}
		switch {
		case gw.Spec.Protocol != vpnv1.ProtocolIPsec:
			dg.charonNA = true
		case !podHasContainer(data.pod, children.ContainerCharon):
			dg.charonErr = "the pod has no charon container"
		default:
			if raw, err := access.Logs(ctx, gw.Namespace, data.pod.Name, children.ContainerCharon, d.tail); err != nil {
				dg.charonErr = shortError(err)
			} else {
				charon = splitLog(raw)
				if charon == nil {
					charon = []logLine{}
				}
			}
		}
	} else {
		why := data.noPod
		if data.pod != nil {
			why = "no access to the API server for the pod's logs"
		}
		ge.LogErr, dg.charonErr = why, why
		dg.charonNA = gw.Spec.Protocol != vpnv1.ProtocolIPsec
	}
	dg.gateway, dg.charon = ge, charon

	rep := data.report(now)
	vips := map[string]exposureReport{}
	var offered []string
	for _, e := range rep.Exposures {
		vips[e.Name] = e
		offered = append(offered, e.Name)
	}
	for i := range data.peers {
		p := &data.peers[i]
		pe := peerEvidence{Gateway: gw, Peer: p, Decision: data.decisions[p.Name], Offered: offered,
			Interval: dg.interval, Charon: charon, CharonLines: int(d.tail), Now: now}
		exp, _ := data.reaches(p)
		for _, n := range exp {
			e := vips[n]
			pe.Reaches = append(pe.Reaches, fmt.Sprintf("%s (%s %s)", n, orDash(e.VirtualIP), orDash(strings.Join(e.Ports, ","))))
		}
		pe.IKEProposals, pe.ESPProposals = effectiveProposals(gw, p)
		for _, ev := range events {
			if ev.Kind == "VPNPeer" && ev.Name == p.Name {
				pe.Events = append(pe.Events, ev)
			}
		}
		if data.metrics != nil {
			pe.Metrics = data.metrics.Peers[p.Name]
			if pe.Metrics == nil {
				pe.Metrics = &peerMetrics{}
			}
			if dg.earlier != nil {
				pe.Earlier = dg.earlier.Peers[p.Name]
				if pe.Earlier == nil {
					pe.Earlier = &peerMetrics{}
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
func gatewayEvents(ctx context.Context, c client.Client, d *gatewayData, n int) ([]eventFact, error) {
	ns := d.gw.Namespace
	peers := map[string]bool{}
	for _, p := range d.peers {
		peers[p.Name] = true
	}
	wanted := func(kind, name string) bool {
		return (kind == "VPNGateway" && name == d.gw.Name) || (kind == "VPNPeer" && peers[name])
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
			errs = append(errs, "core/v1: "+shortError(err))
			break
		}
		for _, e := range list.Items {
			add(coreEvent(&e))
		}
	}
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		errs = append(errs, "events.k8s.io/v1: "+shortError(err))
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

func firstTime(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

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

// --- output ---

func printDiagnosis(w io.Writer, dg *diagnosis) {
	gw := dg.data.gw
	now := dg.gateway.Now
	rep := dg.data.report(now)
	ep := rep.Endpoint.Kind
	if rep.Endpoint.Detail != "" {
		ep += " " + rep.Endpoint.Detail
	}
	fmt.Fprintf(w, "VPNGateway %s/%s: %s, endpoint %s, public address %s, service CIDR %s\n",
		gw.Namespace, gw.Name, gw.Spec.Protocol, ep, orDash(gw.Status.PublicAddress), orDash(gw.Status.ServiceCIDR))
	printFindings(w, gatewayFindings(dg.gateway))
	printConditions(w, gw.Status.Conditions, append([]string{vpnv1.ConditionReady}, gatewayConditionOrder...))

	// the agent's view
	fmt.Fprintln(w, "  agent:")
	switch {
	case dg.data.pod == nil:
		fmt.Fprintf(w, "    no gateway pod: %s\n", dg.data.noPod)
	default:
		pod := dg.data.pod
		state := "Running, ready"
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || !podReady(pod) {
			state = podState(pod)
		}
		fmt.Fprintf(w, "    pod %s (%s)\n", pod.Name, state)
		if m := dg.data.metrics; m != nil {
			how := "once"
			if dg.earlier != nil {
				how = fmt.Sprintf("twice, %s apart", dg.interval)
			}
			spoofed := ""
			if m.SpoofedDrops != nil {
				spoofed = ", spoofed sources dropped " + optInt(m.SpoofedDrops)
			}
			fmt.Fprintf(w, "    metrics (read %s through the API server's pod proxy): ruleset repairs %s, configurations rejected %s%s\n",
				how, optInt(m.RulesetRepairs), optInt(m.ConfigRejected), spoofed)
		} else {
			fmt.Fprintf(w, "    metrics %s\n", dg.data.metricsErr)
		}
	}
	printEvents(w, dg.gateway.Events, now, dg.eventsErr)
	if dg.gateway.Agent != nil {
		entries, dropped := parseAgent(dg.gateway.Agent)
		fmt.Fprintf(w, "  agent log (errors and failures in the last %d lines):\n", dg.gateway.AgentTail)
		if len(entries) == 0 {
			fmt.Fprintln(w, "    none")
		}
		for _, en := range lastN(entries, 15) {
			fmt.Fprintf(w, "    %s  %s\n", age(now, en.Time), en)
		}
		if dropped > 0 {
			fmt.Fprintf(w, "    (%s not in the agent's JSON form not shown)\n", plural(dropped, "line"))
		}
	} else if dg.data.pod != nil {
		fmt.Fprintf(w, "  agent log: not readable: %s\n", dg.gateway.LogErr)
	}
	if !dg.charonNA {
		if dg.charon == nil {
			fmt.Fprintf(w, "  charon log: not readable: %s\n", orDash(dg.charonErr))
		} else {
			entries, dropped := parseCharon(dg.charon)
			var unattributed []charonEntry
			for _, en := range entries {
				if en.SA == 0 && en.shown() {
					unattributed = append(unattributed, en)
				}
			}
			fmt.Fprintf(w, "  charon log: %d of the last %s in shapes diagnose reads (the others are not shown)\n", len(entries), plural(len(entries)+dropped, "line"))
			for _, en := range lastN(unattributed, 10) {
				fmt.Fprintf(w, "    %s  %s\n", age(now, en.Time), en)
			}
		}
	}

	for _, pe := range dg.peers {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "VPNPeer %s\n", pe.Peer.Name)
		printFindings(w, peerFindings(pe))
		printConditions(w, pe.Peer.Status.Conditions, []string{vpnv1.ConditionAuthorized, conditionCredentialsReady, vpnv1.ConditionConnected})
		if pe.Metrics != nil {
			m := pe.Metrics
			up := "down"
			if m.Up {
				up = "up"
			}
			delta := ""
			if pe.Earlier != nil {
				delta = fmt.Sprintf(" (+%d in %s)", m.DropsIn+m.DropsOut-pe.Earlier.DropsIn-pe.Earlier.DropsOut, pe.Interval)
			}
			fmt.Fprintf(w, "  agent: tunnel %s, %d rekeys, authorization drops %d in / %d out%s\n", up, m.Rekeys, m.DropsIn, m.DropsOut, delta)
		}
		printEvents(w, pe.Events, now, "")
		if pe.Charon != nil {
			var shown []string
			for _, sa := range pe.peerCharon() {
				for _, en := range sa.entries {
					if en.shown() {
						shown = append(shown, age(now, en.Time)+"  "+en.String())
					}
				}
			}
			if len(shown) > 0 {
				fmt.Fprintln(w, "  charon log (this peer's IKE_SAs):")
				for _, s := range compactRepeats(lastN(shown, 12)) {
					fmt.Fprintf(w, "    %s\n", s)
				}
			}
		}
	}
}

func printFindings(w io.Writer, fs []finding) {
	for i, f := range fs {
		label := "  verdict: "
		if i > 0 {
			label = "  also:    "
		}
		fmt.Fprintf(w, "%s%s %s: %s\n", label, strings.ToUpper(f.Severity), f.Cause, f.Summary)
		if f.Next != "" {
			fmt.Fprintf(w, "           next: %s\n", f.Next)
		}
	}
}

func printConditions(w io.Writer, conds []metav1.Condition, order []string) {
	if len(conds) == 0 {
		fmt.Fprintln(w, "  conditions: none reported")
		return
	}
	fmt.Fprintln(w, "  conditions:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	seen := map[string]bool{}
	row := func(c metav1.Condition) {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, t := range order {
		for _, c := range conds {
			if c.Type == t {
				row(c)
				seen[t] = true
			}
		}
	}
	for _, c := range conds {
		if !seen[c.Type] {
			row(c)
		}
	}
	tw.Flush()
}

func printEvents(w io.Writer, events []eventFact, now time.Time, errText string) {
	if errText != "" {
		fmt.Fprintf(w, "  events: not readable: %s\n", errText)
		return
	}
	if len(events) == 0 {
		fmt.Fprintln(w, "  events: none")
		return
	}
	fmt.Fprintln(w, "  events (oldest first):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range events {
		count := ""
		if e.Count > 1 {
			count = fmt.Sprintf(" (x%d)", e.Count)
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s/%s\t%s%s\n", age(now, e.Time), e.Type, e.Reason, e.Kind, e.Name, e.Message, count)
	}
	tw.Flush()
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func lastN[T any](l []T, n int) []T {
	if len(l) > n {
		return l[len(l)-n:]
	}
	return l
}

// compactRepeats folds consecutive lines that differ only in their age into one with a count.
func compactRepeats(lines []string) []string {
	var out []string
	var prev string
	n := 0
	flush := func() {
		if n > 1 {
			out[len(out)-1] += fmt.Sprintf(" (x%d)", n)
		}
	}
	for _, l := range lines {
		_, body, _ := strings.Cut(l, "  ")
		if n > 0 && body == prev {
			n++
			continue
		}
		flush()
		out = append(out, l)
		prev, n = body, 1
	}
	flush()
	return slices.Clip(out)
}
