package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
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
			im, err := deviceconfig.Import(sheet, deviceconfig.ImportOptions{Namespace: ns})
			if err != nil {
				var fes deviceconfig.FieldErrors
				if errors.As(err, &fes) {
					return fmt.Errorf("the sheet cannot be imported:\n%v", err)
				}
				return err
			}
			if ns != "" && sheet.Gateway.Namespace != "" && sheet.Gateway.Namespace != ns {
				return fmt.Errorf("the sheet's gateway.namespace %q is not -n %q", sheet.Gateway.Namespace, ns)
			}
			for _, w := range im.Warnings {
				warnf(o, "%s", w)
			}
			if apply {
				return applyImport(cmd.Context(), o, im)
			}
			return printManifests(o.streams.Out, output, im)
		},
	}
	cmd.Flags().BoolVar(&apply, "apply", false, "create the objects in the cluster instead of printing them")
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format when not applying: yaml or json")
	return cmd
}

// objects are the manifests in apply order: the key first, the peer last.
func objects(im *deviceconfig.Imported) []client.Object {
	var out []client.Object
	if im.Secret != nil {
		out = append(out, im.Secret)
	}
	if im.Gateway != nil {
		out = append(out, im.Gateway)
	}
	return append(out, im.Peer)
}

// printManifests writes the objects without status or server fields.
func printManifests(w io.Writer, format string, im *deviceconfig.Imported) error {
	return printObjects(w, format, objects(im))
}

// printObjects writes objects as manifests (a YAML stream, or a JSON List) without status or
// server fields.
func printObjects(w io.Writer, format string, objs []client.Object) error {
	var docs []map[string]any
	for _, obj := range objs {
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		docs = append(docs, m)
	}
	switch format {
	case "yaml", "":
		var buf bytes.Buffer
		for _, d := range docs {
			b, err := yaml.Marshal(d)
			if err != nil {
				return err
			}
			buf.WriteString("---\n")
			buf.Write(b)
		}
		_, err := w.Write(buf.Bytes())
		return err
	case "json":
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": docs}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return fmt.Errorf("output %q: yaml or json", format)
}

// applyImport creates what does not exist and checks what does.
func applyImport(ctx context.Context, o *options, im *deviceconfig.Imported) error {
	if ctx == nil {
		ctx = context.Background()
	}
	c, err := o.newClient()
	if err != nil {
		return err
	}
	out := o.streams.Out
	want := im.Described
	var gw vpnv1.VPNGateway
	err = c.Get(ctx, client.ObjectKeyFromObject(want), &gw)
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
