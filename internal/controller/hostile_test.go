package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// TestHostileObjects throws hostile and invalid VPNGateways and VPNPeers at the real API server
// with the operator running, and pins down exactly what each one gets:
//   - rejected: the create (or, for immutable fields, the update) fails as Invalid, naming the
//     offending field and carrying the message of the marker that guards it, and nothing is stored;
//   - answered: the API server accepts it and the operator answers with one specific False
//     condition; an invalid brand-new gateway renders nothing at all (no partial render).
//
// Afterwards a well-formed gateway and peer still converge (the operator neither crashed nor
// wedged its caches on anything it was fed) and the operator stops without error.
func TestHostileObjects(t *testing.T) {
	cfg := operatorConfig()
	// The cluster's ranges and the admin's allow-list, as an installation would set them.
	cfg.Options.Model.ClusterPodCIDRs = []netip.Prefix{netip.MustParsePrefix("100.96.0.0/16")}
	cfg.Options.Model.ClusterServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("100.97.0.0/16")}
	cfg.Options.Model.NodeCIDRs = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/28")}
	cfg.Options.Model.AllowedTargetCIDRs = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("10.0.0.0/8")}
	stop := startOperator(t, cfg, nil)
	var outcomes hostileOutcomes

	t.Run("rejected", func(t *testing.T) {
		ns := namespace(t)
		for i, c := range hostileRejections() {
			t.Run(c.name, func(t *testing.T) {
				outcomes.set(c.name, "rejected: "+c.check(t, ns, fmt.Sprintf("h%02d", i)))
			})
		}
	})

	t.Run("accepted-controls", func(t *testing.T) {
		// Well-formed objects near the edges of the markers: the validation above must not
		// over-reject. Server-side dry run: validated exactly like a create, nothing stored.
		ns := namespace(t)
		for i, c := range hostileControls() {
			t.Run(c.name, func(t *testing.T) {
				obj := c.obj(ns, fmt.Sprintf("c%02d", i))
				if err := env.Client.Create(context.Background(), obj, client.DryRunAll); err != nil {
					t.Fatalf("well-formed object rejected: %v", err)
				}
				outcomes.set("control/"+c.name, "accepted")
			})
		}
	})

	t.Run("answered", func(t *testing.T) {
		for _, c := range hostileAnswers() {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				outcomes.set(c.name, "condition: "+c.run(t, namespace(t)))
			})
		}
	})

	t.Run("operator-still-converges", func(t *testing.T) {
		ns := namespace(t)
		gw := hostileGateway(ns, "gw")
		p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"))
		create(t, gw, pskSecret(ns, "p"), p)
		waitCondition(t, gw, vpnv1.ConditionConfigValid, metav1.ConditionTrue, controller.ReasonValid)
		waitCondition(t, gw, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
		waitCondition(t, p, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonDefaultAllow)
		waitCondition(t, p, controller.ConditionCredentialsReady, metav1.ConditionTrue, controller.ReasonSecretsPresent)
	})

	// Every subtest (and its namespace cleanup, which needs the operator) is done: stop the
	// operator here so that an error it stops with fails this test.
	stop()
	outcomes.log(t)
}

// ---------------------------------------------------------------------------------------------
// (a) rejected by the API server

// hostileRejection is one object the API server must refuse.
type hostileRejection struct {
	name string
	// obj builds the object (name is a fresh, valid object name the case may ignore).
	obj func(ns, name string) client.Object
	// update, when set, makes this an update case: obj must be created, then update is applied
	// to the stored object and the update must be rejected.
	update func(client.Object)
	// field is the field path the error must name ("" for a rule on the object's root, whose
	// message then names the field itself); msg a fragment of the expected message.
	field, msg string
}

// check runs the case and returns the matching message.
func (c hostileRejection) check(t *testing.T, ns, name string) string {
	ctx := context.Background()
	obj := c.obj(ns, name)
	var err error
	if c.update == nil {
		err = env.Client.Create(ctx, obj)
	} else {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("creating the valid object to update: %v", err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			c.update(obj)
			return env.Client.Update(ctx, obj)
		})
	}
	if err == nil {
		t.Fatalf("accepted by the API server; want Invalid naming %q with %q", c.field, c.msg)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error is not Invalid (reason %q): %v", apierrors.ReasonForError(err), err)
	}
	if c.field != "" && !strings.Contains(err.Error(), c.field) {
		t.Errorf("error does not name field %q: %v", c.field, err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("error carries no status details: %v", err)
	}
	var found string
	for _, cause := range status.Status().Details.Causes {
		field := cause.Field
		if field == "<nil>" {
			field = ""
		}
		if field == c.field && strings.Contains(cause.Message, c.msg) {
			found = cause.Message
			break
		}
	}
	if found == "" {
		t.Fatalf("no cause at field %q containing %q; got %v", c.field, c.msg, err)
	}
	if c.update == nil { // nothing was stored
		got := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); !apierrors.IsNotFound(err) {
			t.Errorf("rejected object is readable (err %v)", err)
		}
	}
	if c.field != "" {
		return c.field + ": " + found
	}
	return found
}

// Patterns and messages of the markers in api/vpn/v1alpha1 the cases expect.
const (
	patName         = `should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`
	patProposal     = `should match '^[a-z0-9]+(-[a-z0-9_]+)*$'`
	patIKEID        = `should match '^[A-Za-z0-9@._:=,+/* -]+$'`
	patSecret       = `should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`
	patWGKey        = `should match '^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$'`
	patWGEnd        = `should match '^[A-Za-z0-9.-]+:[0-9]{1,5}$'`
	patNode         = `should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`
	patService      = `should match '^[a-z]([-a-z0-9]*[a-z0-9])?$'`
	msgDuration     = "must be a non-negative duration such as 30s, 1h or 4h30m, at most 8760h"
	msgLifetime     = "must be 0 or at least 10s"
	msgDPDTimeoutV2 = "dpd.timeout applies to IKEv1 only"
	msgTargetOne    = "exactly one of address or service must be set"
	msgEndpoint     = "exactly one of floatingIPPool, floatingIP, loadBalancer or hostNetwork must be set"
	msgPeerOne      = "exactly one of ipsec or wireguard must be set"
	msgSubnets      = "remoteSubnets must be IPv4 network addresses in CIDR notation"
	msgPorts        = "ports must be port numbers (443) or strings"
	// msgUnsafeSubnets and msgUnicastTarget: docs/design.md "Nothing reaches what the cluster did not offer".
	msgUnsafeSubnets = "remoteSubnets must not cover 0.0.0.0/8, loopback (127.0.0.0/8), link-local (169.254.0.0/16), multicast (224.0.0.0/4) or reserved (240.0.0.0/4) addresses"
	msgUnicastTarget = "address must be a unicast address: not loopback, link-local (e.g. cloud metadata 169.254.169.254), multicast, unspecified or broadcast"
	msgWGSubnets     = "subnets must be IPv4 network addresses in CIDR notation"
	msgPeerAddr      = "address must be an IP address, a DNS name or %any"
)

