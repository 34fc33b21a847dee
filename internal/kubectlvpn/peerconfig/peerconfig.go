// Package peerconfig is kubectl vpn peer-config: a VPNPeer's client device configuration,
// rendered by internal/deviceconfig from the peer and its gateway as the API server has them.
package peerconfig

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
)

// Options are what kubectl vpn peer-config is asked.
type Options struct {
	Namespace, Peer string
	// Format is a deviceconfig format name.
	Format string
	// IncludeSecrets reads the peer's Secret and puts its key into the configuration.
	IncludeSecrets bool
}

// Render reads the peer, its gateway and (only when asked) its key, and renders the
// configuration; what the user should know besides is written to warnings.
func Render(ctx context.Context, c client.Client, o Options, warnings io.Writer) (string, error) {
	ns, name := o.Namespace, o.Peer
	warnf := func(format string, args ...any) { fmt.Fprintf(warnings, "warning: "+format+"\n", args...) }
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
		warnf("VPNPeer %s/%s is not authorized (%s): the tunnel comes up but reaches nothing", ns, name, cond.Reason)
	}
	in := deviceconfig.Input{Gateway: &gw, Peer: &peer}
	if o.IncludeSecrets {
		ref := gateways.PSKRef(&peer)
		if ref == nil {
			warnf("VPNPeer %s/%s has no key to include", ns, name)
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
	return deviceconfig.RenderInput(in, o.Format)
}
