package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// LegacyReport is one legacy IPsecGateway (ipsec.bnerd.net): the operator's conditions and
// the agent's tunnels as its status holds them.
type LegacyReport struct {
	Namespace     string         `json:"namespace"`
	Name          string         `json:"name"`
	Endpoint      EndpointReport `json:"endpoint"`
	PublicAddress string         `json:"publicAddress"`
	ServiceCIDR   string         `json:"serviceCIDR"`
	// MigratedTo is the VPNGateway it was released to (kubectl vpn migrate), if any.
	MigratedTo string               `json:"migratedTo,omitempty"`
	Ready      ConditionReport      `json:"ready"`
	Cause      *CauseReport         `json:"cause"`
	TunnelsUp  string               `json:"tunnelsUp"`
	Tunnels    []LegacyTunnelReport `json:"tunnels"`
}

// LegacyTunnelReport is one tunnel of an IPsecGateway.
type LegacyTunnelReport struct {
	Name          string   `json:"name"`
	RemoteSubnets []string `json:"remoteSubnets"`
	// State is the agent's (Established, Connecting, Down), "" until it reported.
	State                 string `json:"state"`
	EstablishedForSeconds *int64 `json:"establishedForSeconds,omitempty"`
	BytesIn               int64  `json:"bytesIn"`
	BytesOut              int64  `json:"bytesOut"`
	LastError             string `json:"lastError,omitempty"`
}

// LegacyReportOf is the report of one IPsecGateway at now.
func LegacyReportOf(g *ipsecv1.IPsecGateway, now time.Time) LegacyReport {
	ready, cause := Readiness(&vpnv1.VPNGateway{Status: vpnv1.VPNGatewayStatus{Conditions: g.Status.Conditions}})
	r := LegacyReport{
		Namespace: g.Namespace, Name: g.Name, Endpoint: endpointOf(g.Spec.Endpoint),
		PublicAddress: g.Status.PublicAddress, ServiceCIDR: g.Status.ServiceCIDR,
		MigratedTo: g.Annotations[ipsecv1.AnnotationMigratedTo],
		Ready:      ready, Cause: cause, TunnelsUp: g.Status.TunnelsUp, Tunnels: []LegacyTunnelReport{},
	}
	state := map[string]ipsecv1.TunnelStatus{}
	for _, s := range g.Status.Tunnels {
		state[s.Name] = s
	}
	for _, t := range g.Spec.Tunnels {
		s := state[t.Name]
		tr := LegacyTunnelReport{Name: t.Name, RemoteSubnets: t.RemoteSubnets, State: s.State,
			BytesIn: s.BytesIn, BytesOut: s.BytesOut, LastError: s.LastError}
		if s.EstablishedAt != nil && s.State == "Established" {
			secs := int64(now.Sub(s.EstablishedAt.Time) / time.Second)
			tr.EstablishedForSeconds = &secs
		}
		r.Tunnels = append(r.Tunnels, tr)
	}
	return r
}

// PrintLegacy prints one IPsecGateway as a table, as PrintGateway a VPNGateway.
func PrintLegacy(w io.Writer, g LegacyReport) {
	fmt.Fprintf(w, "IPsecGateway %s/%s (legacy ipsec.bnerd.net; kubectl vpn migrate ipsecgateway %s moves it)\n", g.Namespace, g.Name, g.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	ep := g.Endpoint.Kind
	if g.Endpoint.Detail != "" {
		ep += " " + g.Endpoint.Detail
	}
	field("endpoint", ep)
	field("public address", OrDash(g.PublicAddress))
	field("service CIDR", OrDash(g.ServiceCIDR))
	if g.MigratedTo != "" {
		field("migrated to", "VPNGateway "+g.MigratedTo+" (released: the operator no longer runs it)")
	}
	field("ready", readyText(GatewayReport{Ready: g.Ready, Cause: g.Cause}))
	field("tunnels up", OrDash(g.TunnelsUp))
	tw.Flush()
	fmt.Fprintln(w)
	if len(g.Tunnels) == 0 {
		fmt.Fprintln(w, "  no tunnels")
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TUNNEL\tREMOTE SUBNETS\tSTATE\tESTABLISHED\tBYTES IN\tBYTES OUT\tLAST ERROR")
	for _, t := range g.Tunnels {
		est := "-"
		if t.EstablishedForSeconds != nil {
			est = duration.HumanDuration(time.Duration(*t.EstablishedForSeconds) * time.Second)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, OrDash(strings.Join(t.RemoteSubnets, ",")), OrDash(t.State), est,
			HumanBytes(t.BytesIn), HumanBytes(t.BytesOut), OrDash(t.LastError))
	}
	tw.Flush()
}
