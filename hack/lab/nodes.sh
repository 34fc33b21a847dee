# The lab's nodes (sourced by common.sh; cluster-up.sh starts them, cluster-down.sh removes them,
# node.sh runs the faults). Node 1 ($NODE) is the machine itself: its network namespace holds the
# control plane, the sites' and the cloud's links and the load balancer's address. Nodes 2..N are
# what kind makes of a container: a network namespace (lab-node-<i>) on the node network (the
# bridge $NODENET_BRIDGE, where the machine answers for $NODE_IP), a mount namespace of its own
# (the paths a kubelet hard-codes) and its own containerd, kubelet, kube-proxy and kube-router,
# state under $S/nodes/<name> and pods under the cgroup $CGROUP_ROOT-<name>. The pod network is
# routed: node <i> owns 100.96.<i-1>.0/24 and the machine routes each range to its node, so a pod
# keeps its address across nodes; what leaves the cluster is masqueraded by the machine.
LAB_NODES=${LAB_NODES:-3}
CLUSTER_CIDR=100.96.0.0/16
NODENET_BRIDGE=labnodes
NODENET_ROUTE=192.0.2.8/29                  # nodes 2..7: 192.0.2.10-15 (inside the chart's nodeCIDRs)
# Nodes 2..N take only pods that tolerate this taint (the e2e places its cross-node pods there
# with a toleration and a node name); everything else the lab and the e2e run stays on node 1.
WORKER_TAINT=lab.bnerd.net/worker

node_name() { if [ "$1" = 1 ]; then echo "$NODE"; else echo "lab-node-$1"; fi; }
node_ip() { if [ "$1" = 1 ]; then echo "$NODE_IP"; else echo "192.0.2.$((8 + $1))"; fi; }
node_pod_cidr() { echo "100.96.$(($1 - 1)).0/24"; }
node_dir() { if [ "$1" = 1 ]; then echo "$S"; else echo "$S/nodes/$(node_name "$1")"; fi; }
node_cgroup() { if [ "$1" = 1 ]; then echo "$CGROUP_ROOT"; else echo "$CGROUP_ROOT-$(node_name "$1")"; fi; }
node_sock() { echo "$(node_dir "$1")/containerd/containerd.sock"; }
node_link() { echo "lab-n$1"; }             # the machine's end of a node's uplink
# node_server_id <i>: the ID of node <i>'s server in the lab's cloud (its NIC's port's device_id)
# and node_provider_id <i> the kubelet's providerID with it, from which the operator finds the
# node's port, as cloud-provider-openstack finds a node's server
node_server_id() { printf '5ab0de00-0000-4000-8000-0000000000%02d\n' "$1"; }
node_provider_id() { echo "openstack:///$(node_server_id "$1")"; }
# node_index <name>: the index of a node by name (1 for $NODE)
node_index() {
  local i
  for i in $(seq 1 7); do [ "$(node_name "$i")" = "$1" ] && { echo "$i"; return 0; }; done
  log "no lab node named $1 (nodes: $(for i in $(seq 1 "$LAB_NODES"); do node_name "$i"; done | xargs))"; return 1
}
# node_exec <i> <program...>: runs a program on node <i> (a binary, not a shell function)
node_exec() {
  local i=$1; shift
  if [ "$i" = 1 ]; then "$@"; else
    nsenter --net="/run/netns/$(node_name "$i")" --mount="$(node_dir "$i")/mnt" -- "$@"
  fi
}

# nodes_network: the node network's bridge and the machine's route to the nodes on it
nodes_network() {
  ip link del "$NODENET_BRIDGE" 2>/dev/null || true
  ip link add "$NODENET_BRIDGE" type bridge
  ip link set "$NODENET_BRIDGE" up
  ip route replace "$NODENET_ROUTE" dev "$NODENET_BRIDGE" src "$NODE_IP"
  # the nodes' mount namespaces are kept as files under $S/nodes, which must not be a shared mount
  mkdir -p "$S/nodes"
  mount --bind "$S/nodes" "$S/nodes"
  mount --make-private "$S/nodes"
}

