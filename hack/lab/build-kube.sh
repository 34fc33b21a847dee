#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl as one
# binary (hack/tools/kube/cmd/kube, dispatching on its program name) from the Go module proxy,
# cached as bin/k8s/<version>/kube (+ one symlink per component; envtest uses its kube-apiserver,
# see hack/test-binaries.sh). Rebuilds only when the tool module changes.
# Static and -trimpath (CGO_ENABLED=0, as Kubernetes' own release builds), the configuration the
# project's tests and images are built in: the standard library and the Kubernetes libraries
# both use (hack/tools/kube/go.mod pins the versions go.mod selects) are compiled once.
# Cold: ~9 min on 2 cores; warm Go cache: ~25 s. Prints the directory.
#
# `build-kube.sh apiserver` provides only kube-apiserver (what envtest runs): a link to the
# combined binary when it is built, else the API server alone (cmd/kube-apiserver), whose
# compiled packages the combined build then reuses.
set -euo pipefail
source "$(dirname "$0")/common.sh"
mkdir -p "$K"
# One build at a time: make test builds Kubernetes while the tests run, and the tests that
# need the API server wait here for that build instead of starting their own.
exec 9>"$K/.build.lock"
flock 9
stamp=$( (cat "$root/hack/tools/kube/go.mod" "$root/hack/tools/kube/go.sum" "$root/hack/tools/kube/cmd/kube/main.go" "$root/hack/tools/kube/cmd/kube-apiserver/main.go" "$0"; go version) | sha256sum | cut -c1-16)
minor=$(echo "$version" | cut -d. -f2)
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
current() { [ -x "$K/$1" ] && [ "$(cat "$K/$1.stamp" 2>/dev/null)" = "$stamp" ]; }
if [ "${1:-}" = apiserver ]; then
  if current kube; then
    [ "$(readlink "$K/kube-apiserver" 2>/dev/null)" = kube ] || ln -sfn kube "$K/kube-apiserver"
  elif [ -L "$K/kube-apiserver" ] || ! current kube-apiserver; then
    log "building kube-apiserver $version (alone: the other components come later)"
    (cd "$root/hack/tools/kube" && CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$K/kube-apiserver.tmp" ./cmd/kube-apiserver)
    mv -T "$K/kube-apiserver.tmp" "$K/kube-apiserver"
    echo "$stamp" >"$K/kube-apiserver.stamp"
  fi
  [ -e "$K/etcd" ] || ln -s "$(command -v etcd || echo /usr/bin/etcd)" "$K/etcd"
  echo "$K"
  exit 0
fi
if ! current kube; then
  log "building kube $version (all five components; cold ~9 min on 2 cores)"
  (cd "$root/hack/tools/kube" && CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$K/kube.tmp" ./cmd/kube)
  mv "$K/kube.tmp" "$K/kube"
  echo "$stamp" >"$K/kube.stamp"
fi
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  [ "$(readlink "$K/$c" 2>/dev/null)" = kube ] || ln -sfn kube "$K/$c"
done
[ -e "$K/etcd" ] || ln -s "$(command -v etcd || echo /usr/bin/etcd)" "$K/etcd"
echo "$K"
