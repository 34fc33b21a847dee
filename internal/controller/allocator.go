package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
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
	// (VPNGateways) or wakeLegacy (IPsecGateways) instead of having them poll.
	waiting    map[waiter]struct{}
	wake       chan event.GenericEvent
	wakeLegacy chan event.GenericEvent
	limits     NamespaceLimits
}

// LimitError: a new claim would take the gateway's namespace beyond one of its limits.
type LimitError struct {
	Namespace string
	// Holding is what the namespace's other gateways hold: Gateways of them, Addresses in all.
	Gateways, Addresses int
	// Wanted is the size of the claim; Limit the limit reached and Flag its operator setting.
	Wanted int
	Limit  int
	Flag   string
}

func (e *LimitError) Error() string {
	if e.Flag == flagMaxGateways {
		return fmt.Sprintf("namespace %s already has %d gateways holding a service CIDR, its limit (operator setting %s %d): delete one, or ask the cluster admin", e.Namespace, e.Gateways, e.Flag, e.Limit)
	}
	return fmt.Sprintf("namespace %s's gateways hold %d service-CIDR addresses; %d more would pass its limit (operator setting %s %d): request a smaller spec.serviceCIDR, delete a gateway, or ask the cluster admin", e.Namespace, e.Addresses, e.Wanted, e.Flag, e.Limit)
}

// The operator settings of NamespaceLimits, named in LimitError.
const (
	flagMaxGateways  = "--max-gateways-per-namespace"
	flagMaxAddresses = "--max-service-addresses-per-namespace"
)

// waiter is a gateway waiting for a free block: its model kind and name.
type waiter struct {
	kind string
	types.NamespacedName
}

func newAllocator(pool netip.Prefix, limits NamespaceLimits) (*allocator, error) {
	p, err := ipam.NewPool(pool, 24)
	if err != nil {
		return nil, fmt.Errorf("service CIDR pool %s: %w", pool, err)
	}
	return &allocator{pool: p, waiting: map[waiter]struct{}{}, wake: make(chan event.GenericEvent), wakeLegacy: make(chan event.GenericEvent), limits: limits}, nil
}

// namespaceOf is the namespace in an ownerKey.
func namespaceOf(owner string) string {
	if _, rest, legacy := strings.Cut(owner, " "); legacy {
		owner = rest
	}
	ns, _, _ := strings.Cut(owner, "/")
	return ns
}

// withinLimits checks a new claim of size addresses by owner against its namespace's limits.
// The caller holds a.mu.
func (a *allocator) withinLimits(owner string, size int) error {
	if a.limits.Gateways <= 0 && a.limits.Addresses <= 0 {
		return nil
	}
	ns := namespaceOf(owner)
	e := &LimitError{Namespace: ns, Wanted: size}
	for o, cidr := range a.pool.Holdings() {
		if o != owner && namespaceOf(o) == ns {
			e.Gateways++
			e.Addresses += 1 << (32 - cidr.Bits())
		}
	}
	switch {
	case a.limits.Gateways > 0 && e.Gateways >= a.limits.Gateways:
		e.Limit, e.Flag = a.limits.Gateways, flagMaxGateways
		return e
	case a.limits.Addresses > 0 && e.Addresses+size > a.limits.Addresses:
		e.Limit, e.Flag = a.limits.Addresses, flagMaxAddresses
		return e
	}
	return nil
}