# node_namespaces <i>: node <i>'s network namespace (its uplink on the node network, its pod
# range routed to it, its NIC on the cloud's provider network) and its mount namespace (its own
# kubelet device plugin and pod log directories; the rest of the file system is the machine's)
node_namespaces() {
  local i=$1 n; n=$(node_name "$1")
  local d; d=$(node_dir "$i")
  mkdir -p "$d"
  ip netns del "$n" 2>/dev/null || true
  ip netns add "$n"
  ip link add "$(node_link "$i")" type veth peer name eth0 netns "$n"
  ip link set "$(node_link "$i")" master "$NODENET_BRIDGE" up
  ip -n "$n" link set lo up
  ip -n "$n" addr add "$(node_ip "$i")/28" dev eth0
  ip -n "$n" link set eth0 up
  ip -n "$n" route add default via "$NODE_IP"
  ip route replace "$(node_pod_cidr "$i")" via "$(node_ip "$i")"
  ip netns exec "$n" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$n" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  node_cloud_nic "$i"
  touch "$d/mnt"
  unshare --mount="$d/mnt" --propagation slave true
  # what a kubelet keeps at fixed paths, the node's own: its device plugins' sockets, and the pods'
  # logs (a kubelet removes the log directories of pods it does not run: another node's)
  mkdir -p /var/lib/kubelet/device-plugins /var/log/pods /var/log/containers "$d/log/pods" "$d/log/containers"
  nsenter --mount="$d/mnt" -- mount -t tmpfs -o size=1m lab-device-plugins /var/lib/kubelet/device-plugins
  nsenter --mount="$d/mnt" -- mount --bind "$d/log/pods" /var/log/pods
  nsenter --mount="$d/mnt" -- mount --bind "$d/log/containers" /var/log/containers
}

# node_cloud_nic <i>: node <i>'s NIC on the cloud's provider network, $CLOUD_PROVIDER_LINK (on the
# machine for node 1, in its namespace for the others), its port named after the node and the
# parent port of a trunk (the gateways' ports become its subports; hack/lab/cloud.sh)
node_cloud_nic() {
  local i=$1 ns=- id
  [ "$i" = 1 ] || ns=$(node_name "$i")
  id=$(cloud_vm_nic "$(node_name "$i")" "$(node_server_id "$i")" yes "$ns" "$CLOUD_PROVIDER_LINK") || return 1
  log "$(node_name "$i"): $CLOUD_PROVIDER_LINK on the cloud's provider network, port $id (a trunk's parent)"
}

