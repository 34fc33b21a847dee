package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// legacyReport is one legacy IPsecGateway (ipsec.bnerd.net): the operator's conditions and
// the agent's tunnels as its status holds them.
type legacyReport struct {
	Namespace     string         `json:"namespace"`
	Name          string         `json:"name"`
	Endpoint      endpointReport `json:"endpoint"`
	PublicAddress string         `json:"publicAddress"`
	ServiceCIDR   string         `json:"serviceCIDR"`
	// MigratedTo is the VPNGateway it was released to (kubectl vpn migrate), if any.
	MigratedTo string               `json:"migratedTo,omitempty"`
	Ready      conditionReport      `json:"ready"`
	Cause      *causeReport         `json:"cause"`
	TunnelsUp  string               `json:"tunnelsUp"`
	Tunnels    []legacyTunnelReport `json:"tunnels"`
}

type legacyTunnelReport struct {
	Name          string   `json:"name"`
	RemoteSubnets []string `json:"remoteSubnets"`
	// State is the agent's (Established, Connecting, Down), "" until it reported.
	State                 string `json:"state"`
	EstablishedForSeconds *int64 `json:"establishedForSeconds,omitempty"`
	BytesIn               int64  `json:"bytesIn"`
	BytesOut              int64  `json:"bytesOut"`
	LastError             string `json:"lastError,omitempty"`
}

// loadLegacy reads the IPsecGateways asked for (one by name, all of a namespace, or all),
// sorted by namespace and name. A name that is not an IPsecGateway gives none.
func loadLegacy(ctx context.Context, c client.Client, namespace, name string, all bool) ([]ipsecv1.IPsecGateway, error) {
	if name != "" {
		var g ipsecv1.IPsecGateway
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &g); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
		return []ipsecv1.IPsecGateway{g}, nil
	}
	var list ipsecv1.IPsecGatewayList
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	return list.Items, nil
}

// legacyReportOf is the report of one IPsecGateway at now.
func legacyReportOf(g *ipsecv1.IPsecGateway, now time.Time) legacyReport {
	ready, cause := readiness(&vpnv1.VPNGateway{Status: vpnv1.VPNGatewayStatus{Conditions: g.Status.Conditions}})
	r := legacyReport{
		Namespace: g.Namespace, Name: g.Name, Endpoint: endpointOf(g.Spec.Endpoint),
		PublicAddress: g.Status.PublicAddress, ServiceCIDR: g.Status.ServiceCIDR,
		MigratedTo: g.Annotations[ipsecv1.AnnotationMigratedTo],
		Ready:      ready, Cause: cause, TunnelsUp: g.Status.TunnelsUp, Tunnels: []legacyTunnelReport{},
	}
	state := map[string]ipsecv1.TunnelStatus{}
	for _, s := range g.Status.Tunnels {
		state[s.Name] = s
	}
	for _, t := range g.Spec.Tunnels {
		s := state[t.Name]
		tr := legacyTunnelReport{Name: t.Name, RemoteSubnets: t.RemoteSubnets, State: s.State,
			BytesIn: s.BytesIn, BytesOut: s.BytesOut, LastError: s.LastError}
		if s.EstablishedAt != nil && s.State == "Established" {
			secs := int64(now.Sub(s.EstablishedAt.Time) / time.Second)
			tr.EstablishedForSeconds = &secs
		}
		r.Tunnels = append(r.Tunnels, tr)
	}
	return r
}

// printLegacyStatus prints one IPsecGateway as a table, as printGatewayStatus a VPNGateway.
func printLegacyStatus(w io.Writer, g legacyReport) {
	fmt.Fprintf(w, "IPsecGateway %s/%s (legacy ipsec.bnerd.net; kubectl vpn migrate ipsecgateway %s moves it)\n", g.Namespace, g.Name, g.Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	ep := g.Endpoint.Kind
	if g.Endpoint.Detail != "" {
		ep += " " + g.Endpoint.Detail
	}
	field("endpoint", ep)
	field("public address", orDash(g.PublicAddress))
	field("service CIDR", orDash(g.ServiceCIDR))
	if g.MigratedTo != "" {
		field("migrated to", "VPNGateway "+g.MigratedTo+" (released: the operator no longer runs it)")
	}
	field("ready", readyText(gatewayReport{Ready: g.Ready, Cause: g.Cause}))
	field("tunnels up", orDash(g.TunnelsUp))
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
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, orDash(strings.Join(t.RemoteSubnets, ",")), orDash(t.State), est,
			humanBytes(t.BytesIn), humanBytes(t.BytesOut), orDash(t.LastError))
	}
	tw.Flush()
}
