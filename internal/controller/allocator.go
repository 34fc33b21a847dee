package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/ipam"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// allocator is the operator's service-CIDR pool, rebuilt from the gateways' status the first
// time it is used (after the cache has synced), already-assigned gateways first.
type allocator struct {
	mu     sync.Mutex
	pool   *ipam.Pool
	seeded bool
	// waiting are gateways that found the pool exhausted; a release wakes them through wake
	// instead of having them poll.
	waiting map[types.NamespacedName]struct{}
	wake    chan event.GenericEvent
}

func newAllocator(pool netip.Prefix) (*allocator, error) {
	p, err := ipam.NewPool(pool, 24)
	if err != nil {
		return nil, fmt.Errorf("service CIDR pool %s: %w", pool, err)
	}
	return &allocator{pool: p, waiting: map[types.NamespacedName]struct{}{}, wake: make(chan event.GenericEvent)}, nil
}

func ownerKey(namespace, name string) string { return namespace + "/" + name }

// ensureSeeded rebuilds the pool from every gateway's status and spec, once.
func (a *allocator) ensureSeeded(ctx context.Context, c client.Reader) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seeded {
		return nil
	}
	var list vpnv1.VPNGatewayList
	if err := c.List(ctx, &list); err != nil {
		return fmt.Errorf("listing gateways to rebuild the address pool: %w", err)
	}
	seeds := make([]ipam.Seed, 0, len(list.Items))
	for i := range list.Items {
		gw := &list.Items[i]
		s := ipam.Seed{Owner: ownerKey(gw.Namespace, gw.Name)}
		s.Assigned, _ = netip.ParsePrefix(gw.Status.ServiceCIDR)
		s.Requested, _ = netip.ParsePrefix(gw.Spec.ServiceCIDR)
		seeds = append(seeds, s)
	}
	// Conflicts found here surface again, per gateway, when each one claims its CIDR.
	a.pool.Rebuild(seeds)
	a.seeded = true
	return nil
}

// serviceCIDRFor decides the gateway's service CIDR: the one in status (live), else the
// requested one in spec, else a fresh block from the pool.
func (a *allocator) serviceCIDRFor(gw *vpnv1.VPNGateway) (netip.Prefix, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	owner := ownerKey(gw.Namespace, gw.Name)
	if cur, err := netip.ParsePrefix(gw.Status.ServiceCIDR); err == nil {
		return cur, a.pool.Claim(owner, cur)
	}
	if req, err := netip.ParsePrefix(gw.Spec.ServiceCIDR); err == nil {
		return req, a.pool.Claim(owner, req)
	}
	key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
	cidr, err := a.pool.Allocate(owner)
	if errors.Is(err, ipam.ErrExhausted) {
		a.waiting[key] = struct{}{}
	} else {
		delete(a.waiting, key)
	}
	return cidr, err
}

// release frees the gateway's service CIDR and wakes the gateways waiting for one.
func (a *allocator) release(namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pool.Release(ownerKey(namespace, name))
	delete(a.waiting, types.NamespacedName{Namespace: namespace, Name: name})
	for key := range a.waiting {
		gw := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		go func() { a.wake <- event.GenericEvent{Object: gw} }()
	}
	clear(a.waiting)
}

// othersHolding returns, for each address, the other gateway whose service CIDR contains it.
func (a *allocator) othersHolding(gw *vpnv1.VPNGateway, addrs []netip.Addr) []model.GatewayCIDR {
	self := ownerKey(gw.Namespace, gw.Name)
	var out []model.GatewayCIDR
	for _, addr := range addrs {
		if owner, cidr, ok := a.pool.HolderOf(addr, self); ok {
			out = append(out, model.GatewayCIDR{Gateway: owner, CIDR: cidr})
		}
	}
	return out
}