# node_start <i> <images>: node <i>'s containerd (the images of the file <images>, lines "ref
# archive", imported), CNI configuration, kubelet and kube-proxy. kube-router follows once the
# Node is registered (node_kube_router).
node_start() {
  local i=$1 images=$2 n d sock pki=$S/pki kubelet_cert
  n=$(node_name "$i"); d=$(node_dir "$i"); sock=$(node_sock "$i")
  local tag="" on=(); [ "$i" = 1 ] || { tag="@$n"; on=(nsenter --net="/run/netns/$n" --mount="$d/mnt" --); }
  mkdir -p "$d"/{containerd,cni/net.d,cni/ipam,kubelet,kubelet-certs,kubelet-plugins}
  cat >"$d/containerd/config.toml" <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$d/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
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
    conf_dir = "$d/cni/net.d"
TOML
  cat >"$d/cni/net.d/10-bnerd-lab.conflist" <<JSON
{"cniVersion":"0.4.0","name":"bnerd-lab","plugins":[
 {"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"$(node_pod_cidr "$i")"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"$d/cni/ipam"}},
 {"type":"lab-sourceguard","bridge":"$BRIDGE"},
 {"type":"portmap","capabilities":{"portMappings":true}},
 $(cloud_conflist_plugin)]}
JSON
  node_exec "$i" "$CNI_BIN/lab-sourceguard" install
  start "containerd$tag" "${on[@]}" containerd --config "$d/containerd/config.toml"
  wait_for "containerd of $n" 30 command ctr --address "$sock" version
  local ref archive
  while read -r ref archive; do
    command ctr --address "$sock" -n k8s.io images import --no-unpack=false "$archive" >/dev/null
    [ "$i" = 1 ] && log "imported $ref"
  done <"$images"

  # kubelet: its cgroupRoot must exist in every hierarchy (cgroup v1 here); cluster-down.sh removes it
  local cg h; cg=$(node_cgroup "$i")
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h" ] && [ ! -L "${h%/}" ] || continue
    mkdir -p "$h${cg#/}"
    if [ -f "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" >"$h${cg#/}/cpuset.cpus"; cat "$h/cpuset.mems" >"$h${cg#/}/cpuset.mems"
    fi
  done
  kubelet_cert=kubelet; [ "$i" = 1 ] || kubelet_cert="kubelet-$n"
  [ -f "$pki/$kubelet_cert.kubeconfig" ] || lab_cert "$kubelet_cert" "/O=system:nodes/CN=system:node:$n"
  local taints="[]"; [ "$i" = 1 ] || taints="[{key: $WORKER_TAINT, effect: PreferNoSchedule}]"
  cat >"$d/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cg
containerRuntimeEndpoint: unix://$sock
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
podCIDR: $(node_pod_cidr "$i")
providerID: $(node_provider_id "$i")
registerWithTaints: $taints
resolvConf: /etc/resolv.conf
healthzBindAddress: 127.0.0.1
address: $(node_ip "$i")
YAML
  start "kubelet$tag" "${on[@]}" "$K/kubelet" --config "$d/kubelet/config.yaml" --kubeconfig "$pki/$kubelet_cert.kubeconfig" \
    --hostname-override "$n" --node-ip "$(node_ip "$i")" --root-dir "$d/kubelet" --cert-dir "$d/kubelet-certs" \
    --volume-plugin-dir "$d/kubelet-plugins"

  # kube-proxy: masqueradeAll off (clusterCIDR set): a pod reaching another pod through a
  # ClusterIP keeps its own source address, which the server and NetworkPolicy see (with
  # masqueradeAll every such connection came from the node's address, which kube-router always
  # admits). A same-node reply is bridged on $BRIDGE and still un-DNATed, bridge-nf-call-iptables
  # being 1. Sources outside the pod network (the node, a host-network gateway's sites, a load
  # balancer's clients) and a pod reaching itself through its Service are still masqueraded.
  cat >"$d/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $pki/kube-proxy.kubeconfig}
hostnameOverride: $n
mode: nftables
clusterCIDR: $CLUSTER_CIDR
nftables: {masqueradeAll: false}
conntrack: {maxPerCore: 0}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
YAML
  start "kube-proxy$tag" "${on[@]}" "$K/kube-proxy" --config "$d/kube-proxy.yaml"
}

# node_kube_router <i> <kube-router>: node <i>'s pod range recorded in its Node, and its NetworkPolicy enforcer, kube-router's firewall only
# (--run-router/--run-service-proxy off: the bridge CNI and kube-proxy stay): iptables chains in
# the filter table (a KUBE-POD-FW-* chain per local pod a policy selects, jumped to from FORWARD,
# bridged traffic included since bridge-nf-call-iptables is 1, and OUTPUT) and ipsets of the
# policies' peers. v2.1.0's --health-port binds every address, so it is off; /healthz is served
# on the metrics address too, which is 127.0.0.1.
node_kube_router() {
  local i=$1 kr=$2 n; n=$(node_name "$1")
  local tag="" on=(); [ "$i" = 1 ] || { tag="@$n"; on=(nsenter --net="/run/netns/$n" --mount="$(node_dir "$i")/mnt" --); }
  wait_for "node $n registered" 60 kubectl get node "$n"   # kube-router reads its Node at start
  # the node's pod range in its spec, as a CNI's IPAM or the node IPAM controller writes it
  # (settable once; the lab routes each range to its node, so it is not left to allocation)
  kubectl patch node "$n" --type merge -p "{\"spec\":{\"podCIDR\":\"$(node_pod_cidr "$i")\",\"podCIDRs\":[\"$(node_pod_cidr "$i")\"]}}" >/dev/null
  start "kube-router$tag" "${on[@]}" "$kr" --kubeconfig "$S/pki/kube-router.kubeconfig" --hostname-override "$n" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --enable-ipv4=true --enable-ipv6=false --service-cluster-ip-range "$SERVICE_CIDR" \
    --health-port 0 --metrics-addr 127.0.0.1 --metrics-port "$KUBE_ROUTER_PORT"
}
# node_kube_router_ready <i>: healthy, and its first full sync restored the filter table (the
# explicit ACCEPT of policy-compliant traffic is appended to its top-level chains only then)
node_kube_router_ready() {
  node_exec "$1" curl -fsS "http://127.0.0.1:$KUBE_ROUTER_PORT/healthz" &&
    node_exec "$1" iptables -S KUBE-ROUTER-FORWARD | grep -q 'explicitly ACCEPT traffic that comply'
}

# lab_cert <name> <subject> [san]: a key and certificate of the lab's CA in $S/pki, and (client
# certificates) a kubeconfig for it
lab_cert() {
  local n=$1 subj=$2 san=${3:-} pki=$S/pki ext
  openssl req -newkey rsa:2048 -nodes -keyout "$pki/$n.key" -out "$pki/$n.csr" -subj "$subj" 2>/dev/null
  ext=$(mktemp)
  if [ -n "$san" ]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$ext"
  else printf 'extendedKeyUsage=clientAuth\n' >"$ext"; fi
  openssl x509 -req -in "$pki/$n.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -out "$pki/$n.crt" -days 30 -extfile "$ext" 2>/dev/null
  rm -f "$ext" "$pki/$n.csr"
  [ -n "$san" ] && return 0
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
}
