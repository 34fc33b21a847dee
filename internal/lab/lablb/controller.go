package lablb

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Controller applies the plan for every Service of Class: their status, the nftables table and
// the connection tracking of frontends whose target changed. One pass handles all Services (they
// share the address and the table), whatever object changed.
type Controller struct {
	Client  client.Client
	Class   string
	Address netip.Addr
	Log     logr.Logger
	// NFT loads a ruleset (nft -f -); ExecNFT when nil.
	NFT func(ctx context.Context, ruleset string) error
	// Flush drops the connection tracking of a frontend; FlushConntrack when nil.
	Flush func(address netip.Addr, fe Frontend) error

	mu      sync.Mutex
	applied map[Frontend]Rule
	loaded  bool
}

// SetupWithManager runs the controller on Services and EndpointSlices, every event mapped to
// the one pass.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("lab-load-balancer").
		Watches(&corev1.Service{}, all).
		Watches(&discoveryv1.EndpointSlice{}, all).
		Complete(c)
}

// Reconcile is the one pass.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var svcs corev1.ServiceList
	if err := c.Client.List(ctx, &svcs); err != nil {
		return reconcile.Result{}, err
	}
	var mine []ServiceEndpoints
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer || ptr.Deref(s.Spec.LoadBalancerClass, "") != c.Class || s.DeletionTimestamp != nil {
			continue
		}
		if err := c.publish(ctx, s); err != nil {
			return reconcile.Result{}, err
		}
		var slices discoveryv1.EndpointSliceList
		if err := c.Client.List(ctx, &slices, client.InNamespace(s.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: s.Name}); err != nil {
			return reconcile.Result{}, err
		}
		mine = append(mine, ServiceEndpoints{Service: s, Slices: slices.Items})
	}
	rules, problems := Plan(mine, c.applied)
	for _, p := range problems {
		c.Log.Info("frontend refused", "problem", p)
	}
	changed := Changed(c.applied, rules)
	if c.loaded && len(changed) == 0 {
		return reconcile.Result{}, nil
	}
	nft := c.NFT
	if nft == nil {
		nft = ExecNFT
	}
	if err := nft(ctx, Ruleset(c.Address, rules)); err != nil {
		return reconcile.Result{}, err
	}
	flush := c.Flush
	if flush == nil {
		flush = FlushConntrack
	}
	for _, fe := range changed {
		if err := flush(c.Address, fe); err != nil {
			return reconcile.Result{}, err
		}
		if r, ok := rules[fe]; ok {
			c.Log.Info("forwarding", "frontend", fe.String(), "service", r.Service.String(), "target", r.Target.String())
		} else {
			c.Log.Info("frontend removed", "frontend", fe.String())
		}
	}
	c.applied, c.loaded = rules, true
	return reconcile.Result{}, nil
}

// publish writes the address into a Service's status (ipMode Proxy: the load balancer, not
// kube-proxy, delivers it), unless it is there.
func (c *Controller) publish(ctx context.Context, s *corev1.Service) error {
	want := []corev1.LoadBalancerIngress{{IP: c.Address.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}}
	in := s.Status.LoadBalancer.Ingress
	if len(in) == 1 && in[0].IP == want[0].IP && ptr.Deref(in[0].IPMode, "") == corev1.LoadBalancerIPModeProxy {
		return nil
	}
	patch := client.MergeFrom(s.DeepCopy())
	s.Status.LoadBalancer.Ingress = want
	if err := c.Client.Status().Patch(ctx, s, patch); err != nil {
		return fmt.Errorf("status of %s/%s: %w", s.Namespace, s.Name, err)
	}
	c.Log.Info("address published", "service", s.Namespace+"/"+s.Name, "address", c.Address.String())
	return nil
}

// ExecNFT loads a ruleset with the nft binary.
func ExecNFT(ctx context.Context, ruleset string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// FlushConntrack deletes the connection tracking entries of flows to the address's frontend, so
// that their next packet is forwarded by the current rule.
func FlushConntrack(address netip.Addr, fe Frontend) error {
	f := &netlink.ConntrackFilter{}
	proto := uint8(unix.IPPROTO_TCP)
	switch fe.Protocol {
	case corev1.ProtocolUDP:
		proto = unix.IPPROTO_UDP
	case corev1.ProtocolSCTP:
		proto = unix.IPPROTO_SCTP
	}
	if err := f.AddIP(netlink.ConntrackOrigDstIP, net.IP(address.AsSlice())); err != nil {
		return err
	}
	if err := f.AddProtocol(proto); err != nil {
		return err
	}
	if err := f.AddPort(netlink.ConntrackOrigDstPort, uint16(fe.Port)); err != nil {
		return err
	}
	if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		return fmt.Errorf("conntrack flush of %s %s: %w", address, fe, err)
	}
	return nil
}
