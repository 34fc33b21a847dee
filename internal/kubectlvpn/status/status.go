package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
)

// Options are what kubectl vpn status is asked.
type Options struct {
	Namespace string
	// Name is the gateway asked for: a VPNGateway, or an IPsecGateway of that name when there
	// is no VPNGateway. "": every gateway of Namespace, or of all namespaces with
	// AllNamespaces.
	Name          string
	AllNamespaces bool
	// Metrics: read each gateway agent's metrics (through Run's AgentAccess).
	Metrics bool
	// Print writes the report (-o json, yaml, jsonpath); nil: the tables.
	Print Printer
	// Now is the clock the durations are measured with.
	Now func() time.Time
}

// Run reads the gateways and their agents' metrics (access nil: none can be read, and the
// report says so), and writes the report to out; "none found" goes to errOut.
func Run(ctx context.Context, c client.Client, access gateways.AgentAccess, o Options, out, errOut io.Writer) error {
	ns, name, all := o.Namespace, o.Name, o.AllNamespaces
	legacy, err := gateways.LoadLegacy(ctx, c, ns, name, all)
	if err != nil {
		return err
	}
	var gws []*gateways.Gateway
	// GATEWAY may name an IPsecGateway alone (no VPNGateway of that name).
	if name == "" || len(legacy) == 0 || gateways.VPNGatewayExists(ctx, c, ns, name) {
		if gws, err = gateways.Load(ctx, c, ns, name, all); err != nil {
			return err
		}
	}
	now := o.Now()
	rep := Report{Kind: ReportKind, APIVersion: ReportAPIVersion, Gateways: []GatewayReport{}}
	// the agents are asked in parallel (a pod that does not answer costs its timeout once)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, d := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d.LoadAgent(ctx, c, access, o.Metrics)
		}()
	}
	wg.Wait()
	for _, d := range gws {
		rep.Gateways = append(rep.Gateways, GatewayReportOf(d, now))
	}
	for i := range legacy {
		rep.IPsecGateways = append(rep.IPsecGateways, LegacyReportOf(&legacy[i], now))
	}
	if o.Print != nil {
		return o.Print(out, rep)
	}
	if len(gws) == 0 && len(legacy) == 0 {
		where := "namespace " + ns
		if all {
			where = "any namespace"
		}
		fmt.Fprintf(errOut, "No VPNGateways found in %s.\n", where)
		return nil
	}
	for i, g := range rep.Gateways {
		if i > 0 {
			fmt.Fprintln(out)
		}
		PrintGateway(out, g, o.Metrics, now)
	}
	for i, g := range rep.IPsecGateways {
		if i > 0 || len(rep.Gateways) > 0 {
			fmt.Fprintln(out)
		}
		PrintLegacy(out, g)
	}
	return nil
}

// Printer writes a report in a machine-readable format.
type Printer func(io.Writer, any) error

// NewPrinter is the printer for -o json, yaml or jsonpath=TEMPLATE ("": nil, the tables).
func NewPrinter(output string) (Printer, error) {
	switch {
	case output == "":
		return nil, nil
	case output == "json":
		return func(w io.Writer, v any) error {
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		}, nil
	case output == "yaml":
		return func(w io.Writer, v any) error {
			b, err := yaml.Marshal(v)
			if err != nil {
				return err
			}
			_, err = w.Write(b)
			return err
		}, nil
	case strings.HasPrefix(output, "jsonpath="):
		jp := jsonpath.New("output")
		if err := jp.Parse(strings.TrimPrefix(output, "jsonpath=")); err != nil {
			return nil, fmt.Errorf("-o %s: %v", output, err)
		}
		return func(w io.Writer, v any) error {
			// the template sees the JSON field names
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			var generic any
			if err := json.Unmarshal(b, &generic); err != nil {
				return err
			}
			return jp.Execute(w, generic)
		}, nil
	}
	return nil, fmt.Errorf("-o %q: use json, yaml or jsonpath=TEMPLATE", output)
}

