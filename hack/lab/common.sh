# Shared settings of the lab scripts (sourced).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
S=${LAB_STATE:-/var/lib/bnerd-lab}          # everything the lab creates lives here
version=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$root/hack/tools/kube/go.mod")
K="$root/bin/k8s/$version"                  # kube binaries (combined "kube" + symlinks)
export PATH="$K:$PATH"                      # kubectl among them (also for `sh -c "kubectl ..."`)
NODE=lab-node
LAB_NS=lab-acme                             # the sample client's namespace
# Every address the lab uses is its own, in documentation or CGNAT ranges: the node's address is
# put on lo by cluster-up.sh, the sites' links are 198.51.100.<4i>/30, their LANs 203.0.113.<16i>/28.
NODE_IP=${LAB_NODE_IP:-192.0.2.1}
# the lab's load balancer address: the lab plays the cloud's load balancer for Services of class
# lab.bnerd.net/static (lab-lb, started by cluster-up.sh: it writes this address into their
# status and forwards it from the machine to a ready endpoint, on any node)
LB_IP=192.0.2.2
LB_CLASS=lab.bnerd.net/static
POD_CIDR=100.96.0.0/24
SERVICE_CIDR=100.97.0.0/16
KUBERNETES_SVC_IP=100.97.0.1
API_PORT=6443
ETCD_PORT=23790
CGROUP_ROOT=/bnerd-lab
BRIDGE=labbr0
CONTAINERD_SOCK=$S/containerd/containerd.sock
KUBE_ROUTER_PORT=20244                      # kube-router's /healthz and /metrics, on 127.0.0.1
export KUBECONFIG=$S/pki/admin.kubeconfig
kubectl() { "$K/kubectl" --kubeconfig "$S/pki/admin.kubeconfig" "$@"; }   # built with kube (build-kube.sh)
ctr() { command ctr --address "$CONTAINERD_SOCK" "$@"; }
log() { echo "lab: $*" >&2; }
# lab_nft_tables: "<family> <name>" of every nft table the lab owns in this network namespace —
# any named bnerd-lab* or bnerd_lab* (the lab's own), kube-proxy's, and the host-network
# gateway's — so a sweep also finds one an interrupted or older run left behind
lab_nft_tables() {
  nft list tables 2>/dev/null | awk '$3 ~ /^(bnerd-lab|bnerd_lab|kube-proxy$|bnerd_vpn$|bnerd_vpn_gate$)/ {print $2, $3}'
}
start() { # start <name> <cmd...>: in the background, logging to $S/logs/<name>.log, pid recorded
  local n=$1; shift
  setsid "$@" >>"$S/logs/$n.log" 2>&1 </dev/null &
  echo "$n $!" >>"$S/pids"
}
wait_for() { # wait_for <what> <seconds> <cmd...>: poll until the command succeeds
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then log "timed out waiting for $what"; return 1; fi
    sleep 0.3
  done
}
# site addresses: site_link_host <i> (node side), site_link_site <i>, site_lan <i> (/28), site_host <i>
site_link_host() { echo "198.51.100.$((4 * $1 + 1))"; }
site_link_site() { echo "198.51.100.$((4 * $1 + 2))"; }
site_lan() { echo "203.0.113.$((16 * $1))/28"; }
site_host() { echo "203.0.113.$((16 * $1 + 1))"; }
# site_netns <name> <i>: the site's network namespace lab-site-<name>, its uplink to the node
# (veth lab-s<i>, 198.51.100.<4i>/30) and its LAN host on lo (the kernel has no dummy module).
site_netns() {
  local n=$1 i=$2 ns="lab-site-$1" link="lab-s$2"   # link names: 15 characters at most
  mkdir -p "$S/sites/$n"
  ip netns del "$ns" 2>/dev/null || true
  ip netns add "$ns"
  ip link del "$link" 2>/dev/null || true
  ip link add "$link" type veth peer name eth0 netns "$ns"
  ip addr add "$(site_link_host "$i")/30" dev "$link"; ip link set "$link" up
  # the node answers (and initiates) from its own address, as seen from a real client site
  ip route replace "198.51.100.$((4 * i))/30" dev "$link" proto kernel scope link src "$NODE_IP"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$(site_link_site "$i")/30" dev eth0; ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$(site_link_host "$i")"
  ip -n "$ns" addr add "$(site_host "$i")/32" dev lo
}
# site_charon <name> <netns>: the IPsec site's daemon — charon-systemd (kernel-libipsec) in
# <netns> with $S/sites/<name>/swanctl/swanctl.conf loaded (site.sh writes it from peer-config;
# the e2e's cutover site and "VM" bring their own). The image's strongswan.conf, with its own
# socket and quick IKE retransmits (a restarted gateway is found again within seconds, not
# minutes), and without the gateway's fwmark (a site's own traffic takes its routes into the
# tunnel unmarked).
site_charon() {
  local n=$1 ns=$2 d="$S/sites/$1"
  for sub in x509 x509ca x509ocsp x509aa x509ac x509crl pubkey private rsa ecdsa bliss pkcs8 pkcs12; do mkdir -p "$d/swanctl/$sub"; done
  sed -e "s#/run/strongswan/charon.vici#$d/charon.vici#" \
      -e "/^ *fwmark = /d" \
      -e "s#^  install_routes = yes#  install_routes = yes\n  retransmit_timeout = 1\n  retransmit_base = 1.2\n  retransmit_tries = 3#" \
      "$root/hack/lab/image/strongswan.conf" >"$d/strongswan.conf"
  STRONGSWAN_CONF="$d/strongswan.conf" setsid ip netns exec "$ns" /usr/sbin/charon-systemd >"$S/logs/site-$n.log" 2>&1 </dev/null &
  echo "site-$n $!" >>"$S/pids"
  wait_for "charon of site $n" 20 test -S "$d/charon.vici"
  STRONGSWAN_CONF="$d/strongswan.conf" swanctl --load-all --file "$d/swanctl/swanctl.conf" >/dev/null
}
# The "service cluster": a second cluster plumbed into the transit fabric, played by a network
# namespace behind the node (lab-site-svc, so cluster-down.sh removes it with the sites; its
# uplink lab-s50, 198.51.100.200/30, and the node's route to its range go with the veth). Its
# range 203.0.113.160/28 (site index 10's LAN, no site uses it) holds one host on lo; the
# ClusterLink lab-service-cluster {cidrs: [SVC_RANGE], via: SVC_VIA} links it (service-cluster.sh).
SVC_NETNS=lab-site-svc
SVC_LINK=lab-s50
SVC_NODE_SIDE=198.51.100.201
SVC_VIA=198.51.100.202
SVC_RANGE=203.0.113.160/28
SVC_HOST=203.0.113.161
# WireGuard sites: the device name (unique on the machine: wireguard-go's UAPI socket is shared)
# and the site's key pair (private key in the site's folder; prints the public key).
site_wireguard_dev() { echo "labwg-$1" | cut -c1-15; }
site_wireguard_key() {
  local d="$S/sites/$1"; mkdir -p "$d"
  [ -f "$d/private.key" ] || (umask 077; wg genkey >"$d/private.key")
  wg pubkey <"$d/private.key"
}
# The lab's cloud (hack/lab/cloud.sh, lab-cloud): the in-repo Neutron/Keystone on the node's
# address and its L3 and L2 agents programming the router namespace $CLOUD_NS, which sits
# between the node (client link: the sites reach the floating IPs through the node, which
# routes them to the router) and the provider network: the bridge $CLOUD_PROVIDER_BRIDGE there
# (the router's provider link, with the router's gateway address and MAC $CLOUD_ROUTER_MAC) is
# the network's switch, every VM's NIC a veth whose router end tap<port ID> is plugged into it,
# with Neutron's port security. Each node is such a VM: its NIC $CLOUD_PROVIDER_LINK (on the
# machine for node 1, in its namespace for the others), its port a trunk's parent, and the
# NAD master of the gateways' net1. CGNAT ranges of its own: provider network 100.100.0.0/24
# (router .1), floating IPs 100.101.0.0/24, client link 100.102.0.0/30.
CLOUD_NS=lab-cloud
CLOUD_PROVIDER_BRIDGE=provider
CLOUD_ROUTER_MAC=02:00:64:64:00:01
CLOUD_PROVIDER_LINK=lab-cprov
CLOUD_CLIENT_LINK=lab-cclient
CLOUD_CLIENT_NODE=100.102.0.1
CLOUD_CLIENT_ROUTER=100.102.0.2
CLOUD_PROVIDER_CIDR=100.100.0.0/24
CLOUD_FIP_CIDR=100.101.0.0/24
CLOUD_API_PORT=9696
CLOUD_ADMIN=127.0.0.1:9697
CLOUD_DIR=$S/cloud                          # clouds.yaml (0600) and networks.json
CNI_BIN=$S/cni/bin                          # containerd's CNI bin dir: Debian's plugins + lab-cloud
# sysctls the cluster (kubelet, CNI, kube-proxy) and the lab change; recorded at up, restored at down.
SYSCTLS="vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.ipv4.conf.all.forwarding net.bridge.bridge-nf-call-iptables"
# site_ensure <site>: like a client's device that keeps trying, initiate the site's tunnel when it
# has no established CHILD_SA (a device that met a gateway without its config gave up).
site_ensure() {
  local c="$S/sites/$1/strongswan.conf"
  STRONGSWAN_CONF=$c swanctl --list-sas 2>/dev/null | grep -q 'INSTALLED' && return 0
  STRONGSWAN_CONF=$c timeout 15 swanctl --initiate --child "$(cat "$S/sites/$1/child")" --timeout 10 >/dev/null 2>&1
}
# site_device_config <peer> <format>: the client device's configuration for the VPNPeer, as an
# engineer hands it over (kubectl vpn peer-config, the PSK included).
site_device_config() {
  "$root/bin/kubectl-vpn" peer-config "$1" -n "$LAB_NS" --format "$2" --include-secrets
}
# lab_ipsec_peer <name> <index> <psk> <exposures>: the PSK Secret and VPNPeer (of the gateway
# acme-gw in $LAB_NS) for the IPsec site <name>, its device's address and LAN from its index, as
# YAML for kubectl apply.
lab_ipsec_peer() {
  cat <<YAML
---
apiVersion: v1
kind: Secret
metadata: {name: $1-psk, namespace: $LAB_NS}
stringData: {psk: "$3"}
---
apiVersion: vpn.bnerd.net/v1alpha1
kind: VPNPeer
metadata: {name: $1, namespace: $LAB_NS}
spec:
  gatewayRef: acme-gw
  ipsec:
    peer: {address: $(site_link_site "$2"), id: $1.acme.example}
    remoteSubnets: [$(site_lan "$2")]
    esp: {proposals: [aes256gcm16-ecp256]}
    pskSecretRef: {name: $1-psk, key: psk}
  authorization: {exposures: [$4]}
YAML
}
source "$root/hack/lab/cloud.sh"           # the lab's cloud (lab-cloud): its functions
source "$root/hack/lab/nodes.sh"           # the lab's nodes: their namespaces, daemons and addresses
