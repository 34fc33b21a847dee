package main

import (
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"

	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/migrate"
)

func newMigrateCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move a legacy object to the unified vpn.bnerd.net API",
		Long: `Moves a legacy ipsec.bnerd.net object to the unified vpn.bnerd.net API without a change on the
client's side. See kubectl vpn migrate ipsecgateway --help.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newMigrateIPsecGatewayCommand(o))
	return cmd
}

func newMigrateIPsecGatewayCommand(o *options) *cobra.Command {
	var f migrate.Options
	cmd := &cobra.Command{
		Use:     "ipsecgateway NAME",
		Aliases: []string{"ipsecgw", "ipsecgateways"},
		Short:   "Turn a legacy IPsecGateway into a VPNGateway and one VPNPeer per tunnel, same endpoint",
		Long: `Reads the IPsecGateway and writes the VPNGateway and the VPNPeers (one per tunnel, named after
it) that the client cannot tell apart from it: the same public address (a pool floating IP or a
node's address is pinned: spec.endpoint.floatingIP, spec.endpoint.hostNetwork.address), our IKE
identity (spec.ipsec.localID), the tunnels' identities, PSK Secret references and proposals, the
service CIDR and every virtual IP (taken from the legacy status when its spec left them empty).
One tunnel gets no authorization block (DefaultAllow); several get blocks granting exactly what
the legacy object allowed: every exposure, and each reverse exposure to the tunnel whose
subnets contain its target. What cannot be carried over exactly is refused, naming the field:
a LoadBalancer endpoint, a service CIDR or virtual IP not assigned yet, a status behind its
spec, a VPNGateway or VPNPeer of those names that exists and differs, another VPNPeer on the
new gateway.

--dry-run=server (the default) prints the objects, exactly as --apply applies them (-o yaml or
json), once the API server has accepted them in a server-side dry run and no object of those
names differs; --dry-run=client prints them without asking the API server; --dry-run=none is
--apply.

--apply applies them (server-side apply, field manager kubectl-vpn-migrate), then hands the
endpoint over: it annotates the IPsecGateway vpn.bnerd.net/migrated-to=<gateway>, and the
operator releases it (deletes its pod, never its address). It waits (--timeout) for the
VPNGateway to be Ready and every VPNPeer Connected, prints the measured outage (from the
handover to every peer Connected) and the new objects, and deletes the IPsecGateway
(--keep-legacy keeps it, released). When anything fails it says what was applied and prints
the commands that roll it back.`,
		Example: `  kubectl vpn migrate ipsecgateway acme -n acme                 # the objects, nothing applied
  kubectl vpn migrate ipsecgateway acme -n acme --apply --timeout 3m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch f.DryRun {
			case "none":
				f.Apply = true
			case "client", "server":
				if f.Apply && cmd.Flags().Changed("dry-run") {
					return fmt.Errorf("--dry-run=%s and --apply: choose one", f.DryRun)
				}
			default:
				return fmt.Errorf("--dry-run %q: none, client or server", f.DryRun)
			}
			switch f.Output {
			case "yaml", "json":
			default:
				return fmt.Errorf("-o %q: yaml or json", f.Output)
			}
			if f.Timeout <= 0 {
				return fmt.Errorf("--timeout %v: must be positive", f.Timeout)
			}
			ns, _, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			f.Namespace, f.IPsecGateway, f.Kubectl, f.Now = ns, args[0], o.kubectl(), o.now
			ctx, stop := signal.NotifyContext(contextOf(cmd), os.Interrupt)
			defer stop()
			return migrate.Run(ctx, c, f, o.streams.Out, o.streams.ErrOut)
		},
	}
	cmd.Flags().StringVar(&f.DryRun, "dry-run", "server", "server: print the objects the API server accepts, apply nothing; client: print them without asking it; none: apply (--apply)")
	cmd.Flags().Lookup("dry-run").NoOptDefVal = "server"
	cmd.Flags().BoolVar(&f.Apply, "apply", false, "apply the objects, hand the endpoint over, wait and delete the IPsecGateway")
	cmd.Flags().StringVarP(&f.Output, "output", "o", "yaml", "output format of --dry-run: yaml or json")
	cmd.Flags().DurationVar(&f.Timeout, "timeout", 120*time.Second, "how long --apply waits after the handover for the gateway to be Ready and every peer Connected")
	cmd.Flags().BoolVar(&f.KeepLegacy, "keep-legacy", false, "keep the (released) IPsecGateway instead of deleting it")
	cmd.Flags().StringVar(&f.Names.Gateway, "gateway", "", "name of the new VPNGateway (default: the IPsecGateway's)")
	cmd.Flags().StringVar(&f.Names.PeerPrefix, "peer-prefix", "", "put before each tunnel's name to name its VPNPeer")
	return cmd
}
