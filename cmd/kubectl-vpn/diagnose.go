package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/diagnose"
)

func newDiagnoseCommand(o *options) *cobra.Command {
	d := diagnose.Options{}
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
			ns, _, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			access, err := o.newAgentAccess()
			if err != nil {
				warnf(o, "cannot reach the gateway pod: %v", err)
			}
			d.Namespace, d.Gateway, d.Now = ns, args[0], o.now
			return diagnose.Run(contextOf(cmd), c, access, d, o.streams.Out)
		},
	}
	cmd.Flags().Int64Var(&d.Tail, "tail", 200, "lines of each container's log to read")
	cmd.Flags().IntVar(&d.Events, "events", 20, "most recent Events to show")
	cmd.Flags().DurationVar(&d.Interval, "interval", 3*time.Second, "read the metrics again after this long to see whether drops rise (0: once)")
	return cmd
}
