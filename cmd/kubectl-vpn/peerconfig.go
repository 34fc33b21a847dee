package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/peerconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/secretfile"
)

func newPeerConfigCommand(o *options) *cobra.Command {
	var (
		format         string
		includeSecrets bool
		outFile        string
	)
	var list []string
	for _, f := range deviceconfig.Formats() {
		list = append(list, fmt.Sprintf("  %-11s %s", f.Name, f.Description))
	}
	cmd := &cobra.Command{
		Use:   "peer-config PEER --format FORMAT",
		Short: "Write the client device's configuration for a VPNPeer",
		Long: `Writes the configuration the client's device needs for VPNPeer PEER: our public address and
identity, the proposals in the vendor's names, our service CIDR as its remote network, DPD and
lifetimes, MTU/MSS advice, and {{...}} placeholders for what only the client knows. A proposal
the vendor cannot do is left out (with the reason in a comment), or the format is refused when
none is left. The pre-shared key is included only with --include-secrets (read from the peer's
Secret); it is never logged.

Formats:
` + strings.Join(list, "\n"),
		Example: `  kubectl vpn peer-config hq -n acme --format fortigate
  kubectl vpn peer-config hq -n acme --format strongswan --include-secrets --output-file hq-swanctl.conf`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format == "" {
				return fmt.Errorf("--format is required (one of %s)", strings.Join(deviceconfig.FormatNames(), ", "))
			}
			ns, _, err := o.namespace()
			if err != nil {
				return err
			}
			c, err := o.newClient()
			if err != nil {
				return err
			}
			text, err := peerconfig.Render(contextOf(cmd), c, peerconfig.Options{Namespace: ns, Peer: args[0], Format: format,
				IncludeSecrets: includeSecrets}, o.streams.ErrOut)
			if err != nil {
				return err
			}
			if outFile == "" || outFile == "-" {
				_, err = fmt.Fprint(o.streams.Out, text)
				return err
			}
			// the file may hold the key: 0600, whatever was there before
			return secretfile.Write(outFile, []byte(text))
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "device format: "+strings.Join(deviceconfig.FormatNames(), ", "))
	cmd.Flags().BoolVar(&includeSecrets, "include-secrets", false, "include the pre-shared key (reads the peer's Secret)")
	cmd.Flags().StringVar(&outFile, "output-file", "", "write to this file instead of stdout: a new file of mode 0600, renamed into place")
	_ = cmd.RegisterFlagCompletionFunc("format", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return deviceconfig.FormatNames(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}
