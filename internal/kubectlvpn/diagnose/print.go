package diagnose

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
)

// printDiagnosis writes the gateway's verdict, conditions, agent, events and logs, then each
// peer's.
func printDiagnosis(w io.Writer, dg *diagnosis) {
	gw := dg.data.VPNGateway
	now := dg.gateway.Now
	rep := status.GatewayReportOf(dg.data, now)
	ep := rep.Endpoint.Kind
	if rep.Endpoint.Detail != "" {
		ep += " " + rep.Endpoint.Detail
	}
	fmt.Fprintf(w, "VPNGateway %s/%s: %s, endpoint %s, public address %s, service CIDR %s\n",
		gw.Namespace, gw.Name, gw.Spec.Protocol, ep, status.OrDash(gw.Status.PublicAddress), status.OrDash(gw.Status.ServiceCIDR))
	printFindings(w, gatewayFindings(dg.gateway))
	printConditions(w, gw.Status.Conditions, append([]string{vpnv1.ConditionReady}, status.GatewayConditionOrder...))

	// the agent's view
	fmt.Fprintln(w, "  agent:")
	switch {
	case dg.data.Pod == nil:
		fmt.Fprintf(w, "    no gateway pod: %s\n", dg.data.NoPod)
	default:
		pod := dg.data.Pod
		state := "Running, ready"
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || !gateways.PodReady(pod) {
			state = podState(pod)
		}
		fmt.Fprintf(w, "    pod %s (%s)\n", pod.Name, state)
		if m := dg.data.Metrics; m != nil {
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
			fmt.Fprintf(w, "    metrics %s\n", dg.data.MetricsErr)
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
	} else if dg.data.Pod != nil {
		fmt.Fprintf(w, "  agent log: not readable: %s\n", dg.gateway.LogErr)
	}
	if !dg.charonNA {
		if dg.charon == nil {
			fmt.Fprintf(w, "  charon log: not readable: %s\n", status.OrDash(dg.charonErr))
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
		printConditions(w, pe.Peer.Status.Conditions, []string{vpnv1.ConditionAuthorized, status.ConditionCredentialsReady, vpnv1.ConditionConnected})
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

// printFindings writes the verdict (the first finding) and the others, each with its next step.
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

// printConditions writes the conditions, those of order first in that order.
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

// printEvents writes the Events, oldest first, or why they could not be read.
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

// age is how long ago t was, or "-".
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

// plural is "n what" or "n whats".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// optInt is the number, or "-" when nil.
func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// lastN is the last n of l.
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