func hostileRejections() []hostileRejection {
	long := func(n int) string { return strings.Repeat("a", n) }
	ports := vpnv1.Ports
	setDuration := func(value string, path ...string) func(map[string]any) {
		return func(m map[string]any) { mustSet(m, value, path...) }
	}
	return []hostileRejection{
		// --- VPNGateway: protocol and mode
		{name: "gateway/protocol-change-on-update", obj: gatewayWith(nil),
			update: func(o client.Object) { o.(*vpnv1.VPNGateway).Spec.Protocol = vpnv1.ProtocolWireGuard },
			field:  "spec.protocol", msg: "protocol is immutable; delete and recreate the gateway to change it"},
		{name: "gateway/protocol-not-in-enum", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Protocol = "gre" }),
			field: "spec.protocol", msg: `Unsupported value: "gre": supported values: "ipsec", "wireguard"`},
		{name: "gateway/mode-not-in-enum", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Mode = "bridge" }),
			field: "spec.mode", msg: `Unsupported value: "bridge": supported values: "snat", "routed"`},

		// --- endpoint
		{name: "gateway/endpoint-none", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Endpoint = vpnv1.Endpoint{} }),
			field: "spec.endpoint", msg: msgEndpoint},
		{name: "gateway/endpoint-two-variants", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.LoadBalancer = &vpnv1.LoadBalancerEndpoint{}
		}), field: "spec.endpoint", msg: msgEndpoint},
		{name: "gateway/endpoint-floatingIP-not-ipv4", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: "2001:db8::1"}
		}), field: "spec.endpoint.floatingIP", msg: "floatingIP must be an IPv4 address"},
		{name: "gateway/endpoint-node-name-injection", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork.NodeName = "node-1; rm -rf /"
		}), field: "spec.endpoint.hostNetwork.nodeName", msg: patNode},

		// --- availability: a standby needs a loadBalancer endpoint, or a host-network one with
		// nodes and a VIP
		{name: "gateway/standby-host-network", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.availability.standby", msg: "a host-network gateway with a standby needs endpoint.hostNetwork.nodes"},
		{name: "gateway/host-network-nodes-and-node-name", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork.Nodes = []string{"node-1", "node-2"}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.endpoint.hostNetwork.nodes", msg: "nodes and nodeName are exclusive"},
		{name: "gateway/host-network-no-node", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork = &vpnv1.HostNetworkEndpoint{Address: "198.51.100.10"}
		}), field: "spec.endpoint.hostNetwork.nodeName", msg: "nodeName is required (or nodes, for a gateway with a standby)"},
		{name: "gateway/host-network-nodes-without-address", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork = &vpnv1.HostNetworkEndpoint{Nodes: []string{"node-1", "node-2"}}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.endpoint.hostNetwork.address", msg: "a host-network gateway on several nodes needs address"},
		{name: "gateway/host-network-nodes-ipv6-vip", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork = &vpnv1.HostNetworkEndpoint{Nodes: []string{"node-1", "node-2"}, Address: "2001:db8::10"}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.endpoint.hostNetwork.address", msg: "with nodes, address is a VIP: an IPv4 unicast address"},
		{name: "gateway/host-network-nodes-without-standby", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork = &vpnv1.HostNetworkEndpoint{Nodes: []string{"node-1", "node-2"}, Address: "198.51.100.10"}
		}), field: "spec.endpoint.hostNetwork.nodes", msg: "endpoint.hostNetwork.nodes is for a gateway with a standby"},
		{name: "gateway/host-network-one-node-in-nodes", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork = &vpnv1.HostNetworkEndpoint{Nodes: []string{"node-1"}, Address: "198.51.100.10"}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.endpoint.hostNetwork.nodes", msg: "should have at least 2 items"},
		{name: "gateway/host-network-nodes-wireguard", obj: wgGatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint = vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{Nodes: []string{"node-1", "node-2"}, Address: "198.51.100.10"}}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.endpoint.hostNetwork.nodes", msg: "a WireGuard gateway cannot move its address between nodes yet"},
		{name: "gateway/standby-floating-ip-pool", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint = vpnv1.Endpoint{FloatingIPPool: "public"}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		}), field: "spec.availability.standby", msg: "a floating-IP gateway cannot have a standby yet"},
		{name: "gateway/standby-added-to-host-network-on-update", obj: gatewayWith(nil),
			update: func(o client.Object) {
				o.(*vpnv1.VPNGateway).Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
			}, field: "spec.availability.standby", msg: "a host-network gateway with a standby needs endpoint.hostNetwork.nodes"},

		// --- serviceCIDR
		{name: "gateway/serviceCIDR-outside-cgnat", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "10.0.0.0/24" }),
			field: "spec.serviceCIDR", msg: "serviceCIDR must lie inside 100.64.0.0/10"},
		{name: "gateway/serviceCIDR-host-bits", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.120.0.1/24" }),
			field: "spec.serviceCIDR", msg: "serviceCIDR must be a network address (no host bits set)"},
		{name: "gateway/serviceCIDR-ipv6", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "fd00:64::/64" }),
			field: "spec.serviceCIDR", msg: "serviceCIDR must be an IPv4 CIDR such as 100.64.12.0/24"},
		{name: "gateway/serviceCIDR-slash8", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.0.0.0/8" }),
			field: "spec.serviceCIDR", msg: "serviceCIDR prefix length must be between /16 and /28"},
		{name: "gateway/serviceCIDR-slash30", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.120.0.0/30" }),
			field: "spec.serviceCIDR", msg: "serviceCIDR prefix length must be between /16 and /28"},
		{name: "gateway/serviceCIDR-garbage", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.64.x.0/24" }),
			field: "spec.serviceCIDR", msg: "serviceCIDR must be an IPv4 CIDR such as 100.64.12.0/24"},
		{name: "gateway/serviceCIDR-change-after-set", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.120.200.0/24" }),
			update: func(o client.Object) { o.(*vpnv1.VPNGateway).Spec.ServiceCIDR = "100.120.201.0/24" },
			field:  "spec.serviceCIDR", msg: "serviceCIDR cannot be changed or removed once set"},
		{name: "gateway/serviceCIDR-removal-after-set", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.120.202.0/24" }),
			update: func(o client.Object) { o.(*vpnv1.VPNGateway).Spec.ServiceCIDR = "" },
			field:  "spec.serviceCIDR", msg: "serviceCIDR cannot be changed or removed once set"},

		// --- exposures
		{name: "gateway/exposure-name-uppercase", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Name = "API" }),
			field: "spec.exposures[0].name", msg: patName},
		{name: "gateway/exposure-name-too-long", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Name = long(64) }),
			field: "spec.exposures[0].name", msg: "Too long: may not be more than 63"},
		{name: "gateway/exposure-name-newline", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Name = "api\n" }),
			field: "spec.exposures[0].name", msg: patName},
		{name: "gateway/exposure-names-duplicate", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures = append(g.Spec.Exposures, g.Spec.Exposures[0])
			g.Spec.Exposures[1].Target.Address = "192.0.2.99"
		}), field: "spec.exposures[1]", msg: "Duplicate value"},
		{name: "gateway/exposure-name-equals-reverse-exposure", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: "api", Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: ports(vpnv1.PortSpec{Port: 22})}}}
		}), field: "spec.reverseExposures", msg: "exposure and reverse exposure names must be distinct"},
		{name: "gateway/port-0", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports[0] = intstr.FromInt32(0) }),
			field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/port-65536", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports[0] = intstr.FromInt32(65536) }),
			field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/targetPort-65536", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports[0] = intstr.FromString("443:65536") }),
			field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/port-string-0", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports[0] = intstr.FromString("0/udp") }),
			field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/port-protocol-sctp", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports[0] = intstr.FromString("443/sctp") }),
			field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/port-injection", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures[0].Target.Ports[0] = intstr.FromString("443; flush ruleset")
		}), field: "spec.exposures[0].target.ports[0]", msg: "Too long: may not be more than 16 bytes"},
		{name: "gateway/port-injection-short", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures[0].Target.Ports[0] = intstr.FromString("443;drop")
		}), field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/port-range-not-supported", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports[0] = intstr.FromString("8000-8080") }),
			field: "spec.exposures[0].target.ports[0]", msg: msgPorts},
		{name: "gateway/ports-empty", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Ports = vpnv1.Ports() }),
			field: "spec.exposures[0].target.ports", msg: "should have at least 1 items"},
		{name: "gateway/target-address-and-service", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures[0].Target.Service = &vpnv1.ServiceRef{Name: "api"}
		}), field: "spec.exposures[0].target", msg: msgTargetOne},
		{name: "gateway/target-neither-address-nor-service", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "" }),
			field: "spec.exposures[0].target", msg: msgTargetOne},
		{name: "gateway/target-service-name-injection", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures[0].Target = vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "../kube-system/api"}, Ports: ports(vpnv1.PortSpec{Port: 443})}
		}), field: "spec.exposures[0].target.service.name", msg: patService},
		{name: "gateway/virtualIP-not-an-ip", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].VirtualIP = "100.64.0.300" }),
			field: "spec.exposures[0].virtualIP", msg: "virtualIP must be an IPv4 address"},
		{name: "gateway/target-address-ipv6", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "2001:db8::10" }),
			field: "spec.exposures[0].target.address", msg: "address must be an IPv4 address"},
		{name: "gateway/reverse-target-not-an-ip", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: "erp.local", Ports: ports(vpnv1.PortSpec{Port: 22})}}}
		}), field: "spec.reverseExposures[0].target.address", msg: "address must be an IPv4 address"},
		{name: "gateway/65-exposures", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures = nil
			for i := range 65 {
				g.Spec.Exposures = append(g.Spec.Exposures, vpnv1.Exposure{Name: fmt.Sprintf("e%d", i),
					Target: vpnv1.ExposureTarget{Address: fmt.Sprintf("192.0.2.%d", i+1), Ports: ports(vpnv1.PortSpec{Port: 443})}})
			}
		}), field: "spec.exposures", msg: "must have at most 64 items"},

		// --- protocol sections
		{name: "gateway/ipsec-settings-on-wireguard-gateway", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Protocol = vpnv1.ProtocolWireGuard
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{LocalID: "gw.example.com"}
		}), field: "spec.ipsec", msg: "ipsec settings are not allowed on a wireguard gateway"},
		{name: "gateway/wireguard-settings-on-ipsec-gateway", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{ListenPort: 51820}
		}), field: "spec.wireguard", msg: "wireguard settings are not allowed on an ipsec gateway"},
		{name: "gateway/ike-proposal-config-injection", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Proposals: []string{"aes256;}\n include /etc/passwd"}}}
		}), field: "spec.ipsec.ike.proposals[0]", msg: patProposal},
		{name: "gateway/ike-proposal-quote", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Proposals: []string{`aes256-sha256" remote_addrs = "0.0.0.0/0`}}}
		}), field: "spec.ipsec.ike.proposals[0]", msg: patProposal},
		{name: "gateway/ike-proposal-braces", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Proposals: []string{"aes256-sha256-modp2048", "}{"}}}
		}), field: "spec.ipsec.ike.proposals[1]", msg: patProposal},
		{name: "gateway/ike-version-3", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Version: 3}}
		}), field: "spec.ipsec.ike.version", msg: "Unsupported value: 3"},
		{name: "gateway/dpd-action-not-in-enum", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{DPD: &vpnv1.DPDSettings{Action: "exec /bin/sh"}}}
		}), field: "spec.ipsec.ike.dpd.action", msg: `Unsupported value: "exec /bin/sh"`},
		{name: "gateway/dpd-timeout-with-ikev2", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{DPD: &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: 30 * time.Second}}}}
		}), field: "spec.ipsec.ike.dpd.timeout", msg: msgDPDTimeoutV2},
		{name: "gateway/dpd-timeout-500ms", obj: gatewayRawWith(func(m map[string]any) {
			mustSet(m, int64(1), "spec", "ipsec", "ike", "version")
			mustSet(m, "500ms", "spec", "ipsec", "ike", "dpd", "timeout")
		}), field: "spec.ipsec.ike.dpd.timeout", msg: "must be at least 1s"},
		{name: "gateway/localID-newline", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{LocalID: "gw.example.com\n  auth = psk"}
		}), field: "spec.ipsec.localID", msg: patIKEID},
		{name: "gateway/localID-braces", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{LocalID: "gw.example.com } children {"}
		}), field: "spec.ipsec.localID", msg: patIKEID},
		{name: "gateway/ike-rekeyTime-garbage", obj: gatewayRawWith(setDuration("four hours", "spec", "ipsec", "ike", "rekeyTime")),
			field: "spec.ipsec.ike.rekeyTime", msg: msgDuration},
		{name: "gateway/ike-reauthTime-negative", obj: gatewayRawWith(setDuration("-1h", "spec", "ipsec", "ike", "reauthTime")),
			field: "spec.ipsec.ike.reauthTime", msg: msgDuration},
		{name: "gateway/ike-rekeyTime-5s", obj: gatewayRawWith(setDuration("5s", "spec", "ipsec", "ike", "rekeyTime")),
			field: "spec.ipsec.ike.rekeyTime", msg: msgLifetime},
		{name: "gateway/ike-reauthTime-9s999ms", obj: gatewayRawWith(setDuration("9s999ms", "spec", "ipsec", "ike", "reauthTime")),
			field: "spec.ipsec.ike.reauthTime", msg: msgLifetime},
		{name: "gateway/dpd-delay-overflow", obj: gatewayRawWith(setDuration("99999999999h", "spec", "ipsec", "ike", "dpd", "delay")),
			field: "spec.ipsec.ike.dpd.delay", msg: msgDuration},
		{name: "gateway/ipsec-mtu-576", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{MTU: 576} }),
			field: "spec.ipsec.mtu", msg: "should be greater than or equal to 1280"},
		{name: "gateway/ipsec-mtu-9001", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{MTU: 9001} }),
			field: "spec.ipsec.mtu", msg: "should be less than or equal to 9000"},
		{name: "gateway/wireguard-mtu-100", obj: wgGatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.WireGuard.MTU = 100 }),
			field: "spec.wireguard.mtu", msg: "should be greater than or equal to 1280"},
		{name: "gateway/wireguard-listenPort-70000", obj: wgGatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.WireGuard.ListenPort = 70000 }),
			field: "spec.wireguard.listenPort", msg: "should be less than or equal to 65535"},
		{name: "gateway/wireguard-private-key-ref-uppercase", obj: wgGatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.WireGuard.PrivateKeySecretRef = &vpnv1.SecretKeyRef{Name: "GW-Key", Key: "privateKey"}
		}), field: "spec.wireguard.privateKeySecretRef.name", msg: patSecret},

		// --- names
		{name: "gateway/name-41-chars", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Name = long(41) }),
			field: "", msg: "metadata.name must be a DNS label of at most 40 characters (children are named after it)"},
		{name: "gateway/reverse-exposure-service-name-too-long", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Name = long(40)
			g.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: strings.Repeat("r", 23), Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: ports(vpnv1.PortSpec{Port: 22})}}}
		}), field: "spec.reverseExposures", msg: "gateway name plus reverse exposure name must fit a 63-character Service name"},

		// --- VPNPeer
		{name: "peer/gatewayRef-change-on-update", obj: peerWith(nil),
			update: func(o client.Object) { o.(*vpnv1.VPNPeer).Spec.GatewayRef = "other" },
			field:  "spec.gatewayRef", msg: "gatewayRef is immutable; delete and recreate the peer to move it"},
		{name: "peer/both-ipsec-and-wireguard", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.WireGuard = &vpnv1.WireGuardPeer{PublicKey: testWGKey, Subnets: []string{"10.30.0.0/16"}}
		}), field: "spec", msg: msgPeerOne},
		{name: "peer/neither-ipsec-nor-wireguard", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec = nil }),
			field: "spec", msg: msgPeerOne},
		{name: "peer/name-64-chars", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Name = long(64) }),
			field: "", msg: "metadata.name must be at most 63 characters"},
		{name: "peer/gatewayRef-uppercase", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.GatewayRef = "GW" }),
			field: "spec.gatewayRef", msg: patName},
		{name: "peer/remote-subnet-not-a-cidr", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"10.20.0.0"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgSubnets},
		{name: "peer/remote-subnet-host-bits", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"10.20.0.0/16", "10.30.0.1/16"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgSubnets},
		{name: "peer/remote-subnet-ipv6", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"2001:db8::/32"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgSubnets},
		{name: "peer/remote-subnets-duplicate", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"10.20.0.0/16", "10.20.0.0/16"} }),
			field: "spec.ipsec.remoteSubnets[1]", msg: "Duplicate value"},
		{name: "peer/wireguard-subnet-garbage", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Subnets = []string{"0/0; drop"} }),
			field: "spec.wireguard.subnets", msg: msgWGSubnets},
		{name: "peer/wireguard-public-key-wrong-length", obj: wgPeerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.WireGuard.PublicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8D="
		}), field: "spec.wireguard.publicKey", msg: patWGKey},
		{name: "peer/wireguard-public-key-garbage", obj: wgPeerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.WireGuard.PublicKey = "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!A="
		}), field: "spec.wireguard.publicKey", msg: patWGKey},
		{name: "peer/wireguard-public-key-not-32-bytes", obj: wgPeerWith(func(p *vpnv1.VPNPeer) {
			// 44 base64 characters whose last character carries bits beyond 32 bytes.
			p.Spec.WireGuard.PublicKey = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dh="
		}), field: "spec.wireguard.publicKey", msg: patWGKey},
		{name: "peer/address-with-space-and-brace", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.Address = "1.2.3.4 }" }),
			field: "spec.ipsec.peer.address", msg: msgPeerAddr},
		{name: "peer/address-config-injection", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.Peer.Address = "vpn.example.com\n    remote_addrs = 0.0.0.0/0"
		}), field: "spec.ipsec.peer.address", msg: msgPeerAddr},
		{name: "peer/id-newline", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "client.example.com\n  id = %any" }),
			field: "spec.ipsec.peer.id", msg: patIKEID},
		{name: "peer/id-quote", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = `client"` }),
			field: "spec.ipsec.peer.id", msg: patIKEID},
		{name: "peer/esp-proposal-injection", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.ESP.Proposals = []string{"aes256gcm16 # }"}
		}), field: "spec.ipsec.esp.proposals[0]", msg: patProposal},
		{name: "peer/esp-rekeyTime-garbage", obj: peerRawWith(setDuration("1 hour", "spec", "ipsec", "esp", "rekeyTime")),
			field: "spec.ipsec.esp.rekeyTime", msg: msgDuration},
		{name: "peer/ike-v1-at-any-address", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.Peer = vpnv1.IPsecRemote{Address: "%any", ID: "roadwarrior.example.com"}
			p.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{Version: 1}
		}), field: "spec.ipsec.ike.version", msg: "IKE version 1 needs the peer's address, not %any"},
		{name: "peer/ike-version-3", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{Version: 3} }),
			field: "spec.ipsec.ike.version", msg: "Unsupported value: 3"},
		{name: "peer/ike-proposal-injection", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{Proposals: []string{"aes256-sha256-modp2048 }"}}
		}), field: "spec.ipsec.ike.proposals[0]", msg: patProposal},
		{name: "peer/ike-rekeyTime-5s", obj: peerRawWith(setDuration("5s", "spec", "ipsec", "ike", "rekeyTime")),
			field: "spec.ipsec.ike.rekeyTime", msg: msgLifetime},
		{name: "peer/ike-dpd-action-not-in-enum", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{DPD: &vpnv1.DPDSettings{Action: "exec /bin/sh"}}
		}), field: "spec.ipsec.ike.dpd.action", msg: `Unsupported value: "exec /bin/sh"`},
		{name: "peer/ike-dpd-timeout-with-ikev2", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{Version: 2, DPD: &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: 30 * time.Second}}}
		}), field: "spec.ipsec.ike.dpd.timeout", msg: msgDPDTimeoutV2},
		{name: "peer/esp-rekeyTime-1s", obj: peerRawWith(setDuration("1s", "spec", "ipsec", "esp", "rekeyTime")),
			field: "spec.ipsec.esp.rekeyTime", msg: msgLifetime},
		{name: "peer/psk-secret-name-uppercase", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.PSKSecretRef.Name = "Client-PSK" }),
			field: "spec.ipsec.pskSecretRef.name", msg: patSecret},
		{name: "peer/psk-secret-name-slashes", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.PSKSecretRef.Name = "../kube-system/psk" }),
			field: "spec.ipsec.pskSecretRef.name", msg: patSecret},
		{name: "peer/psk-secret-key-slash", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.PSKSecretRef.Key = "../psk" }),
			field: "spec.ipsec.pskSecretRef.key", msg: `should match '^[-._a-zA-Z0-9]+$'`},
		{name: "peer/authorization-65-exposures", obj: peerWith(func(p *vpnv1.VPNPeer) {
			a := &vpnv1.Authorization{}
			for i := range 65 {
				a.Exposures = append(a.Exposures, fmt.Sprintf("e%d", i))
			}
			p.Spec.Authorization = a
		}), field: "spec.authorization.exposures", msg: "must have at most 64 items"},
		{name: "peer/authorization-name-newline", obj: peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.Authorization = &vpnv1.Authorization{ReverseExposures: []string{"erp\n"}}
		}), field: "spec.authorization.reverseExposures[0]", msg: patName},
		{name: "peer/persistentKeepalive-negative", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.PersistentKeepalive = ptrTo[int32](-1) }),
			field: "spec.wireguard.persistentKeepalive", msg: "should be greater than or equal to 0"},
		{name: "peer/wireguard-endpoint-garbage", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Endpoint = "peer.example.com; reboot" }),
			field: "spec.wireguard.endpoint", msg: patWGEnd},
		{name: "peer/wireguard-endpoint-port-99999", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Endpoint = "198.51.100.7:99999" }),
			field: "spec.wireguard.endpoint", msg: "endpoint port must be between 1 and 65535"},
		{name: "peer/wireguard-endpoint-port-0", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Endpoint = "198.51.100.7:0" }),
			field: "spec.wireguard.endpoint", msg: "endpoint port must be between 1 and 65535"},

		// --- unsafe ranges and identities (docs/design.md "Security model")
		{name: "peer/remote-subnet-default-route", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"0.0.0.0/0"} }),
			field: "spec.ipsec.remoteSubnets", msg: "remoteSubnets must not be or contain 0.0.0.0/0"},
		{name: "peer/remote-subnet-half-the-internet", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"10.20.0.0/16", "0.0.0.0/1"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/remote-subnet-this-network", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"0.0.0.0/8"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/remote-subnet-loopback", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"127.0.0.0/8"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/remote-subnet-inside-loopback", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"127.0.0.1/32"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/remote-subnet-cloud-metadata", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"169.254.169.254/32"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/remote-subnet-multicast", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"224.0.0.0/24"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/remote-subnet-covering-multicast", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"192.0.0.0/2"} }),
			field: "spec.ipsec.remoteSubnets", msg: msgUnsafeSubnets},
		{name: "peer/wireguard-subnet-default-route", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Subnets = []string{"0.0.0.0/0"} }),
			field: "spec.wireguard.subnets", msg: "subnets must not be or contain 0.0.0.0/0"},
		{name: "peer/wireguard-subnet-link-local", obj: wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Subnets = []string{"169.254.0.0/16"} }),
			field: "spec.wireguard.subnets", msg: "subnets must not cover 0.0.0.0/8, loopback"},
		{name: "peer/id-wildcard", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "*.example.com" }),
			field: "spec.ipsec.peer.id", msg: "id must not contain wildcards (*)"},
		{name: "peer/id-wildcard-in-dn", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "C=DE, O=Client, CN=*" }),
			field: "spec.ipsec.peer.id", msg: "id must not contain wildcards (*)"},
		{name: "peer/id-ipv4net-prefix", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "ipv4net:198.51.100.0/24" }),
			field: "spec.ipsec.peer.id", msg: "id must not use strongSwan's ipv4:"},
		{name: "peer/id-ipv4-prefix-uppercase", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "IPV4:192.0.2.1" }),
			field: "spec.ipsec.peer.id", msg: "id must not use strongSwan's ipv4:"},
		{name: "peer/id-keyid-prefix", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "keyid:0a0b0c" }),
			field: "spec.ipsec.peer.id", msg: "id must not use strongSwan's ipv4:"},
		{name: "peer/id-plain-subnet", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "198.51.100.0/24" }),
			field: "spec.ipsec.peer.id", msg: "id names a subnet"},
		{name: "peer/id-plain-range", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "192.0.2.10-192.0.2.20" }),
			field: "spec.ipsec.peer.id", msg: "id names an address range"},
		{name: "gateway/localID-ipv4net", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{LocalID: "ipv4net:192.0.2.0/24"}
		}), field: "spec.ipsec.localID", msg: "localID must not use strongSwan's ipv4:"},
		{name: "peer/address-any-without-id", obj: peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.Address, p.Spec.IPsec.Peer.ID = "%any", "" }),
			field: "spec.ipsec.peer.id", msg: "id is required when address is %any"},
		{name: "gateway/localID-wildcard", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{LocalID: "*"}
		}), field: "spec.ipsec.localID", msg: "localID must not contain wildcards (*)"},
		{name: "gateway/target-cloud-metadata", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "169.254.169.254" }),
			field: "spec.exposures[0].target.address", msg: msgUnicastTarget},
		{name: "gateway/target-loopback", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "127.0.0.1" }),
			field: "spec.exposures[0].target.address", msg: msgUnicastTarget},
		{name: "gateway/target-multicast", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "224.0.0.251" }),
			field: "spec.exposures[0].target.address", msg: msgUnicastTarget},
		{name: "gateway/target-unspecified", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "0.0.0.0" }),
			field: "spec.exposures[0].target.address", msg: msgUnicastTarget},
		{name: "gateway/target-broadcast", obj: gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "255.255.255.255" }),
			field: "spec.exposures[0].target.address", msg: msgUnicastTarget},
		{name: "gateway/reverse-target-link-local", obj: gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: "169.254.1.1", Ports: ports(vpnv1.PortSpec{Port: 22})}}}
		}), field: "spec.reverseExposures[0].target.address", msg: msgUnicastTarget},
	}
}

