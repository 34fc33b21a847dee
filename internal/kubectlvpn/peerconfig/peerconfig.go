package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
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
			text, err := peerConfig(cmd.Context(), o, args[0], format, includeSecrets)
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

// peerConfig reads the peer, its gateway and (only when asked) its key, and renders.
func peerConfig(ctx context.Context, o *options, name, format string, includeSecrets bool) (string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ns, _, err := o.namespace()
	if err != nil {
		return "", err
	}
	c, err := o.newClient()
	if err != nil {
		return "", err
	}
	var peer vpnv1.VPNPeer
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &peer); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("VPNPeer %s/%s not found", ns, name)
		}
		return "", err
	}
	var gw vpnv1.VPNGateway
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: peer.Spec.GatewayRef}, &gw); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("VPNPeer %s/%s names VPNGateway %q, which does not exist", ns, name, peer.Spec.GatewayRef)
		}
		return "", err
	}
	if cond := meta.FindStatusCondition(peer.Status.Conditions, "Authorized"); cond != nil && cond.Status != "True" {
		warnf(o, "VPNPeer %s/%s is not authorized (%s): the tunnel comes up but reaches nothing", ns, name, cond.Reason)
	}
	in := deviceconfig.Input{Gateway: &gw, Peer: &peer}
	if includeSecrets {
		ref := pskRef(&peer)
		if ref == nil {
			warnf(o, "VPNPeer %s/%s has no key to include", ns, name)
		} else {
			var s corev1.Secret
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, &s); err != nil {
				if apierrors.IsNotFound(err) {
					return "", fmt.Errorf("the key's Secret %s/%s does not exist", ns, ref.Name)
				}
				return "", fmt.Errorf("reading the key's Secret %s/%s: %w", ns, ref.Name, err)
			}
			v, ok := s.Data[ref.Key]
			if !ok || len(v) == 0 {
				return "", fmt.Errorf("Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
			}
			// exactly what the gateway loads: a stray newline is refused by the renderers
			in.PSK = string(v)
		}
	}
	return deviceconfig.RenderInput(in, format)
}

// pskRef is the Secret key a peer's tunnel uses, if any.
func pskRef(p *vpnv1.VPNPeer) *vpnv1.SecretKeyRef {
	switch {
	case p.Spec.IPsec != nil:
		return &p.Spec.IPsec.PSKSecretRef
	case p.Spec.WireGuard != nil:
		return p.Spec.WireGuard.PresharedKeySecretRef
	}
	return nil
}
