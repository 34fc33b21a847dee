# Shared settings of the lab scripts (sourced).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
S=${LAB_STATE:-/var/lib/bnerd-lab}          # everything the lab creates lives here
version=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$root/hack/tools/kube/go.mod")
K="$root/bin/k8s/$version"                  # kube binaries (combined "kube" + symlinks)
NODE=lab-node
NODE_IP=${LAB_NODE_IP:-$(ip -4 route get 1.1.1.1 | awk '{for(i=1;i<NF;i++) if($i=="src") {print $(i+1); exit}}')}
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
API_PORT=6443
ETCD_PORT=23790
CGROUP_ROOT=/bnerd-lab
BRIDGE=labbr0
CONTAINERD_SOCK=$S/containerd/containerd.sock
export KUBECONFIG=$S/pki/admin.kubeconfig
kubectl() { command kubectl --kubeconfig "$S/pki/admin.kubeconfig" "$@"; }
ctr() { command ctr --address "$CONTAINERD_SOCK" "$@"; }
log() { echo "lab: $*" >&2; }
# sysctls the cluster (kubelet, CNI, kube-proxy) and the lab change; recorded at up, restored at down.
SYSCTLS="vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.ipv4.conf.all.forwarding"
# site_ensure <site>: like a client's device that keeps trying, initiate the site's tunnel when it
# has no established CHILD_SA (a device that met a gateway without its config gave up).
site_ensure() {
  local c="$S/sites/$1/strongswan.conf"
  STRONGSWAN_CONF=$c swanctl --list-sas 2>/dev/null | grep -q 'INSTALLED' && return 0
  STRONGSWAN_CONF=$c timeout 15 swanctl --initiate --child net --timeout 10 >/dev/null 2>&1
}