// hostileGateway is the well-formed IPsec gateway every gateway case starts from.
func hostileGateway(ns, name string) *vpnv1.VPNGateway {
	return gen.VPNGateway(ns, name, gen.HostNetwork("node-1", "198.51.100.10"), gen.Exposure("api", "192.0.2.10", gen.Port(443)))
}

func hostileWireGuardGateway(ns, name string) *vpnv1.VPNGateway {
	return gen.VPNGatewayFrom(hostileGateway(ns, name), gen.WireGuardListenPort(51820))
}

func gatewayWith(mut func(*vpnv1.VPNGateway)) func(ns, name string) client.Object {
	return func(ns, name string) client.Object {
		g := hostileGateway(ns, name)
		if mut != nil {
			mut(g)
		}
		return g
	}
}

func wgGatewayWith(mut func(*vpnv1.VPNGateway)) func(ns, name string) client.Object {
	return func(ns, name string) client.Object {
		g := hostileWireGuardGateway(ns, name)
		mut(g)
		return g
	}
}

func peerWith(mut func(*vpnv1.VPNPeer)) func(ns, name string) client.Object {
	return func(ns, name string) client.Object {
		p := gen.VPNPeer(ns, name, gen.RemoteSubnets("10.20.0.0/16"))
		if mut != nil {
			mut(p)
		}
		return p
	}
}

