#!/usr/bin/env bash
# Starts a real Kubernetes of $LAB_NODES nodes (default 3) on this machine (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler; on every node containerd, kubelet, kube-proxy and
# kube-router's firewall as the NetworkPolicy enforcer; v1.37.x built from the Go module proxy;
# the nodes: hack/lab/nodes.sh) with
# everything it creates under $LAB_STATE (default /var/lib/bnerd-lab), removable with
# hack/lab/cluster-down.sh. Needs root. How it is built: docs/lab.md.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
case $LAB_NODES in [1-7]) ;; *) log "LAB_NODES=$LAB_NODES: the lab runs 1 to 7 nodes (hack/lab/nodes.sh)"; exit 1 ;; esac
t0=$(date +%s.%N)

# --- packages: the lab group of hack/install-test-deps.sh's table ---------------------------------
"$root/hack/install-test-deps.sh" lab

# --- binaries: Kubernetes, kube-router, the images, ... (hack/lab/build.sh; cached) ------------
KR=$("$root/hack/lab/build.sh")

if [ -f "$S/pids" ] && grep -q . "$S/pids"; then log "a lab is already up (state in $S); run hack/lab/cluster-down.sh first"; exit 1; fi
# tables an interrupted or older run left would act on this run's traffic (a stale DNAT of an
# address the lab reuses): swept before anything starts
lab_nft_tables | awk '$2 !~ /^bnerd_vpn/' | while read -r fam name; do
  log "removing the nft table $fam $name a previous run left"; nft delete table "$fam" "$name"
done
mkdir -p "$S"/{pki,etcd,logs,containerd,cni/net.d,cni/ipam,kubelet,kubelet-certs,kubelet-plugins,manifests}
: >"$S/pids"; : >"$S/created"
ip netns list 2>/dev/null | awk '{print $1}' >"$S/netns-before"
cloud_cni_bin   # containerd's CNI bin dir, lab-cloud in it (hack/lab/cloud.sh)
# the pod source guard (internal/lab/labnet): a pod sends only from its own addresses, as production
# CNIs enforce and the bridge plugin does not; its table now, its CNI plugin in the conflist
ln -sf "$root/bin/lab/lab-sourceguard" "$CNI_BIN/"
nft list tables >"$S/nft-tables-before"   # kubelet adds iptables-nft tables (KUBE-* chains)
ip rule list | grep -q 'lookup 220' && echo 220 >"$S/rule220-before"   # strongSwan's routing table

# paths some components hard-code: remember which ones we create so teardown removes only those
for p in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /var/log/pods /opt/cni /etc/cni /run/wireguard; do
  [ -e "$p" ] || echo "$p" >>"$S/created"
done

# --- sysctls: record now, restore at down --------------------------------------------------------
if [ ! -f "$S/sysctls" ]; then
  for k in $SYSCTLS; do echo "$k=$(sysctl -n "$k")"; done >"$S/sysctls"
