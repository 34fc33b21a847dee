package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/importer"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/manifests"
)

func newImportCommand(o *options) *cobra.Command {
	var (
		apply  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "import SHEET",
		Short: "Turn a parameter sheet into VPNGateway, VPNPeer and Secret manifests",
		Long: `Reads a parameter sheet (YAML, or a field,value CSV; "-" reads stdin) with the fields engineers
collect for a site-to-site tunnel, algorithms in any vendor's words (AES256-GCM-16, GCMAES256,
aes-gcm-256, SHA2-256, group 14, ecp256, ...), and writes the VPNGateway, VPNPeer and Secret
that express it. Everything the operator cannot express is refused, naming the sheet field.
A sheet without gateway.endpoint describes a peer of an existing gateway: the gateway is not
written, and --apply checks that its IKE settings and service CIDR match the sheet.

--apply creates the objects instead of printing them. It never changes an existing gateway
(its IKE settings are shared by all its peers) nor an existing Secret holding another key;
an existing peer of the same gateway is updated.

The sheet format is in docs/kubectl-vpn.md; kubectl vpn peer-config PEER --format sheet
writes one for an existing peer.`,
		Example: `  kubectl vpn import acme-hq.yaml > acme-hq-manifests.yaml
  kubectl vpn import acme-hq.csv -n acme --apply`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(o.streams.In)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			sheet, err := deviceconfig.ParseSheet(data)
			if err != nil {
				return err
			}
			ns := o.explicitNamespace()
			if ns == "" && sheet.Gateway.Namespace == "" {
				if ns, _, err = o.namespace(); err != nil {
					return err
				}
			}
			im, err := importer.Import(sheet, ns)
			if err != nil {
				return err
			}
			for _, w := range im.Warnings {
				warnf(o, "%s", w)
			}
			if !apply {
				return manifests.Write(o.streams.Out, output, importer.Objects(im))
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			return importer.Apply(contextOf(cmd), c, im, o.streams.Out)
		},
	}
	cmd.Flags().BoolVar(&apply, "apply", false, "create the objects in the cluster instead of printing them")
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format when not applying: yaml or json")
	return cmd
}