func wgPeerWith(mut func(*vpnv1.VPNPeer)) func(ns, name string) client.Object {
	return func(ns, name string) client.Object {
		p := gen.VPNPeer(ns, name, gen.WireGuardPeer(testWGKey), gen.RemoteSubnets("10.30.0.0/16"))
		mut(p)
		return p
	}
}

// gwRaw and peerRaw build the object as unstructured JSON, for values the Go types cannot
// hold (a duration that does not parse): exactly what kubectl apply could send.
func gatewayRawWith(mut func(map[string]any)) func(ns, name string) client.Object {
	return func(ns, name string) client.Object {
		return toUnstructured(hostileGateway(ns, name), "VPNGateway", mut)
	}
}

func peerRawWith(mut func(map[string]any)) func(ns, name string) client.Object {
	return func(ns, name string) client.Object {
		return toUnstructured(gen.VPNPeer(ns, name, gen.RemoteSubnets("10.20.0.0/16")), "VPNPeer", mut)
	}
}

func toUnstructured(o client.Object, kind string, mut func(map[string]any)) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		panic(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(vpnv1.GroupVersion.WithKind(kind))
	mut(u.Object)
	return u
}

func mustSet(m map[string]any, value any, path ...string) {
	if err := unstructured.SetNestedField(m, value, path...); err != nil {
		panic(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// ---------------------------------------------------------------------------------------------
// accepted controls

type hostileControl struct {
	name string
	obj  func(ns, name string) client.Object
}

func hostileControls() []hostileControl {
	setDuration := func(value string, path ...string) func(map[string]any) {
		return func(m map[string]any) { mustSet(m, value, path...) }
	}
	return []hostileControl{
		{"gateway/baseline", gatewayWith(nil)},
		{"gateway/standby-load-balancer", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		})},
		{"gateway/standby-host-network-vip", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Endpoint.HostNetwork = &vpnv1.HostNetworkEndpoint{Nodes: []string{"node-1", "node-2"}, Address: "198.51.100.10"}
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(true)}
		})},
		{"gateway/standby-off-host-network", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Availability = &vpnv1.Availability{Standby: ptrTo(false)}
		})},
		{"gateway/wireguard-baseline", wgGatewayWith(func(*vpnv1.VPNGateway) {})},
		{"gateway/serviceCIDR-slash16-and-slash28", gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.ServiceCIDR = "100.127.240.0/28" })},
		{"gateway/name-40-chars-reverse-exposure-22-chars", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Name = strings.Repeat("a", 40)
			g.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: strings.Repeat("r", 22), Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 22})}}}
		})},
		{"gateway/ports-every-seed-form", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures[0].Target.Ports = []intstr.IntOrString{intstr.FromInt32(443), intstr.FromString("514/udp"),
				intstr.FromString("8443:443"), intstr.FromString("9443:443/tcp"), intstr.FromString("53:5353/UDP")}
		})},
		{"gateway/ports-same-number-tcp-and-udp", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.Exposures[0].Target.Ports = vpnv1.Ports(vpnv1.PortSpec{Port: 53, Protocol: "TCP"}, vpnv1.PortSpec{Port: 53, Protocol: "UDP"})
		})},
		{"gateway/ike-settings-full", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{LocalID: "C=DE, O=bnerd, CN=gw.example.com", IKE: vpnv1.IKESettings{
				Proposals: []string{"aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp2048"},
				DPD:       &vpnv1.DPDSettings{Delay: &metav1.Duration{Duration: 30 * time.Second}, Action: "clear"},
				RekeyTime: &metav1.Duration{Duration: 4*time.Hour + 30*time.Minute}, ReauthTime: &metav1.Duration{},
			}}
		})},
		{"gateway/ikev1-dpd-timeout", gatewayWith(func(g *vpnv1.VPNGateway) {
			g.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Version: 1, Proposals: []string{"aes256-sha256-modp2048"},
				DPD: &vpnv1.DPDSettings{Delay: &metav1.Duration{Duration: 10 * time.Second}, Timeout: &metav1.Duration{Duration: 30 * time.Second}}}}
		})},
		{"peer/ike-dpd-timeout-version-of-the-gateway", peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.IKE = &vpnv1.PeerIKESettings{DPD: &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: 30 * time.Second}}}
		})},
		{"gateway/durations-as-typed", gatewayRawWith(setDuration("1.5h", "spec", "ipsec", "ike", "rekeyTime"))},
		{"gateway/duration-zero", gatewayRawWith(setDuration("0", "spec", "ipsec", "ike", "reauthTime"))},
		{"peer/baseline", peerWith(nil)},
		{"peer/address-dns-name", peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.Address = "vpn.client-1.example.com" })},
		{"peer/address-any", peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.Address = "%any" })},
		{"peer/address-ipv6", peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.Address = "2001:db8::7" })},
		{"peer/id-distinguished-name", peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.Peer.ID = "C=DE, O=Client, CN=fw.example.com" })},
		{"peer/address-any-with-id", peerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.IPsec.Peer.Address, p.Spec.IPsec.Peer.ID = "%any", "roaming.example.com"
		})},
		{"peer/subnet-slash-32-and-large-private", peerWith(func(p *vpnv1.VPNPeer) { p.Spec.IPsec.RemoteSubnets = []string{"10.0.0.0/8", "198.51.100.7/32"} })},
		{"gateway/seed-target-100.64.7.10", gatewayWith(func(g *vpnv1.VPNGateway) { g.Spec.Exposures[0].Target.Address = "100.64.7.10" })},
		{"peer/esp-rekeyTime", peerRawWith(setDuration("45m", "spec", "ipsec", "esp", "rekeyTime"))},
		{"peer/authorization-64-names", peerWith(func(p *vpnv1.VPNPeer) {
			a := &vpnv1.Authorization{}
			for i := range 64 {
				a.Exposures = append(a.Exposures, fmt.Sprintf("e%d", i))
			}
			p.Spec.Authorization = a
		})},
		{"peer/wireguard-endpoint-and-keepalive", wgPeerWith(func(p *vpnv1.VPNPeer) {
			p.Spec.WireGuard.Endpoint = "peer.example.com:65535"
			p.Spec.WireGuard.PersistentKeepalive = ptrTo[int32](25)
		})},
		{"peer/wireguard-endpoint-port-1", wgPeerWith(func(p *vpnv1.VPNPeer) { p.Spec.WireGuard.Endpoint = "198.51.100.7:1" })},
	}
}

