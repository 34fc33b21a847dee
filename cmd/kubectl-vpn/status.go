package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
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
			printer, err := status.NewPrinter(output)
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
			var access gateways.AgentAccess
			if metrics {
				if access, err = o.newAgentAccess(); err != nil {
					warnf(o, "cannot reach the gateway pods: %v", err)
				}
			}
			return status.Run(contextOf(cmd), c, access, status.Options{Namespace: ns, Name: name, AllNamespaces: allNamespaces,
				Metrics: metrics, Print: printer, Now: o.now}, o.streams.Out, o.streams.ErrOut)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json, yaml or jsonpath=TEMPLATE (default: tables)")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "gateways of all namespaces")
	cmd.Flags().BoolVar(&metrics, "metrics", true, "read the gateway agents' metrics through the API server's pod proxy (authorization drops)")
	return cmd
}
