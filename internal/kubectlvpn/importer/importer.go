// Package importer is kubectl vpn import: the VPNGateway, VPNPeer and Secret a parameter
// sheet describes (internal/deviceconfig reads it), created in the cluster without changing
// what its other peers share.
package importer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
)

// Import is what the sheet describes, its objects in namespace ns when the sheet names none;
// a sheet that names another namespace than a given ns is refused.
func Import(sheet *deviceconfig.Sheet, ns string) (*deviceconfig.Imported, error) {
	im, err := deviceconfig.Import(sheet, deviceconfig.ImportOptions{Namespace: ns})
	if err != nil {
		var fes deviceconfig.FieldErrors
		if errors.As(err, &fes) {
			return nil, fmt.Errorf("the sheet cannot be imported:\n%v", err)
		}
		return nil, err
	}
	if ns != "" && sheet.Gateway.Namespace != "" && sheet.Gateway.Namespace != ns {
		return nil, fmt.Errorf("the sheet's gateway.namespace %q is not -n %q", sheet.Gateway.Namespace, ns)
	}
	return im, nil
}

// Objects are the manifests in apply order: the key first, the peer last.
func Objects(im *deviceconfig.Imported) []client.Object {
	var out []client.Object
	if im.Secret != nil {
		out = append(out, im.Secret)
	}
	if im.Gateway != nil {
		out = append(out, im.Gateway)
	}
	return append(out, im.Peer)
}

// Apply creates what does not exist and checks what does, saying what it did on out: an
// existing gateway must have the sheet's settings, an existing Secret its key; an existing
// peer of the same gateway is updated.
func Apply(ctx context.Context, c client.Client, im *deviceconfig.Imported, out io.Writer) error {
	want := im.Described
	var gw vpnv1.VPNGateway
	err := c.Get(ctx, client.ObjectKeyFromObject(want), &gw)
	switch {
	case apierrors.IsNotFound(err) && im.Gateway == nil:
		return fmt.Errorf("VPNGateway %s/%s does not exist and the sheet has no gateway.endpoint to create it", want.Namespace, want.Name)
	case apierrors.IsNotFound(err):
		gw = vpnv1.VPNGateway{} // created below
	case err != nil:
		return err
	default:
		if err := sameGateway(&gw, want, im.Gateway != nil); err != nil {
			return err
		}
	}

	if s := im.Secret; s != nil {
		var cur corev1.Secret
		err := c.Get(ctx, client.ObjectKeyFromObject(s), &cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := c.Create(ctx, s); err != nil {
				return fmt.Errorf("creating Secret %s/%s: %w", s.Namespace, s.Name, err)
			}
			fmt.Fprintf(out, "secret/%s created\n", s.Name)
		case err != nil:
			return err
		default:
			for k, v := range s.Data {
				if !bytes.Equal(cur.Data[k], v) {
					// never print either key
					return fmt.Errorf("Secret %s/%s exists with another value for %q: delete it first, or name another Secret in peer.pskSecret", s.Namespace, s.Name, k)
				}
			}
			fmt.Fprintf(out, "secret/%s unchanged\n", s.Name)
		}
	}
	if im.Gateway != nil {
		if gw.Name == "" {
			if err := c.Create(ctx, im.Gateway); err != nil {
				return fmt.Errorf("creating VPNGateway %s/%s: %w", im.Gateway.Namespace, im.Gateway.Name, err)
			}
			fmt.Fprintf(out, "vpngateway.vpn.bnerd.net/%s created\n", im.Gateway.Name)
		} else {
			fmt.Fprintf(out, "vpngateway.vpn.bnerd.net/%s unchanged\n", gw.Name)
		}
	}
	p := im.Peer
	var cur vpnv1.VPNPeer
	err = c.Get(ctx, client.ObjectKeyFromObject(p), &cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, p); err != nil {
			return fmt.Errorf("creating VPNPeer %s/%s: %w", p.Namespace, p.Name, err)
		}
		fmt.Fprintf(out, "vpnpeer.vpn.bnerd.net/%s created\n", p.Name)
	case err != nil:
		return err
	case cur.Spec.GatewayRef != p.Spec.GatewayRef:
		return fmt.Errorf("VPNPeer %s/%s exists on gateway %q, not %q", p.Namespace, p.Name, cur.Spec.GatewayRef, p.Spec.GatewayRef)
	case reflect.DeepEqual(cur.Spec, p.Spec):
		fmt.Fprintf(out, "vpnpeer.vpn.bnerd.net/%s unchanged\n", p.Name)
	default:
		cur.Spec = p.Spec
		if err := c.Update(ctx, &cur); err != nil {
			return fmt.Errorf("updating VPNPeer %s/%s: %w", p.Namespace, p.Name, err)
		}
		fmt.Fprintf(out, "vpnpeer.vpn.bnerd.net/%s configured\n", p.Name)
	}
	return nil
}

// sameGateway refuses a sheet whose gateway-wide settings differ from the existing gateway's:
// changing them would change every peer's tunnel.
func sameGateway(cur, want *vpnv1.VPNGateway, full bool) error {
	name := cur.Namespace + "/" + cur.Name
	if cur.Spec.Protocol != want.Spec.Protocol {
		return fmt.Errorf("VPNGateway %s exists with protocol %s, the sheet says %s", name, cur.Spec.Protocol, want.Spec.Protocol)
	}
	if sc := want.Spec.ServiceCIDR; sc != "" {
		have := cur.Status.ServiceCIDR
		if have == "" {
			have = cur.Spec.ServiceCIDR
		}
		if have != "" && have != sc {
			return fmt.Errorf("VPNGateway %s has service CIDR %s, the sheet says %s (it cannot change under live clients)", name, have, sc)
		}
	}
	if want.Spec.IPsec != nil && cur.Spec.Protocol == vpnv1.ProtocolIPsec {
		a, err := deviceconfig.EffectiveIKE(cur.Spec.IPsec)
		if err != nil {
			return fmt.Errorf("VPNGateway %s: %w", name, err)
		}
		b, err := deviceconfig.EffectiveIKE(want.Spec.IPsec)
		if err != nil {
			return fmt.Errorf("the sheet's IKE settings: %w", err)
		}
		if !reflect.DeepEqual(a, b) {
			ya, _ := yaml.Marshal(a)
			yb, _ := yaml.Marshal(b)
			return fmt.Errorf("VPNGateway %s exists with other IKE settings (shared by all its peers; change them on the gateway if intended):\nexisting:\n%s\nsheet:\n%s", name, ya, yb)
		}
	}
	if full && !reflect.DeepEqual(cur.Spec.Endpoint, want.Spec.Endpoint) {
		return fmt.Errorf("VPNGateway %s exists with another endpoint", name)
	}
	return nil
}
