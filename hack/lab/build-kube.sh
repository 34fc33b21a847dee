#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl as one
# binary (hack/tools/kube/cmd/kube, dispatching on its program name) from the Go module proxy,
# cached as bin/k8s/<version>/kube (+ one symlink per component; envtest uses its kube-apiserver,
# see hack/test-binaries.sh). Rebuilds only when the tool module changes.
# Cold: ~9 min on 2 cores; warm Go cache: ~25 s. Prints the directory.
set -euo pipefail
source "$(dirname "$0")/common.sh"
mkdir -p "$K"
stamp=$( (cat "$root/hack/tools/kube/go.mod" "$root/hack/tools/kube/go.sum" "$root/hack/tools/kube/cmd/kube/main.go" "$0"; go version) | sha256sum | cut -c1-16)
minor=$(echo "$version" | cut -d. -f2)
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
if [ ! -x "$K/kube" ] || [ "$(cat "$K/kube.stamp" 2>/dev/null)" != "$stamp" ]; then
  log "building kube $version (all five components; cold ~9 min on 2 cores)"
  (cd "$root/hack/tools/kube" && go build -trimpath -ldflags="$ldflags" -o "$K/kube.tmp" ./cmd/kube)
  mv "$K/kube.tmp" "$K/kube"
  echo "$stamp" >"$K/kube.stamp"
fi
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  [ "$(readlink "$K/$c" 2>/dev/null)" = kube ] || ln -sfn kube "$K/$c"
done
[ -e "$K/etcd" ] || ln -s "$(command -v etcd || echo /usr/bin/etcd)" "$K/etcd"
echo "$K"
