#!/usr/bin/env bash
# Removes everything hack/lab/cluster-up.sh (and hack/lab/lab.sh) created: the nodes' and client
# sites' network namespaces, processes, containers and their mounts, cgroups, the CNI bridge and
# the node network, nft tables, kube-proxy's rules, kube-router's chains and ipsets, hard-coded
# paths it created, the state directory; restores the sysctls it recorded. Then checks that
# nothing is left (a process, rule, namespace, link, mount or cgroup: exit 1 if so).
# Safe to run twice.
set -uo pipefail
source "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
t0=$SECONDS

# client sites (hack/lab/lab.sh)
ip addr del "$NODE_IP/32" dev lo 2>/dev/null || true
ip addr del "$LB_IP/32" dev lo 2>/dev/null || true
for ns in $(ip netns list 2>/dev/null | awk '/^lab-site-/ {print $1}'); do
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns"
done
rm -f /var/run/wireguard/labwg-*.sock   # WireGuard sites' UAPI sockets (their daemons died with the netns)
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^lab-s[0-9]+$'); do ip link del "$l" 2>/dev/null; done

stop() { # stop <name>: SIGTERM then SIGKILL the recorded pid (and its process group)
  local pid; pid=$(awk -v n="$1" '$1==n {print $2}' "$S/pids" 2>/dev/null | tail -1)
  [ -n "$pid" ] || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
}

