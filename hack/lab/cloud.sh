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
# cloud_up: the router namespace, its links, the routes, and lab-cloud serving (a background
# process of the lab, stopped by cluster-down.sh). Writes $CLOUD_DIR/networks.json (the networks'
# IDs as lab-cloud prints them) and $CLOUD_DIR/clouds.yaml (the operator's credentials).
cloud_up() {
  ip netns del "$CLOUD_NS" 2>/dev/null || true
  ip link del "$CLOUD_CLIENT_LINK" 2>/dev/null || true
  ip link del "$CLOUD_PROVIDER_LINK" 2>/dev/null || true
  ip netns add "$CLOUD_NS"
  ip -n "$CLOUD_NS" link set lo up
  ip link add "$CLOUD_CLIENT_LINK" type veth peer name client netns "$CLOUD_NS"
  ip addr add "$CLOUD_CLIENT_NODE/30" dev "$CLOUD_CLIENT_LINK"; ip link set "$CLOUD_CLIENT_LINK" up
  ip -n "$CLOUD_NS" addr add "$CLOUD_CLIENT_ROUTER/30" dev client; ip -n "$CLOUD_NS" link set client up
  # the provider network: the router's end gets the subnet's gateway (lab-cloud), the node's end
  # stays without an address: it only carries the macvlans of the ports (the NAD's master)
  ip link add "$CLOUD_PROVIDER_LINK" type veth peer name provider netns "$CLOUD_NS"
  ip link set "$CLOUD_PROVIDER_LINK" up
  # the sites (their default route is the node) reach the floating IPs through the router; the
  # router sends everything else back to the node, which routes the sites' links
  ip route replace "$CLOUD_FIP_CIDR" via "$CLOUD_CLIENT_ROUTER"
  ip -n "$CLOUD_NS" route replace default via "$CLOUD_CLIENT_NODE"
  rm -f "$CLOUD_DIR/clouds.yaml"
  start lab-cloud "$CNI_BIN/lab-cloud" --listen "$NODE_IP:$CLOUD_API_PORT" --admin-listen "$CLOUD_ADMIN" \
    --router-netns "$CLOUD_NS" --client-link client --provider-link provider \
    --provider-cidr "$CLOUD_PROVIDER_CIDR" --floating-cidr "$CLOUD_FIP_CIDR" --floating-network public \
    --clouds-yaml "$CLOUD_DIR/clouds.yaml" --cloud lab
  wait_for "lab-cloud's networks" 30 grep -q '^{"auth_url"' "$S/logs/lab-cloud.log"
  grep -m1 '^{"auth_url"' "$S/logs/lab-cloud.log" >"$CLOUD_DIR/networks.json"
  log "lab cloud: $(cat "$CLOUD_DIR/networks.json")"
}
# cloud_network <field>: a field of networks.json (provider_network_id, floating_network, ...)
cloud_network() { jq -r --arg f "$1" '.[$f]' "$CLOUD_DIR/networks.json"; }
# cloud_conflist_plugin: lab-cloud's entry in the runtime's conflist (after the cluster network)
cloud_conflist_plugin() {
  echo "{\"type\":\"lab-cloud\",\"kubeconfig\":\"$S/pki/admin.kubeconfig\",\"cacheDir\":\"$S/cni/lab-cloud\"}"
}
# cloud_down: the router namespace and the node's ends of its links (lab-cloud itself is
# stopped with the other processes)
cloud_down() {
  ip route del "$CLOUD_FIP_CIDR" 2>/dev/null || true
  ip netns del "$CLOUD_NS" 2>/dev/null || true
  ip link del "$CLOUD_CLIENT_LINK" 2>/dev/null || true
  ip link del "$CLOUD_PROVIDER_LINK" 2>/dev/null || true
}
# cloud_port_netns <name> <mac> <address/len>: a machine on the provider network as a cloud's VM
# is one: network namespace lab-site-<name> (removed with the sites) whose eth0 is a macvlan on
# the provider link with its port's MAC and fixed IP, its default route the router (the e2e's
# "VM" holding a floating IP before the cutover).
cloud_port_netns() {
  local ns="lab-site-$1" l="lab-vm$$"
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"; ip -n "$ns" link set lo up
  ip link add link "$CLOUD_PROVIDER_LINK" name "$l" address "$2" type macvlan mode bridge
  ip link set "$l" netns "$ns"; ip -n "$ns" link set "$l" name eth0
  ip -n "$ns" addr add "$3" dev eth0; ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$(cloud_network provider_gateway)"
}
