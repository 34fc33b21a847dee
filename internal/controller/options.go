// Package controller holds the operator's reconcilers: thin loops that fetch objects, hand
// them to the pure model and renderers, apply the result with server-side apply and write
// status once per pass.
package controller

import (
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

const (
	// FieldOwner is the operator's server-side apply field manager.
	FieldOwner = "bnerd-vpn-operator"
	// FinalizerAddresses keeps a gateway until its service CIDR is released.
	FinalizerAddresses = "vpn.bnerd.net/release-addresses"
	// AnnotationAppliedHash on a child is the hash of its rendering last applied: edited
	// content under an unchanged hash is somebody else's edit.
	AnnotationAppliedHash = "vpn.bnerd.net/applied-hash"
	// AnnotationRevoked on a gateway's ConfigMap lists, one per line, what was taken out of
	// its last good configuration while the current one is invalid (model.Restrict); absent
	// once a valid configuration is applied.
	AnnotationRevoked = "vpn.bnerd.net/revoked"
	// LabelManagedBy marks every child; the operator's cache only holds objects with it.
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelManagedByValue = "bnerd-vpn-operator"
)

// Options configure the reconcilers.
type Options struct {
	Model  model.Config
	Render children.Options
	// HostNetworkNamespaces selects, by their labels, the namespaces whose gateways may run in
	// a node's network namespace (the cluster admin's decision: tenants cannot label their
	// namespaces). Nil allows none.
	HostNetworkNamespaces labels.Selector
	// Limits bound what one namespace may hold of the service-CIDR address space.
	Limits NamespaceLimits
	// GatewayNamespaces are the namespaces the operator serves (--gateway-namespaces): its
	// cache holds namespaced objects of these only, so nothing elsewhere is reconciled or read.
	// Empty: every namespace.
	GatewayNamespaces []string
	// RolloutConcurrency is how many gateways may move to new gateway images (Render's
	// AgentImage, StrongSwanImage) at a time (--gateway-rollout-concurrency); the others keep
	// the images their pods run until fewer gateways are rolling (rolloutGate). 0: unbounded,
	// every gateway moves at once.
	RolloutConcurrency int
}

// Serves is whether the operator serves (and caches) the namespace.
func (o Options) Serves(namespace string) bool {
	return len(o.GatewayNamespaces) == 0 || slices.Contains(o.GatewayNamespaces, namespace)
}

// NamespaceLimits bound what the gateways of one namespace hold, so one tenant cannot take the
// address space of every other. A gateway that already holds its service CIDR keeps it; a
// new claim beyond a limit is refused (AddressesAllocated=False, NamespaceLimitReached) until
// the namespace holds less. Zero: no limit.
type NamespaceLimits struct {
	// Gateways is the number of gateways (VPNGateways and IPsecGateways) of one namespace that
	// may hold a service CIDR.
	Gateways int
	// Addresses is the number of service-CIDR addresses the gateways of one namespace may hold
	// together (a /24 is 256).
	Addresses int
}

// DefaultNamespaceLimits are the operator's defaults: 32 gateways and sixteen /24s' worth of
// addresses per namespace.
var DefaultNamespaceLimits = NamespaceLimits{Gateways: 32, Addresses: 16 * 256}

// DefaultHostNetworkNamespaces is the label the admin puts on a namespace to allow it
// host-network gateways (the operator's default --host-network-namespace-selector).
const DefaultHostNetworkNamespaces = "vpn.bnerd.net/host-network=allowed"