# the other nodes (hack/lab/nodes.sh): everything running in their network namespaces (their
# daemons, host-network pods) and in their cgroups (their pods); their rules and links go with
# the namespaces, their mounts with their mount namespaces
for ns in $(ip netns list 2>/dev/null | awk '/^lab-node-/ {print $1}'); do
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  for f in $(find /sys/fs/cgroup/*/"${CGROUP_ROOT#/}-$ns" -name cgroup.procs 2>/dev/null); do
    for p in $(cat "$f" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  ip netns del "$ns"
done
# a namespace is freed only once the kernel lets go of it (a killed daemon's TCP connections
# linger), and its uplink with it: the machine's ends go now, and the pairs with them
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^lab-n[0-9]+$'); do ip link del "$l" 2>/dev/null; done
ip link del "$NODENET_BRIDGE" 2>/dev/null

if [ -f "$S/pids" ]; then
  stop kube-router   # first: it would re-create its rules
  stop lab-lb
  stop lab-cloud
  stop kubelet
  stop kube-proxy
  # containers: stop the CRI's pod sandboxes via ctr (tasks), then containerd
  if [ -S "$CONTAINERD_SOCK" ]; then
    for c in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1; done
    sleep 1
    for c in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks delete -f "$c" >/dev/null 2>&1; done
  fi
  stop containerd
  stop kube-scheduler
  stop kube-controller-manager
  stop kube-apiserver
  stop etcd
fi
# containerd shims outlive containerd: kill those serving our state dir
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $S/" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
# any process still running in our cgroup trees (containers)
for f in $(find /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"-* -name cgroup.procs 2>/dev/null); do
  for p in $(cat "$f" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
done
sleep 0.5

# kube-router's firewall (filter table, iptables-nft): the jumps from the built-in chains, then its
# chains (flushed first, they jump to each other), then its ipsets (no longer referenced)
KR_CHAINS='KUBE-ROUTER-|KUBE-POD-FW-|KUBE-NWPLCY-'
KR_SETS='^(inet6:)?KUBE-(SRC|DST)-'
if nft list table ip filter >/dev/null 2>&1; then
  for c in INPUT FORWARD OUTPUT; do
    iptables -S "$c" 2>/dev/null | grep -E -- "-j ($KR_CHAINS)" | sed 's/^-A /-D /' |
      while read -r rule; do eval "iptables $rule" 2>/dev/null; done
  done
  chains=$(iptables -S 2>/dev/null | awk '$1=="-N" {print $2}' | grep -E "^($KR_CHAINS)")
  for c in $chains; do iptables -F "$c" 2>/dev/null; done
  for c in $chains; do iptables -X "$c" 2>/dev/null; done
fi
if command -v ipset >/dev/null; then
  for s in $(ipset list -n 2>/dev/null | grep -E "$KR_SETS"); do ipset destroy "$s" 2>/dev/null; done
fi

# kube-proxy's nftables tables and every table of the lab's own (bnerd-lab*: the masquerade, the
# pod source guard, and any an older or interrupted run left)
"$K/kube-proxy" --cleanup >/dev/null 2>&1 || true
lab_nft_tables | awk '$2 !~ /^bnerd_vpn/' | while read -r fam name; do nft delete table "$fam" "$name" 2>/dev/null; done
# iptables(-nft) tables the kubelet created (KUBE-KUBELET-CANARY, KUBE-FIREWALL, ...): delete
# those that did not exist before cluster-up; in pre-existing ones only kubelet's chains go
for t in "ip mangle" "ip filter" "ip nat" "ip6 mangle" "ip6 filter" "ip6 nat"; do
  nft list table $t >/dev/null 2>&1 || continue
  if [ -f "$S/nft-tables-before" ] && ! grep -qx "table $t" "$S/nft-tables-before"; then
    nft delete table $t
  fi
done
# the lab's gateway ran in the host network (hostNetwork endpoint): its ruleset and charon's
# policy routing (table 220, kernel-libipsec routes) are the host's
if [ -f "$S/lab-gateway" ]; then
  nft delete table ip bnerd_vpn 2>/dev/null
  nft delete table ip bnerd_vpn_gate 2>/dev/null   # the startup gate, if the agent never opened it
  ip addr flush dev lo label lo:bnerd-vpn 2>/dev/null   # the gateway's service-CIDR address
  grep -q '^220$' "$S/rule220-before" 2>/dev/null || while ip rule del table 220 2>/dev/null; do :; done
  ip route flush table 220 2>/dev/null
fi

# mounts under the state dir (overlay rootfs, shm, volumes, netns), deepest first
if [ -d "$S" ]; then
  awk -v s="$S" 'index($2, s)==1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
fi
# pod network namespaces containerd created (/var/run/netns/cni-*) since cluster-up
for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do
  grep -qx "$ns" "$S/netns-before" 2>/dev/null || ip netns del "$ns" 2>/dev/null
done
ip link del "$BRIDGE" 2>/dev/null
cloud_down   # the cloud's router namespace and links (hack/lab/cloud.sh)

# cgroups: remove the nodes' cgroupRoots in every hierarchy, deepest first
for d in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"-*; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# sysctls back to what they were
if [ -f "$S/sysctls" ]; then
  while IFS== read -r k v; do sysctl -qw "$k=$v" 2>/dev/null; done <"$S/sysctls"
fi

# hard-coded paths we created
if [ -f "$S/created" ]; then
  while read -r p; do [ -n "$p" ] && rm -rf "$p"; done <"$S/created"
fi
rm -rf "$S"

# nothing may be left: no process of the lab's builds, no chain or ipset of kube-router, no node
# or cloud namespace, link, mount or cgroup
left=$( { pgrep -f "^($root/bin/tools/kube-router-|$K/|$root/bin/lab/lab-lb )" | sed 's/^/process /'
          nft list table ip filter >/dev/null 2>&1 && iptables -S 2>/dev/null | grep -E -- "$KR_CHAINS" | sed 's/^/rule /'
          command -v ipset >/dev/null && ipset list -n 2>/dev/null | grep -E "$KR_SETS" | sed 's/^/ipset /'
          ip netns list 2>/dev/null | awk -v cloud="$CLOUD_NS" '/^lab-(node|site)-/ || $1 == cloud {print "netns " $1}'
          ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^($NODENET_BRIDGE|$BRIDGE|$CLOUD_PROVIDER_LINK|$CLOUD_CLIENT_LINK|lab-n[0-9]+|lab-s[0-9]+)$" | sed 's/^/link /'
          lab_nft_tables | sed 's/^/nft table /'
          awk -v s="$S" 'index($2, s)==1 {print "mount " $2}' /proc/self/mounts
          ls -d /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"-* 2>/dev/null | sed 's/^/cgroup /'; } || true)
if [ -n "$left" ]; then
  log "left behind:"; echo "$left" >&2
  exit 1
fi
log "down in $((SECONDS - t0))s"