// ownerKey is a gateway's key in the pool: "namespace/name" for a VPNGateway (as always),
// "IPsecGateway namespace/name" for a legacy one, so a legacy and a unified gateway of the
// same name never share an allocation. It names the holder in conflict messages.
func ownerKey(kind, namespace, name string) string {
	if kind == model.KindIPsecGateway {
		return kind + " " + namespace + "/" + name
	}
	return namespace + "/" + name
}

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
	var legacyList ipsecv1.IPsecGatewayList
	if err := c.List(ctx, &legacyList); err != nil {
		return fmt.Errorf("listing IPsecGateways to rebuild the address pool: %w", err)
	}
	seeds := make([]ipam.Seed, 0, len(list.Items)+len(legacyList.Items))
	for i := range list.Items {
		gw := &list.Items[i]
		s := ipam.Seed{Owner: ownerKey("", gw.Namespace, gw.Name)}
		s.Assigned, _ = netip.ParsePrefix(gw.Status.ServiceCIDR)
		s.Requested, _ = netip.ParsePrefix(gw.Spec.ServiceCIDR)
		seeds = append(seeds, s)
	}
	for i := range legacyList.Items {
		gw := &legacyList.Items[i]
		if Released(gw) {
			continue // its service CIDR passed to the gateway that took it over
		}
		s := ipam.Seed{Owner: ownerKey(model.KindIPsecGateway, gw.Namespace, gw.Name)}
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
func (a *allocator) serviceCIDRFor(kind string, gw *vpnv1.VPNGateway) (netip.Prefix, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	owner := ownerKey(kind, gw.Namespace, gw.Name)
	key := waiter{kind, types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}}
	// A gateway whose CIDR another holds waits for a release as an exhausted one does (a
	// migration: the new gateway claims the CIDR its released legacy gateway gives up).
	// The same for one over its namespace's limits: a release in the namespace wakes it.
	wait := func(err error) {
		_, conflict := errors.AsType[*ipam.ConflictError](err)
		_, limited := errors.AsType[*LimitError](err)
		if conflict || limited || errors.Is(err, ipam.ErrExhausted) {
			a.waiting[key] = struct{}{}
		} else {
			delete(a.waiting, key)
		}
	}
	claim := func(p netip.Prefix) (netip.Prefix, error) {
		err := a.pool.Claim(owner, p)
		wait(err)
		return p, err
	}
	// A service CIDR in status is live (clients use it): it is kept whatever the limits say.
	if cur, err := netip.ParsePrefix(gw.Status.ServiceCIDR); err == nil {
		return claim(cur)
	}
	_, holds := a.pool.Lookup(owner)
	if req, err := netip.ParsePrefix(gw.Spec.ServiceCIDR); err == nil {
		if !holds {
			if err := a.withinLimits(owner, 1<<(32-req.Bits())); err != nil {
				wait(err)
				return netip.Prefix{}, err
			}
		}
		return claim(req)
	}
	if !holds {
		if err := a.withinLimits(owner, 1<<(32-24)); err != nil {
			wait(err)
			return netip.Prefix{}, err
		}
	}
	cidr, err := a.pool.Allocate(owner)
	wait(err)
	return cidr, err
}

// release frees the gateway's service CIDR and wakes the gateways waiting for one.
func (a *allocator) release(kind, namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pool.Release(ownerKey(kind, namespace, name))
	delete(a.waiting, waiter{kind, types.NamespacedName{Namespace: namespace, Name: name}})
	for key := range a.waiting {
		meta := metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
		if key.kind == model.KindIPsecGateway {
			gw := &ipsecv1.IPsecGateway{ObjectMeta: meta}
			go func() { a.wakeLegacy <- event.GenericEvent{Object: gw} }()
			continue
		}
		gw := &vpnv1.VPNGateway{ObjectMeta: meta}
		go func() { a.wake <- event.GenericEvent{Object: gw} }()
	}
	clear(a.waiting)
}

// othersHolding returns, for each address, the other gateway whose service CIDR contains it.
func (a *allocator) othersHolding(kind string, gw *vpnv1.VPNGateway, addrs []netip.Addr) []model.GatewayCIDR {
	self := ownerKey(kind, gw.Namespace, gw.Name)
	var out []model.GatewayCIDR
	for _, addr := range addrs {
		if owner, cidr, ok := a.pool.HolderOf(addr, self); ok {
			out = append(out, model.GatewayCIDR{Gateway: owner, CIDR: cidr})
		}
	}
	return out
}
