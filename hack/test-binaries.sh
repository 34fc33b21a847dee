#!/usr/bin/env bash
# Installs/builds the real Kubernetes parts the tests start, cached under bin/:
#   bin/k8s/<version>/kube-apiserver  -> kube, all five Kubernetes parts in one binary built from
#                                     the Go module proxy (hack/tools/kube, own module), or
#                                     the API server alone until that is built
#   bin/k8s/<version>/etcd            symlink to Debian's etcd-server
# Prints the directory to use as envtest's BinaryAssetsDirectory.
# Rebuilds only when the tool module changes. Needs root for apt on a fresh machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$root/hack/tools/kube/go.mod")
dir="$root/bin/k8s/$version"
mkdir -p "$dir"

log() { echo "test-binaries: $*" >&2; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then log "need root to apt-get install $*"; exit 1; fi
  if [ ! -f /tmp/.bnerd-apt-updated ]; then
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 && touch /tmp/.bnerd-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >&2
}

# etcd: Debian's etcd-server (3.4; works with kube-apiserver 1.37 under envtest).
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
  log "installing etcd-server"
  apt_install etcd-server
fi
ln -sf "$(command -v etcd || echo /usr/bin/etcd)" "$dir/etcd"

# kube-apiserver: the lab's combined Kubernetes binary when it is built (hack/lab/build-kube.sh,
# one build for envtest and the lab), else the API server alone; rebuilt once per tool-module
# change.
"$root/hack/lab/build-kube.sh" apiserver >/dev/null
echo "$dir"
