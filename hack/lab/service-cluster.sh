#!/usr/bin/env bash
# service-cluster.sh: the lab's second "service cluster" (common.sh SVC_*): a network namespace
# behind the node, reached over the fabric link lab-s50 (the node routes SVC_RANGE via SVC_VIA, as
# a fabric router would), and the ClusterLink that plumbs it into the gateways: every gateway
# admits SVC_RANGE as an internal source (its workloads reach reverse exposures) and may send
# exposures to it. Removed by hack/lab/cluster-down.sh (the netns, the veth and with it the route;
# the ClusterLink with the cluster).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ip netns del "$SVC_NETNS" 2>/dev/null || true
ip link del "$SVC_LINK" 2>/dev/null || true
ip netns add "$SVC_NETNS"
ip link add "$SVC_LINK" type veth peer name eth0 netns "$SVC_NETNS"
ip addr add "$SVC_NODE_SIDE/30" dev "$SVC_LINK"; ip link set "$SVC_LINK" up
ip -n "$SVC_NETNS" link set lo up
ip -n "$SVC_NETNS" addr add "$SVC_VIA/30" dev eth0; ip -n "$SVC_NETNS" link set eth0 up
ip -n "$SVC_NETNS" route add default via "$SVC_NODE_SIDE"
ip -n "$SVC_NETNS" addr add "$SVC_HOST/32" dev lo
# the fabric: the node routes the service cluster's range to it (the node is the lab's router;
# a gateway never adds routes to the node's table)
ip route replace "$SVC_RANGE" via "$SVC_VIA" dev "$SVC_LINK"
kubectl apply -f - >/dev/null <<YAML
apiVersion: ipsec.bnerd.net/v1alpha1
kind: ClusterLink
metadata: {name: lab-service-cluster}
spec:
  cidrs: [$SVC_RANGE]
  via: $SVC_VIA
  description: the lab's service cluster (network namespace $SVC_NETNS behind the node)
YAML
wait_for "ClusterLink lab-service-cluster Ready" 60 kubectl wait --for=condition=Ready clusterlink/lab-service-cluster --timeout=1s
log "service cluster: $SVC_RANGE (host $SVC_HOST in netns $SVC_NETNS) via $SVC_VIA, ClusterLink lab-service-cluster Ready"
