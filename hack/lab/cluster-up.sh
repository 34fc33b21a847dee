#!/usr/bin/env bash
# Starts a real single-node Kubernetes (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd, kubelet, kube-proxy; v1.37.x built from the Go module proxy; and
# kube-router's firewall as the NetworkPolicy enforcer) with
# everything it creates under $LAB_STATE (default /var/lib/bnerd-lab), removable with
# hack/lab/cluster-down.sh. Needs root. How it is built: docs/lab.md.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
t0=$(date +%s.%N)

# --- packages: the lab group of hack/install-test-deps.sh's table ---------------------------------
"$root/hack/install-test-deps.sh" lab

# --- binaries: Kubernetes, kube-router, the images, ... (hack/lab/build.sh; cached) ------------
KR=$("$root/hack/lab/build.sh")

if [ -f "$S/pids" ] && grep -q . "$S/pids"; then log "a lab is already up (state in $S); run hack/lab/cluster-down.sh first"; exit 1; fi
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
  cert() { # cert <name> <subject> [san]
    local n=$1 subj=$2 san=${3:-}
    openssl req -newkey rsa:2048 -nodes -keyout "$pki/$n.key" -out "$pki/$n.csr" -subj "$subj" 2>/dev/null
    local ext; ext=$(mktemp)
    if [ -n "$san" ]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$ext"
    else printf 'extendedKeyUsage=clientAuth\n' >"$ext"; fi
    openssl x509 -req -in "$pki/$n.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -out "$pki/$n.crt" -days 30 -extfile "$ext" 2>/dev/null
    rm -f "$ext" "$pki/$n.csr"
  }
  cert apiserver "/CN=kube-apiserver" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SVC_IP"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert admin "/O=system:masters/CN=lab-admin"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  cert kube-proxy "/CN=system:kube-proxy"
  cert kube-router "/CN=bnerd-lab:kube-router"   # bound to the ClusterRole bnerd-lab:kube-router below
  for n in admin controller-manager scheduler kubelet kube-proxy kube-router; do
    cat >"$pki/$n.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://$NODE_IP:$API_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: $n
  user: {client-certificate: "$pki/$n.crt", client-key: "$pki/$n.key"}
contexts:
- name: lab
  context: {cluster: lab, user: $n}
current-context: lab
KC
  done
fi

start() { # start <name> <cmd...>: background, log to $S/logs/<name>.log, pid recorded
  local n=$1; shift
  setsid "$@" >"$S/logs/$n.log" 2>&1 </dev/null &
  echo "$n $!" >>"$S/pids"
}

# --- the lab's cloud: lab-cloud (Neutron/Keystone, the router namespace) -------------------------
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
  --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$POD_CIDR" --allocate-node-cidrs=false \
  --leader-elect=false --flex-volume-plugin-dir "$S/kubelet-plugins" --bind-address 127.0.0.1 --secure-port 10257 --profiling=false
start kube-scheduler "$K/kube-scheduler" --kubeconfig "$pki/scheduler.kubeconfig" \
  --authentication-kubeconfig "$pki/scheduler.kubeconfig" --authorization-kubeconfig "$pki/scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 10259 --profiling=false

# --- containerd ---------------------------------------------------------------------------------
cat >"$S/containerd/config.toml" <<TOML
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$S/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$S/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/lab-pause:lab"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$S/cni/net.d"
TOML
cat >"$S/cni/net.d/10-bnerd-lab.conflist" <<JSON
{"cniVersion":"0.4.0","name":"bnerd-lab","plugins":[
 {"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"$POD_CIDR"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"$S/cni/ipam"}},
 {"type":"lab-sourceguard","bridge":"$BRIDGE"},
 {"type":"portmap","capabilities":{"portMappings":true}},
 $(cloud_conflist_plugin)]}
JSON
"$CNI_BIN/lab-sourceguard" install
# pods reach beyond the node masqueraded (our own nft table; removed at down)
nft -f - <<NFT
table ip bnerd-lab {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $POD_CIDR ip daddr != $POD_CIDR oifname != "$BRIDGE" masquerade
  }
}
NFT
start containerd containerd --config "$S/containerd/config.toml"
wait_for containerd 30 ctr version