fi
sysctl -qw net.ipv4.ip_forward=1
# bridged pod-to-pod traffic through netfilter: kube-proxy's conntrack un-DNATs a same-node reply
# (masqueradeAll is off, below) and kube-router filters it (built in here: CONFIG_BRIDGE_NETFILTER=y)
[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || modprobe br_netfilter 2>/dev/null || true
sysctl -qw net.bridge.bridge-nf-call-iptables=1 || { log "needs bridge netfilter (br_netfilter)"; exit 1; }
# the node's own address and the lab load balancer's (documentation range), removed again by
# cluster-down.sh
ip addr replace "$NODE_IP/32" dev lo
ip addr replace "$LB_IP/32" dev lo

# --- PKI (openssl) ------------------------------------------------------------------------------
pki=$S/pki
if [ ! -f "$pki/ca.crt" ]; then
  log "PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 30 -subj "/CN=bnerd-lab-ca" 2>/dev/null
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  lab_cert apiserver "/CN=kube-apiserver" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SVC_IP"
  lab_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  lab_cert admin "/O=system:masters/CN=lab-admin"
  lab_cert controller-manager "/CN=system:kube-controller-manager"
  lab_cert scheduler "/CN=system:kube-scheduler"
  lab_cert kube-proxy "/CN=system:kube-proxy"
  lab_cert kube-router "/CN=bnerd-lab:kube-router"   # bound to the ClusterRole bnerd-lab:kube-router below
  # the kubelets' certificates: node_start
fi

# --- the lab's cloud: lab-cloud (Neutron/Keystone, the router namespace), node 1's NIC on it ----------
cloud_up

# --- etcd, control plane ------------------------------------------------------------------------
start etcd etcd --name lab --data-dir "$S/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls http://127.0.0.1:23800 \
  --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster lab=http://127.0.0.1:23800 \
  --unsafe-no-fsync
start kube-apiserver "$K/kube" kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc --api-audiences https://kubernetes.default.svc \
  --service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC --allow-privileged=true \
  --enable-admission-plugins NodeRestriction --profiling=false --kubelet-preferred-address-types InternalIP,Hostname
wait_for kube-apiserver 60 kubectl get --raw /readyz
# the NetworkAttachmentDefinition CRD (what Multus ships), for the gateways' net1
"$CNI_BIN/lab-cloud" install-nad-crd --kubeconfig "$S/pki/admin.kubeconfig"
start kube-controller-manager "$K/kube-controller-manager" --kubeconfig "$pki/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$pki/controller-manager.kubeconfig" --authorization-kubeconfig "$pki/controller-manager.kubeconfig" \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" --use-service-account-credentials \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$CLUSTER_CIDR" --allocate-node-cidrs=false \
  --leader-elect=false --flex-volume-plugin-dir "$S/kubelet-plugins" --bind-address 127.0.0.1 --secure-port 10257 --profiling=false
start kube-scheduler "$K/kube-scheduler" --kubeconfig "$pki/scheduler.kubeconfig" \
  --authentication-kubeconfig "$pki/scheduler.kubeconfig" --authorization-kubeconfig "$pki/scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259 --profiling=false

# --- the nodes: containerd, kubelet, kube-proxy each (hack/lab/nodes.sh) ---------------------------
# pods reach beyond the cluster masqueraded by the machine (our own nft table; removed at down);
# between nodes they keep their addresses
nft -f - <<NFT
table ip bnerd-lab {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $CLUSTER_CIDR ip daddr != $CLUSTER_CIDR oifname != { "$BRIDGE", "$NODENET_BRIDGE" } masquerade
  }
}
NFT
# images: the pause image and the lab's own, imported into each node's containerd (no registry,
# no pulls)
"$root/hack/lab/build-images.sh" >"$S/images"
[ "$LAB_NODES" -le 1 ] || nodes_network
for i in $(seq 1 "$LAB_NODES"); do
  [ "$i" = 1 ] || node_namespaces "$i"
  node_start "$i" "$S/images"
done

# --- kube-router: the NetworkPolicy enforcer of every node ---------------------------------------
# Its own identity, read-only on what it watches. cluster-down.sh removes its chains, jumps and
# ipsets on node 1 (the other nodes' go with their network namespaces).
kubectl apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "bnerd-lab:kube-router"}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, endpoints, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "bnerd-lab:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "bnerd-lab:kube-router"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "bnerd-lab:kube-router"}]
YAML
for i in $(seq 1 "$LAB_NODES"); do node_kube_router "$i" "$KR"; done

for i in $(seq 1 "$LAB_NODES"); do
  n=$(node_name "$i")
  wait_for "node $n Ready" 90 kubectl wait --for=condition=Ready "node/$n" --timeout=1s
  wait_for "kube-router (NetworkPolicy enforcer) of $n" 60 node_kube_router_ready "$i"
done
# the lab's load balancer for Services of class $LB_CLASS (internal/lab/lablb): $LB_IP forwarded
# from the machine to a ready endpoint, on whichever node it runs
start lab-lb "$root/bin/lab/lab-lb" --kubeconfig "$S/pki/admin.kubeconfig" --address "$LB_IP" --class "$LB_CLASS"
wait_for "default ServiceAccount" 60 kubectl get serviceaccount default
printf 'lab: cluster up in %.1fs — export KUBECONFIG=%s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$KUBECONFIG" >&2