// PrintGateway writes one gateway's tables; metrics says whether its agent was asked.
func PrintGateway(w io.Writer, g GatewayReport, metrics bool, now time.Time) {
	fmt.Fprintf(w, "VPNGateway %s/%s\n", g.Namespace, g.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	field("protocol", g.Protocol)
	ep := g.Endpoint.Kind
	if g.Endpoint.Detail != "" {
		ep += " " + g.Endpoint.Detail
	}
	field("endpoint", ep)
	field("public address", OrDash(g.PublicAddress))
	field("service CIDR", OrDash(g.ServiceCIDR))
	field("ready", readyText(g))
	var agent string
	switch {
	case g.Agent.Pod == "":
		agent = "no gateway pod (" + g.Agent.Error + ")"
	case !metrics:
		agent = "pod " + g.Agent.Pod
	case g.Agent.Metrics:
		agent = "pod " + g.Agent.Pod + ", metrics read through the API server's pod proxy"
	default:
		agent = "pod " + g.Agent.Pod + "; metrics " + g.Agent.Error + " (drops shown as -)"
	}
	field("agent", agent)
	if g.Availability != nil {
		field("availability", availabilityText(*g.Availability, now))
	}
	tw.Flush()

	fmt.Fprintln(w)
	computed := false
	if len(g.Peers) == 0 {
		fmt.Fprintln(w, "  no peers")
	} else {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PEER\tAUTHORIZED\tCONNECTED\tESTABLISHED\tBYTES IN\tBYTES OUT\tLAST HANDSHAKE\tAUTH DROPS IN/OUT")
		for _, p := range g.Peers {
			authz := condText(p.Authorized)
			if !p.Authorized.Reported {
				authz += "*"
				computed = true
			}
			est := "-"
			if p.EstablishedForSeconds != nil {
				est = duration.HumanDuration(time.Duration(*p.EstablishedForSeconds) * time.Second)
			}
			hs := "-"
			if p.LastHandshake != nil && g.Protocol == "wireguard" {
				hs = duration.HumanDuration(now.Sub(p.LastHandshake.Time)) + " ago"
			}
			drops := "-"
			if p.AuthorizationDrops != nil {
				drops = fmt.Sprintf("%d/%d", p.AuthorizationDrops.In, p.AuthorizationDrops.Out)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, authz, condText(p.Connected), est,
				HumanBytes(p.BytesIn), HumanBytes(p.BytesOut), hs, drops)
		}
		tw.Flush()
		if computed {
			fmt.Fprintln(w, "  * not reported by the operator yet: computed by kubectl vpn from the gateway and its peers")
		}
	}

	fmt.Fprintln(w)
	if len(g.Exposures) == 0 {
		fmt.Fprintln(w, "  no exposures")
	} else {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  EXPOSURE\tVIRTUAL IP\tTARGET\tPORTS\tREACHABLE BY")
		for _, e := range g.Exposures {
			target := e.Target.Address
			if e.Target.Service != "" {
				target = "service/" + e.Target.Service
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.Name, OrDash(e.VirtualIP), OrDash(target),
				OrDash(strings.Join(e.Ports, ",")), listOrNobody(e.ReachableBy))
		}
		tw.Flush()
	}
	if len(g.ReverseExposures) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  REVERSE EXPOSURE\tVIRTUAL IP\tTARGET\tPORTS\tGRANTED TO")
		for _, e := range g.ReverseExposures {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.Name, OrDash(e.VirtualIP), OrDash(e.Target),
				OrDash(strings.Join(e.Ports, ",")), listOrNobody(e.Grantees))
		}
		tw.Flush()
	}
}

// availabilityText is the pair in one line: who is active, who stands by, the last takeover.
func availabilityText(a AvailabilityReport, now time.Time) string {
	s := "active " + OrDash(a.ActivePod)
	if a.ActivePod == "" {
		s = "no active pod"
	}
	if len(a.StandbyPods) == 0 {
		s += ", no standby ready"
	} else {
		s += ", standby " + strings.Join(a.StandbyPods, ", ")
	}
	if t := a.LastTakeover; t != nil {
		from := t.From
		if from == "" {
			from = "none"
		}
		s += fmt.Sprintf("; last takeover %s ago, %s -> %s (%s", duration.HumanDuration(now.Sub(t.Time.Time)), from, t.To, t.Reason)
		if t.OutageMillis > 0 {
			s += fmt.Sprintf(", %s without an active pod", (time.Duration(t.OutageMillis) * time.Millisecond).String())
		}
		s += ")"
	}
	return s
}

// readyText is the Ready condition, with its first failing cause when not True.
func readyText(g GatewayReport) string {
	if g.Ready.Status == "True" {
		return "True"
	}
	s := g.Ready.Status
	if g.Cause != nil {
		return fmt.Sprintf("%s: %s %s: %s", s, g.Cause.Condition, g.Cause.Reason, g.Cause.Message)
	}
	if g.Ready.Reason != "" {
		s += " (" + g.Ready.Reason + ")"
	}
	if g.Ready.Message != "" {
		s += ": " + g.Ready.Message
	}
	return s
}

// condText is "Status (Reason)", or "Unknown" for a condition not reported.
func condText(c ConditionReport) string {
	if c.Reason == "" {
		return c.Status
	}
	return c.Status + " (" + c.Reason + ")"
}

// OrDash is s, or "-" when empty.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// listOrNobody is the names, or "nobody".
func listOrNobody(l []string) string {
	if len(l) == 0 {
		return "nobody"
	}
	return strings.Join(l, ", ")
}

// HumanBytes is a byte count in B, KiB, MiB, GiB or TiB with one decimal.
func HumanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= 1024
		if f < 1024 || u == "TiB" {
			return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") + u
		}
	}
	return ""
}