# images: the pause image and the lab's own, imported (no registry, no pulls)
"$root/hack/lab/build-images.sh" | while read -r ref archive; do
  ctr -n k8s.io images import --no-unpack=false "$archive" >/dev/null
  log "imported $ref"
done

# --- kubelet ------------------------------------------------------------------------------------
# its cgroupRoot must exist in every hierarchy (cgroup v1 here); cluster-down.sh removes it
for h in /sys/fs/cgroup/*/; do
  [ -d "$h" ] && [ ! -L "${h%/}" ] || continue
  mkdir -p "$h${CGROUP_ROOT#/}"
  if [ -f "$h/cpuset.cpus" ]; then
    cat "$h/cpuset.cpus" >"$h${CGROUP_ROOT#/}/cpuset.cpus"; cat "$h/cpuset.mems" >"$h${CGROUP_ROOT#/}/cpuset.mems"
  fi
done
cat >"$S/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
allowedUnsafeSysctls: ["net.ipv4.ip_forward"]
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
serializeImagePulls: false
podCIDR: $POD_CIDR
resolvConf: /etc/resolv.conf
healthzBindAddress: 127.0.0.1
address: $NODE_IP
YAML
start kubelet "$K/kubelet" --config "$S/kubelet/config.yaml" --kubeconfig "$pki/kubelet.kubeconfig" \
  --hostname-override "$NODE" --node-ip "$NODE_IP" --root-dir "$S/kubelet" --cert-dir "$S/kubelet-certs" \
  --volume-plugin-dir "$S/kubelet-plugins"

# --- kube-proxy ---------------------------------------------------------------------------------
# masqueradeAll off (clusterCIDR set): a pod reaching another pod through a ClusterIP keeps its own
# source address, which the server and NetworkPolicy see (with masqueradeAll every such
# connection came from the bridge's address, the node's, which kube-router always admits). The
# reply is bridged on $BRIDGE and still un-DNATed, bridge-nf-call-iptables being 1 (above).
# Sources outside the pod CIDR (the node, a host-network gateway's sites, a load balancer's
# clients) and a pod reaching itself through its Service are still masqueraded.
cat >"$S/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $pki/kube-proxy.kubeconfig}
hostnameOverride: $NODE
mode: nftables
clusterCIDR: $POD_CIDR
nftables: {masqueradeAll: false}
conntrack: {maxPerCore: 0}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
YAML
start kube-proxy "$K/kube-proxy" --config "$S/kube-proxy.yaml"

# --- kube-router: the NetworkPolicy enforcer -----------------------------------------------------
# Only its firewall (--run-router/--run-service-proxy off: the bridge CNI and kube-proxy stay):
# iptables chains in the filter table (a KUBE-POD-FW-* chain per local pod a policy selects,
# jumped to from FORWARD, bridged traffic included since bridge-nf-call-iptables is 1, and
# OUTPUT) and ipsets of the policies' peers. Its own identity, read-only on what it watches.
# v2.1.0's --health-port binds every address, so it is off; /healthz is served on the metrics
# address too, which is 127.0.0.1. cluster-down.sh removes its chains, jumps and ipsets.
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
wait_for "node $NODE registered" 60 kubectl get node "$NODE"   # kube-router reads its Node at start
start kube-router "$KR" --kubeconfig "$pki/kube-router.kubeconfig" --hostname-override "$NODE" \
  --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
  --enable-ipv4=true --enable-ipv6=false --service-cluster-ip-range "$SERVICE_CIDR" \
  --health-port 0 --metrics-addr 127.0.0.1 --metrics-port "$KUBE_ROUTER_PORT"
# healthy, and its first full sync restored the filter table (the explicit ACCEPT of policy-
# compliant traffic is appended to its top-level chains only then)
kube_router_ready() {
  curl -fsS "http://127.0.0.1:$KUBE_ROUTER_PORT/healthz" &&
    iptables -S KUBE-ROUTER-FORWARD | grep -q 'explicitly ACCEPT traffic that comply'
}

wait_for "node Ready" 90 kubectl wait --for=condition=Ready node/$NODE --timeout=1s
wait_for "kube-router (NetworkPolicy enforcer)" 60 kube_router_ready
wait_for "default ServiceAccount" 60 kubectl get serviceaccount default
printf 'lab: cluster up in %.1fs — export KUBECONFIG=%s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$KUBECONFIG" >&2
