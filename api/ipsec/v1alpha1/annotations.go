package v1alpha1

// AnnotationMigratedTo on an IPsecGateway names the VPNGateway (same namespace) that took it
// over: the legacy object is released. The operator stops reconciling it, deletes its gateway
// pod and other children (so the new gateway can take the node's tunnel ports and the
// reverse-exposure Services' names), never touches its public endpoint (a pinned or pool
// floating IP, a LoadBalancer Service, a host address: all stay as they are) and gives up its
// service CIDR in the operator's pool, so the new gateway can claim the same one (the client's
// remote network); on delete its finalizer is removed without releasing any cloud resource. `kubectl vpn migrate` sets it; removing it hands the endpoint
// back to the legacy gateway.
const AnnotationMigratedTo = "vpn.bnerd.net/migrated-to"
