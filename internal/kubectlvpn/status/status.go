package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

func newStatusCommand(o *options) *cobra.Command {
	var (
		output        string
		allNamespaces bool
		metrics       bool
	)
	cmd := &cobra.Command{
		Use:   "status [GATEWAY]",
		Short: "Show gateways, their peers' tunnels and who may reach what",
		Long: `Shows one table per VPNGateway (GATEWAY, else every gateway of the namespace; -A: of all
namespaces), then one per legacy IPsecGateway (its conditions and its tunnels' state as the
agent reports them, and whether it was migrated): endpoint, public address, service CIDR, Ready with the failing cause; per peer
Authorized and Connected with their reasons, how long the tunnel is up, bytes in/out, the last
WireGuard handshake and the packets dropped by authorization (from the gateway agent's metrics,
read through the API server's pod proxy; "-" when they cannot be read); the exposures with
virtual IP, target and the peers that may reach them (decided by the operator's own
authorization code). -o json or yaml prints the same for scripts; -o jsonpath=TEMPLATE picks
from it. Secrets are never read.`,
		Example: `  kubectl vpn status -n acme
  kubectl vpn status acme-gw -n acme -o json
  kubectl vpn status -A -o jsonpath='{range .gateways[*].peers[*]}{.name} {.connected.status}{"\n"}{end}'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			if allNamespaces && name != "" {
				return fmt.Errorf("a gateway is named by namespace and name: use -n with GATEWAY, not -A")
			}
			return status(cmd.Context(), o, name, allNamespaces, metrics, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json, yaml or jsonpath=TEMPLATE (default: tables)")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "gateways of all namespaces")
	cmd.Flags().BoolVar(&metrics, "metrics", true, "read the gateway agents' metrics through the API server's pod proxy (authorization drops)")
	return cmd
}

func status(ctx context.Context, o *options, name string, all, metrics bool, output string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	printer, err := reportPrinter(output)
	if err != nil {
		return err
	}
	ns, _, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.newClient()
	if err != nil {
		return err
	}
	legacy, err := loadLegacy(ctx, c, ns, name, all)
	if err != nil {
		return err
	}
	var gws []*gatewayData
	// GATEWAY may name an IPsecGateway alone (no VPNGateway of that name).
	if name == "" || len(legacy) == 0 || vpnGatewayExists(ctx, c, ns, name) {
		if gws, err = loadGateways(ctx, c, ns, name, all); err != nil {
			return err
		}
	}
	var access agentAccess
	if metrics && len(gws) > 0 {
		if access, err = o.newAgentAccess(); err != nil {
			warnf(o, "cannot reach the gateway pods: %v", err)
		}
	}
	now := o.now()
	rep := statusReport{Kind: statusKind, APIVersion: reportAPIVersion, Gateways: []gatewayReport{}}
	// the agents are asked in parallel (a pod that does not answer costs its timeout once)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, d := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			d.loadAgent(ctx, c, access, metrics)
		}()
	}
	wg.Wait()
	for _, d := range gws {
		rep.Gateways = append(rep.Gateways, d.report(now))
	}
	for i := range legacy {
		rep.IPsecGateways = append(rep.IPsecGateways, legacyReportOf(&legacy[i], now))
	}
	if printer != nil {
		return printer(o.streams.Out, rep)
	}
	if len(gws) == 0 && len(legacy) == 0 {
		where := "namespace " + ns
		if all {
			where = "any namespace"
		}
		fmt.Fprintf(o.streams.ErrOut, "No VPNGateways found in %s.\n", where)
		return nil
	}
	for i, g := range rep.Gateways {
		if i > 0 {
			fmt.Fprintln(o.streams.Out)
		}
		printGatewayStatus(o.streams.Out, g, metrics, now)
	}
	for i, g := range rep.IPsecGateways {
		if i > 0 || len(rep.Gateways) > 0 {
			fmt.Fprintln(o.streams.Out)
		}
		printLegacyStatus(o.streams.Out, g)
	}
	return nil
}

// vpnGatewayExists reports whether the namespace has a VPNGateway of that name (an error
// reading it counts as yes: loadGateways then says what went wrong).
func vpnGatewayExists(ctx context.Context, c client.Client, namespace, name string) bool {
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &vpnv1.VPNGateway{})
	return !apierrors.IsNotFound(err)
}

// reportPrinter is the printer for -o (nil: the tables).
func reportPrinter(output string) (func(io.Writer, any) error, error) {
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

// printGatewayStatus writes one gateway's tables.
func printGatewayStatus(w io.Writer, g gatewayReport, metrics bool, now time.Time) {
	fmt.Fprintf(w, "VPNGateway %s/%s\n", g.Namespace, g.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	field("protocol", g.Protocol)
	ep := g.Endpoint.Kind
	if g.Endpoint.Detail != "" {
		ep += " " + g.Endpoint.Detail
	}
	field("endpoint", ep)
	field("public address", orDash(g.PublicAddress))
	field("service CIDR", orDash(g.ServiceCIDR))
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
				humanBytes(p.BytesIn), humanBytes(p.BytesOut), hs, drops)
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
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.Name, orDash(e.VirtualIP), orDash(target),
				orDash(strings.Join(e.Ports, ",")), listOrNobody(e.ReachableBy))
		}
		tw.Flush()
	}
	if len(g.ReverseExposures) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  REVERSE EXPOSURE\tVIRTUAL IP\tTARGET\tPORTS\tGRANTED TO")
		for _, e := range g.ReverseExposures {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.Name, orDash(e.VirtualIP), orDash(e.Target),
				orDash(strings.Join(e.Ports, ",")), listOrNobody(e.Grantees))
		}
		tw.Flush()
	}
}

func readyText(g gatewayReport) string {
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
func condText(c conditionReport) string {
	if c.Reason == "" {
		return c.Status
	}
	return c.Status + " (" + c.Reason + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOrNobody(l []string) string {
	if len(l) == 0 {
		return "nobody"
	}
	return strings.Join(l, ", ")
}

// humanBytes is a byte count in B, KiB, MiB, GiB or TiB with one decimal.
func humanBytes(n int64) string {
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
