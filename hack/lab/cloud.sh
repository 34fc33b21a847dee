# The lab's cloud (sourced by common.sh; cluster-up.sh starts it, cluster-down.sh removes it).
# cloud_cni_bin: containerd's CNI bin dir — Debian's containernetworking-plugins (symlinks) and
# lab-cloud, which the runtime runs chained after the cluster network as the lab's stand-in for
# Multus' dispatch of NetworkAttachmentDefinitions (labcloud.Attacher.Dispatch). Multus itself
# is not run (it cannot be had here).
cloud_cni_bin() {
  [ -x /usr/lib/cni/macvlan ] || { log "needs Debian's containernetworking-plugins in /usr/lib/cni (hack/install-test-deps.sh)"; return 1; }
  mkdir -p "$CNI_BIN" "$CLOUD_DIR"
  for p in /usr/lib/cni/*; do ln -sf "$p" "$CNI_BIN/"; done
  ln -sf "$root/bin/lab/lab-cloud" "$CNI_BIN/"   # built by hack/lab/build.sh
}
# cloud_up: the router namespace, its links, the routes, lab-cloud serving (a background
# process of the lab, stopped by cluster-down.sh) and node 1's NIC on the provider network
# (node_cloud_nic; the other nodes get theirs with their namespaces). Writes
# $CLOUD_DIR/networks.json (the networks' IDs as lab-cloud prints them) and
# $CLOUD_DIR/clouds.yaml (the operator's credentials).
cloud_up() {
  ip netns del "$CLOUD_NS" 2>/dev/null || true
  ip link del "$CLOUD_CLIENT_LINK" 2>/dev/null || true
  ip link del "$CLOUD_PROVIDER_LINK" 2>/dev/null || true
  ip netns add "$CLOUD_NS"
  ip -n "$CLOUD_NS" link set lo up
  ip link add "$CLOUD_CLIENT_LINK" type veth peer name client netns "$CLOUD_NS"
  ip addr add "$CLOUD_CLIENT_NODE/30" dev "$CLOUD_CLIENT_LINK"; ip link set "$CLOUD_CLIENT_LINK" up
  ip -n "$CLOUD_NS" addr add "$CLOUD_CLIENT_ROUTER/30" dev client; ip -n "$CLOUD_NS" link set client up
  # the provider network: a bridge, the network's switch, which gets the subnet's gateway
  # (lab-cloud, also its L2 agent: trunks' subports, port security); the VMs' taps are plugged
  # into it (cloud_port_link). Its MAC is fixed: a bridge otherwise takes its ports' lowest,
  # which changes as taps come and go.
  ip -n "$CLOUD_NS" link add "$CLOUD_PROVIDER_BRIDGE" address "$CLOUD_ROUTER_MAC" type bridge
  # the sites (their default route is the node) reach the floating IPs through the router; the
  # router sends everything else back to the node, which routes the sites' links
  ip route replace "$CLOUD_FIP_CIDR" via "$CLOUD_CLIENT_ROUTER"
  ip -n "$CLOUD_NS" route replace default via "$CLOUD_CLIENT_NODE"
  rm -f "$CLOUD_DIR/clouds.yaml"
  start lab-cloud "$CNI_BIN/lab-cloud" --listen "$NODE_IP:$CLOUD_API_PORT" --admin-listen "$CLOUD_ADMIN" \
    --router-netns "$CLOUD_NS" --client-link client --provider-link "$CLOUD_PROVIDER_BRIDGE" \
    --provider-cidr "$CLOUD_PROVIDER_CIDR" --floating-cidr "$CLOUD_FIP_CIDR" --floating-network public \
    --clouds-yaml "$CLOUD_DIR/clouds.yaml" --cloud lab
  wait_for "lab-cloud's networks" 30 grep -q '^{"auth_url"' "$S/logs/lab-cloud.log"
  grep -m1 '^{"auth_url"' "$S/logs/lab-cloud.log" >"$CLOUD_DIR/networks.json"
  log "lab cloud: $(cat "$CLOUD_DIR/networks.json")"
  node_cloud_nic 1
}
# cloud_network <field>: a field of networks.json (provider_network_id, floating_network, ...)
cloud_network() { jq -r --arg f "$1" '.[$f]' "$CLOUD_DIR/networks.json"; }
# cloud_conflist_plugin: lab-cloud's entry in the runtime's conflist (after the cluster network)
cloud_conflist_plugin() {
  echo "{\"type\":\"lab-cloud\",\"kubeconfig\":\"$S/pki/admin.kubeconfig\",\"cacheDir\":\"$S/cni/lab-cloud\"}"
}
# cloud_down: the router namespace (the bridge and the taps with it) and the machine's ends of
# its links (lab-cloud itself is stopped with the other processes; the other nodes' NICs go
# with their namespaces)
cloud_down() {
  ip route del "$CLOUD_FIP_CIDR" 2>/dev/null || true
  ip netns del "$CLOUD_NS" 2>/dev/null || true
  ip link del "$CLOUD_CLIENT_LINK" 2>/dev/null || true
  ip link del "$CLOUD_PROVIDER_LINK" 2>/dev/null || true
}
# cloud_tap <port-id>: the port's link in the router namespace, named as Neutron names taps
cloud_tap() { echo "tap${1:0:11}"; }
# cloud_vm_port <name> <server-id> <trunk: yes|no>: a VM's port on the provider network as Nova
# creates it (device_id the server, device_owner compute:nova; yes: the parent port of a trunk
# of its own), through lab-cloud's admin API; prints the port (JSON)
cloud_vm_port() {
  local trunk=false; [ "$3" = yes ] && trunk=true
  jq -nc --arg n "$1" --arg s "$2" --argjson t "$trunk" '{name: $n, server_id: $s, trunk: $t}' |
    curl -fsS -X POST -H 'Content-Type: application/json' --data-binary @- "http://$CLOUD_ADMIN/vm-ports"
}
# cloud_port_link <port-id> <mac> <netns|-> <ifname>: plugs a port in as a compute node plugs a
# VM's NIC: a veth whose end tap<port ID> (cloud_tap) is a port of the provider bridge, up, and
# whose other end <ifname>, in <netns> ("-": the machine), is the VM's NIC with the port's MAC,
# up, without an address and without IPv6 (the cloud's port security passes the port's IPv4
# and ARP only: IPv6 would be counted as spoofed)
cloud_port_link() {
  local tap ns=$3 ifname=$4 on=()
  tap=$(cloud_tap "$1")
  [ "$ns" = - ] || on=(-n "$ns")
  ip "${on[@]}" link del "$ifname" 2>/dev/null || true
  ip "${on[@]}" link add "$ifname" address "$2" type veth peer name "$tap" netns "$CLOUD_NS"
  if [ -e /proc/sys/net/ipv6 ]; then   # a kernel without IPv6 has nothing to switch off
    if [ "$ns" = - ]; then sysctl -qw "net.ipv6.conf.$ifname.disable_ipv6=1"
    else ip netns exec "$ns" sysctl -qw "net.ipv6.conf.$ifname.disable_ipv6=1"; fi
  fi
  ip -n "$CLOUD_NS" link set "$tap" master "$CLOUD_PROVIDER_BRIDGE" up
  ip "${on[@]}" link set "$ifname" up
}
# cloud_vm_nic <port-name> <server-id> <trunk: yes|no> <netns|-> <ifname>: a VM's NIC on the
# provider network: its port (cloud_vm_port) plugged in (cloud_port_link); prints the port's ID
cloud_vm_nic() {
  local port
  port=$(cloud_vm_port "$1" "$2" "$3") || { log "lab-cloud did not create the port $1"; return 1; }
  cloud_port_link "$(jq -r .id <<<"$port")" "$(jq -r .mac_address <<<"$port")" "$4" "$5"
  jq -r .id <<<"$port"
}
# cloud_port_netns <name> <mac> <address/len> <port-id>: a machine on the provider network as a
# cloud's VM is one: network namespace lab-site-<name> (removed with the sites) whose eth0 is
# its port's NIC (cloud_port_link: its own tap, so port security checks its frames against its
# own port) with the port's MAC and fixed IP, its default route the router (the e2e's "VM"
# holding a floating IP before the cutover; its port created through the Neutron API).
cloud_port_netns() {
  local ns="lab-site-$1"
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"; ip -n "$ns" link set lo up
  cloud_port_link "$4" "$2" "$ns" eth0
  ip -n "$ns" addr add "$3" dev eth0
  ip -n "$ns" route add default via "$(cloud_network provider_gateway)"
}
