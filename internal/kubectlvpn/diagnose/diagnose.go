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
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
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