// ---------------------------------------------------------------------------------------------
// (b) accepted by the API server, answered by the operator

type hostileAnswer struct {
	name string
	// run builds the case in its own namespace, asserts the operator's answer and returns it.
	run func(t *testing.T, ns string) string
}

func hostileAnswers() []hostileAnswer {
	return []hostileAnswer{
		{"gateway/mode-routed", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.Mode = vpnv1.ModeRouted
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonModeNotImplemented, "spec.mode")
		}},
		{"gateway/virtualIP-outside-serviceCIDR", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ServiceCIDR = "100.120.16.0/24"
			g.Spec.Exposures[0].VirtualIP = "100.120.17.5"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonVirtualIPOutsideCIDR, "spec.exposures[0].virtualIP")
		}},
		{"gateway/two-exposures-same-virtualIP", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ServiceCIDR = "100.120.24.0/24"
			g.Spec.Exposures[0].VirtualIP = "100.120.24.10"
			g.Spec.Exposures = append(g.Spec.Exposures, vpnv1.Exposure{Name: "db", VirtualIP: "100.120.24.10",
				Target: vpnv1.ExposureTarget{Address: "192.0.2.11", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 5432})}})
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonVirtualIPConflict, "spec.exposures[1].virtualIP")
		}},
		{"gateway/virtualIP-is-gateway-own-address", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ServiceCIDR = "100.120.28.0/24"
			g.Spec.Exposures[0].VirtualIP = "100.120.28.1"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonVirtualIPConflict, "spec.exposures[0].virtualIP")
		}},
		{"gateway/target-service-missing", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.Exposures[0].Target = vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "missing-svc"}, Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 443})}
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonTargetServiceNotFound, "missing-svc")
		}},
		{"gateway/ports-duplicate-per-protocol", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.Exposures[0].Target.Ports = []intstr.IntOrString{intstr.FromString("53/udp"), intstr.FromInt32(53), intstr.FromString("53:5353/UDP")}
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonInvalidSpec, "spec.exposures[0].target.ports[2]")
		}},
		{"gateway/target-is-a-node", func(t *testing.T, ns string) string {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hostile-node-" + ns}}
			create(t, node)
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
			node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.77"}}
			if err := env.Client.Status().Update(context.Background(), node); err != nil {
				t.Fatal(err)
			}
			g := hostileGateway(ns, "gw")
			g.Spec.Exposures[0].Target.Address = "192.0.2.77"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonTargetIsNodeAddress, "spec.exposures[0].target.address")
		}},
		{"gateway/target-in-another-gateway-service-cidr", func(t *testing.T, ns string) string {
			other := hostileGateway(ns, "other")
			other.Spec.ServiceCIDR = "100.120.44.0/24"
			create(t, other)
			waitCondition(t, other, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
			g := hostileGateway(ns, "gw")
			g.Spec.Exposures[0].Target.Address = "100.120.44.9"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonTargetInServiceCIDR, ns+"/other")
		}},
		{"gateway/target-outside-allowed-ranges", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.Exposures[0].Target.Address = "203.0.113.80"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionConfigValid, model.ReasonTargetNotAllowed, "203.0.113.80")
		}},
		{"peer/subnet-overlaps-gateway-service-cidr", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ServiceCIDR = "100.120.48.0/24"
			create(t, g, pskSecret(ns, "p"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16", "100.120.48.128/25"))
			create(t, p)
			return peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonSubnetOverlapsServiceCIDR, "100.120.48.128/25")
		}},
		{"peer/dpd-timeout-on-an-ikev2-gateway", func(t *testing.T, ns string) string {
			create(t, hostileGateway(ns, "gw"), pskSecret(ns, "p"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"),
				gen.PeerIKE(vpnv1.PeerIKESettings{DPD: &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: 30 * time.Second}}}))
			create(t, p)
			return peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonDPDTimeoutNeedsIKEv1, "spec.ipsec.ike.dpd.timeout")
		}},
		{"peer/subnet-overlaps-pod-cidr", func(t *testing.T, ns string) string {
			create(t, hostileGateway(ns, "gw"), pskSecret(ns, "p"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("100.96.7.0/24"))
			create(t, p)
			return peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonSubnetOverlapsClusterRange, "pod CIDR")
		}},
		{"peer/subnet-overlaps-internal-sources", func(t *testing.T, ns string) string {
			create(t, hostileGateway(ns, "gw"), pskSecret(ns, "p"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.0.0.0/8"))
			create(t, p)
			return peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonSubnetOverlapsClusterRange, "internal source")
		}},
		{"peer/psk-is-a-serviceaccount-token", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			tok := pskSecret(ns, "p")
			tok.Type = corev1.SecretTypeServiceAccountToken
			tok.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
			tls := pskSecret(ns, "q")
			tls.Type = corev1.SecretTypeTLS
			tls.Data[corev1.TLSCertKey], tls.Data[corev1.TLSPrivateKeyKey] = []byte("cert"), []byte("key")
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"), gen.Grants("api"))
			q := gen.VPNPeer(ns, "q", gen.RemoteSubnets("10.30.0.0/16"), gen.Grants("api"))
			create(t, g, tok, tls, p, q)
			out := peerCondition(t, p, controller.ConditionCredentialsReady, controller.ReasonSecretTypeNotAllowed, "p-psk")
			peerCondition(t, q, controller.ConditionCredentialsReady, controller.ReasonSecretTypeNotAllowed, "kubernetes.io/tls")
			peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonCredentialsRefused, "service-account-token")
			// The gateway may not read either Secret, and neither peer has a tunnel.
			eventually(t, 20*time.Second, func() error { // the gateway's Role without the refused Secrets
				role := &rbacv1.Role{}
				if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: children.Name("gw")}, role); err != nil {
					return err
				}
				for _, rule := range role.Rules {
					for _, n := range rule.ResourceNames {
						if n == "p-psk" || n == "q-psk" {
							return fmt.Errorf("the gateway's Role grants %v on %s", rule.Verbs, n)
						}
					}
				}
				return nil
			})
			cm := &corev1.ConfigMap{}
			eventually(t, 20*time.Second, func() error { // the ConfigMap may come after the Role
				return env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: children.ConfigMapName("gw")}, cm)
			})
			b, err := render.FromConfigMapData(cm.Data, render.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.StrongSwan.SharedKeys) != 0 || len(b.StrongSwan.Connections) != 0 {
				t.Errorf("the rendered configuration still uses a refused Secret: %+v", b.StrongSwan)
			}
			return out + "; Authorized=False/CredentialsRefused, no tunnel, not in the gateway's Role"
		}},
		{"peer/duplicate-remote-id", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			older := gen.VPNPeer(ns, "a-older", gen.RemoteSubnets("10.20.0.0/16"), gen.Grants("api"))
			create(t, g, pskSecret(ns, "a-older"), pskSecret(ns, "b-younger"), older)
			waitCondition(t, older, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
			time.Sleep(1100 * time.Millisecond) // creation timestamps have second resolution
			younger := gen.VPNPeer(ns, "b-younger", gen.RemoteSubnets("10.30.0.0/16"), gen.Grants("api"))
			younger.Spec.IPsec.Peer.ID = "A-Older.example.com" // the same identity as strongSwan compares it
			create(t, younger)
			out := peerCondition(t, younger, vpnv1.ConditionAuthorized, model.ReasonDuplicateIdentity, "a-older")
			waitCondition(t, older, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
			c := waitCondition(t, g, controller.ConditionGrantsValid, metav1.ConditionFalse, model.ReasonIdentityConflict)
			for _, want := range []string{"a-older", "b-younger"} {
				if !strings.Contains(c.Message, want) {
					t.Errorf("gateway GrantsValid message %q does not name %q", c.Message, want)
				}
			}
			return out + "; gateway GrantsValid=False/" + c.Reason
		}},
		{"gateway/serviceCIDR-squats-the-pod-CIDR", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ServiceCIDR = "100.96.0.0/24"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionAddressesAllocated, controller.ReasonServiceCIDRReserved, "pod CIDR 100.96.0.0/16")
		}},
		{"gateway/serviceCIDR-squats-the-Service-CIDR", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ServiceCIDR = "100.97.128.0/17"
			create(t, g)
			return invalidGateway(t, g, vpnv1.ConditionAddressesAllocated, controller.ReasonServiceCIDRReserved, "Service CIDR 100.97.0.0/16")
		}},
		{"gateway/serviceCIDR-overlaps-another-gateway", func(t *testing.T, ns string) string {
			first := hostileGateway(ns, "first")
			first.Spec.ServiceCIDR = "100.120.32.0/24"
			create(t, first)
			waitCondition(t, first, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
			second := hostileGateway(ns, "second")
			second.Spec.ServiceCIDR = "100.120.32.0/23"
			create(t, second)
			out := invalidGateway(t, second, vpnv1.ConditionAddressesAllocated, controller.ReasonServiceCIDRConflict, "first")
			// The first keeps its CIDR and its rendered configuration.
			c := waitCondition(t, first, vpnv1.ConditionAddressesAllocated, metav1.ConditionTrue, controller.ReasonAllocated)
			if !strings.Contains(c.Message, "100.120.32.0/24") {
				t.Errorf("first gateway's AddressesAllocated message %q does not name its CIDR", c.Message)
			}
			waitCondition(t, first, vpnv1.ConditionRendered, metav1.ConditionTrue, controller.ReasonApplied)
			if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: children.ConfigMapName("first")}, &corev1.ConfigMap{}); err != nil {
				t.Errorf("first gateway's ConfigMap: %v", err)
			}
			return out + " (first stays Allocated)"
		}},
		{"peer/unknown-grant", func(t *testing.T, ns string) string {
			create(t, hostileGateway(ns, "gw"), pskSecret(ns, "p"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"), gen.Grants("api", "nope"))
			create(t, p)
			return peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonUnknownGrant, "nope")
		}},
		{"peer/ipsec-peer-on-wireguard-gateway", func(t *testing.T, ns string) string {
			create(t, hostileWireGuardGateway(ns, "gw"), pskSecret(ns, "p"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"))
			create(t, p)
			return peerCondition(t, p, vpnv1.ConditionAuthorized, model.ReasonProtocolMismatch, "wireguard")
		}},
		{"peer/overlapping-subnets-younger-peer", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			older := gen.VPNPeer(ns, "a-older", gen.RemoteSubnets("10.20.0.0/16"), gen.Grants("api"))
			create(t, g, pskSecret(ns, "a-older"), pskSecret(ns, "b-younger"), older)
			waitCondition(t, older, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
			time.Sleep(1100 * time.Millisecond) // creation timestamps have second resolution
			younger := gen.VPNPeer(ns, "b-younger", gen.RemoteSubnets("10.20.128.0/17"), gen.Grants("api"))
			create(t, younger)
			out := peerCondition(t, younger, vpnv1.ConditionAuthorized, model.ReasonSubnetConflict, "a-older")
			waitCondition(t, older, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
			waitCondition(t, g, controller.ConditionGrantsValid, metav1.ConditionFalse, model.ReasonSubnetOverlap)
			return out + " (older stays Authorized)"
		}},
		{"peer/reverse-exposure-granted-to-second-disjoint-peer", func(t *testing.T, ns string) string {
			g := hostileGateway(ns, "gw")
			g.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 1433})}}}
			owner := gen.VPNPeer(ns, "owner", gen.RemoteSubnets("10.20.0.0/16"), gen.ReverseGrants("erp"))
			intruder := gen.VPNPeer(ns, "intruder", gen.RemoteSubnets("10.30.0.0/16"), gen.Grants("api"), gen.ReverseGrants("erp"))
			create(t, g, pskSecret(ns, "owner"), pskSecret(ns, "intruder"), owner, intruder)
			out := peerCondition(t, intruder, vpnv1.ConditionAuthorized, model.ReasonReverseExposureOutsideSubnets, "erp")
			waitCondition(t, owner, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
			c := waitCondition(t, g, controller.ConditionGrantsValid, metav1.ConditionFalse, model.ReasonReverseExposureConflict)
			for _, want := range []string{"erp", "owner", "intruder"} {
				if !strings.Contains(c.Message, want) {
					t.Errorf("gateway GrantsValid message %q does not name %q", c.Message, want)
				}
			}
			return out + "; gateway GrantsValid=False/" + c.Reason
		}},
		{"peer/psk-secret-missing", func(t *testing.T, ns string) string {
			create(t, hostileGateway(ns, "gw"))
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"))
			create(t, p)
			return peerCondition(t, p, controller.ConditionCredentialsReady, controller.ReasonSecretNotFound, "p-psk")
		}},
		{"peer/psk-secret-key-missing", func(t *testing.T, ns string) string {
			s := pskSecret(ns, "p")
			s.Data = map[string][]byte{"pre-shared-key": []byte("wrong-key-name")}
			create(t, hostileGateway(ns, "gw"), s)
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"))
			create(t, p)
			return peerCondition(t, p, controller.ConditionCredentialsReady, controller.ReasonSecretKeyMissing, "psk")
		}},
		{"peer/psk-secret-key-empty", func(t *testing.T, ns string) string {
			s := pskSecret(ns, "p")
			s.Data = map[string][]byte{"psk": {}}
			create(t, hostileGateway(ns, "gw"), s)
			p := gen.VPNPeer(ns, "p", gen.RemoteSubnets("10.20.0.0/16"))
			create(t, p)
			return peerCondition(t, p, controller.ConditionCredentialsReady, controller.ReasonSecretKeyMissing, "psk")
		}},
	}
}

