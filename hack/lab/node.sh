#!/usr/bin/env bash
# node.sh ACTION NODE: a data centre's faults on one of the lab's nodes (hack/lab/nodes.sh), for
# the tests and for a person. NODE is a node's name (kubectl get nodes).
#   freeze NODE           lose the node without telling the API: its uplink goes down and its
#                         kubelet, containerd, kube-proxy, kube-router and pods stop (SIGSTOP);
#                         the API server learns of it only from the missing heartbeats
#   thaw NODE             the reverse: everything continues (SIGCONT), the uplink comes up
#   kill NODE             the node's power lost: its uplink goes down and every process of it
#                         (daemons and pods) is killed
#   boot NODE             a killed node started again: its containerd, kubelet, kube-proxy and
#                         kube-router (the kubelet then restarts its pods), its uplink up
#   cut NODE              only its uplink down: it runs on, and reaches nothing
#   restore NODE          its uplink up
#   partition NODE        cut from the control plane only: its traffic to and from the API server
#                         (and the API server's to its kubelet) is dropped; it still reaches the
#                         client sites, the other nodes and their pods
#   heal NODE             the reverse of partition
#   restart-kubelet NODE  the kubelet stopped (SIGTERM) and started again with the same flags
#   drain NODE            kubectl drain (cordon, then evictions that respect disruption budgets)
#   uncordon NODE
# freeze, kill, cut and partition act on the nodes 2..N: node 1 is the machine, which also runs the
# control plane, the sites' links and the cloud.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
action=${1:?usage: node.sh freeze|thaw|kill|boot|cut|restore|partition|heal|restart-kubelet|drain|uncordon NODE}
name=${2:?usage: node.sh ACTION NODE}
i=$(node_index "$name")
worker() { [ "$i" != 1 ] || { log "$action acts on the nodes 2..$LAB_NODES; $name is the machine itself"; exit 2; }; }

# the node's processes: everything in its network namespace (daemons, shims, host-network pods)
# and in its cgroups (its pods)
node_pids() {
  { ip netns pids "$name"
    find /sys/fs/cgroup/*/"$(node_cgroup "$i" | sed 's#^/##')" -name cgroup.procs -exec cat {} + 2>/dev/null
  } | sort -un
}
signal_all() { local p; for p in $(node_pids); do kill "-$1" "$p" 2>/dev/null || true; done; }
describe() { local p; for p in "$@"; do printf '%s(%s) ' "$p" "$(cat "/proc/$p/comm" 2>/dev/null)"; done; }
FAULT_TABLE=bnerd-lab-fault

case $action in
  freeze)
    worker
    ip link set "$(node_link "$i")" down
    signal_all STOP
    log "$name frozen ($(node_pids | wc -l) processes stopped, uplink down)" ;;
  thaw)
    worker
    signal_all CONT
    ip link set "$(node_link "$i")" up
    log "$name thawed" ;;
  kill)
    worker
    ip link set "$(node_link "$i")" down
    n=$(node_pids | wc -l)
    signal_all KILL
    # done once every process is gone: a killed process takes a moment to exit, and one that
    # was forking meanwhile may leave a child behind
    for _ in $(seq 100); do [ -z "$(node_pids)" ] && break; sleep 0.1; signal_all KILL; done
    left=$(node_pids)
    [ -z "$left" ] || { log "$name: processes left after SIGKILL: $(describe $left)"; exit 1; }
    log "$name killed ($n processes, uplink down)" ;;
  boot)
    worker
    left=$(node_pids)
    [ -z "$left" ] || { log "$name is running (node.sh kill $name first): $(describe $left)"; exit 1; }
    node_start "$i" "$S/images"
    node_kube_router "$i" "$("$root/hack/lab/kube-router.sh")"
    ip link set "$(node_link "$i")" up
    log "$name booted" ;;
  cut)
    worker
    ip link set "$(node_link "$i")" down
    log "$name cut off (uplink down)" ;;
  restore)
    worker
    ip link set "$(node_link "$i")" up
    log "$name reconnected (uplink up)" ;;
  partition)
    worker
    node_exec "$i" nft -f - <<NFT
table ip $FAULT_TABLE {
  chain output {
    type filter hook output priority filter; policy accept;
    ip daddr $NODE_IP tcp dport $API_PORT drop
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip daddr $NODE_IP tcp dport $API_PORT drop
  }
  chain input {
    type filter hook input priority filter; policy accept;
    ip saddr $NODE_IP tcp sport $API_PORT drop
    ip saddr $NODE_IP tcp dport 10250 drop
  }
}
NFT
    log "$name partitioned from the control plane ($NODE_IP:$API_PORT and its kubelet's port dropped)" ;;
  heal)
    worker
    node_exec "$i" nft delete table ip "$FAULT_TABLE" 2>/dev/null || true
    log "$name healed" ;;
  restart-kubelet)
    tag=kubelet; [ "$i" = 1 ] || tag="kubelet@$name"
    pid=$(awk -v n="$tag" '$1==n {print $2}' "$S/pids" | tail -1)
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || { log "no running kubelet of $name"; exit 1; }
    mapfile -d '' cmd <"/proc/$pid/cmdline"
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    on=(); [ "$i" = 1 ] || on=(nsenter --net="/run/netns/$name" --mount="$(node_dir "$i")/mnt" --)
    start "$tag" "${on[@]}" "${cmd[@]}"
    log "$name: kubelet restarted" ;;
  drain)
    kubectl drain "$name" --ignore-daemonsets --delete-emptydir-data --timeout=180s >&2 ;;
  uncordon)
    kubectl uncordon "$name" >&2 ;;
  *) log "unknown action $action"; exit 2 ;;
esac