// invalidGateway waits for the gateway's condition typ to be False with reason (its message
// naming want), checks that Ready and Rendered say so too, and that nothing at all was rendered
// for the brand-new gateway.
func invalidGateway(t *testing.T, g *vpnv1.VPNGateway, typ, reason, want string) string {
	t.Helper()
	c := waitCondition(t, g, typ, metav1.ConditionFalse, reason)
	if !strings.Contains(c.Message, want) {
		t.Errorf("%s message %q does not name %q", typ, c.Message, want)
	}
	waitCondition(t, g, vpnv1.ConditionReady, metav1.ConditionFalse, reason)
	waitCondition(t, g, vpnv1.ConditionRendered, metav1.ConditionFalse, controller.ReasonConfigInvalid)
	ctx := context.Background()
	for _, o := range []struct {
		name string
		obj  client.Object
	}{
		{children.ConfigMapName(g.Name), &corev1.ConfigMap{}},
		{children.Name(g.Name), &appsv1.Deployment{}},
		{children.Name(g.Name), &corev1.ServiceAccount{}},
	} {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: g.Namespace, Name: o.name}, o.obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists for an invalid new gateway (partial render), err %v", o.obj, o.name, err)
		}
	}
	return fmt.Sprintf("%s=False/%s, nothing rendered", typ, c.Reason)
}

// peerCondition waits for the peer's condition typ to be False with reason, its message naming want.
func peerCondition(t *testing.T, p *vpnv1.VPNPeer, typ, reason, want string) string {
	t.Helper()
	c := waitCondition(t, p, typ, metav1.ConditionFalse, reason)
	if !strings.Contains(c.Message, want) {
		t.Errorf("%s message %q does not name %q", typ, c.Message, want)
	}
	return fmt.Sprintf("%s=False/%s", typ, c.Reason)
}

// ---------------------------------------------------------------------------------------------

// hostileOutcomes collects each case's outcome for the summary table.
type hostileOutcomes struct {
	mu sync.Mutex
	m  map[string]string
}

func (o *hostileOutcomes) set(name, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]string{}
	}
	o.m[name] = outcome
}

func (o *hostileOutcomes) log(t *testing.T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := make([]string, 0, len(o.m))
	width := 0
	for n := range o.m {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%d cases:\n", len(names))
	for _, n := range names {
		out := strings.ReplaceAll(o.m[n], "\n", `\n`)
		if len(out) > 160 {
			out = out[:157] + "..."
		}
		fmt.Fprintf(&b, "  %-*s -> %s\n", width, n, out)
	}
	t.Logf("%s", b.String())
}
