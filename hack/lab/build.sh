#!/usr/bin/env bash
# Builds everything the lab runs, each cached so a second run builds nothing: Kubernetes
# (build-kube.sh, bin/k8s), kube-router and helm (kube-router.sh, helm.sh, bin/tools; built
# beside Kubernetes), the site's wireguard-go and the lab's CNI plugins lab-cloud and
# lab-sourceguard and its load balancer lab-lb (bin/lab), kubectl-vpn (bin/), the images (build-images.sh, bin/images) and
# the cluster e2e's test binary (into the Go build cache only). cluster-up.sh runs it first; make test runs it while the
# tests run, so the cluster e2e starts with everything built. Prints kube-router's path last.
set -euo pipefail
source "$(dirname "$0")/common.sh"

kr_log=$(mktemp)
helm_log=$(mktemp)
trap 'rm -f "$kr_log" "$helm_log"' EXIT
"$root/hack/lab/kube-router.sh" >"$kr_log" 2>&1 &
kr_build=$!
# helm (hack/helm.sh) installs the operator into the lab; the chart's tests wait for this build
"$root/hack/helm.sh" >"$helm_log" 2>&1 &
helm_build=$!

"$root/hack/lab/build-kube.sh" >/dev/null
mkdir -p "$root/bin/lab"
cd "$root"
# Static and -trimpath, as the images' binaries are built (build-images.sh): the packages they
# share are compiled once.
static() { CGO_ENABLED=0 go "$1" -trimpath "${@:2}"; }
"$root/hack/lab/build-images.sh" >/dev/null
# the WireGuard client site's daemon: the version the gateway agent embeds (go.mod)
static build -o bin/lab/wireguard-go golang.zx2c4.com/wireguard
static build -o bin/lab/lab-cloud ./cmd/lab-cloud
static build -o bin/lab/lab-sourceguard ./cmd/lab-sourceguard
static build -o bin/lab/lab-lb ./cmd/lab-lb
# kubectl vpn: the lab configures its client sites from its peer-config
static build -o bin/kubectl-vpn ./cmd/kubectl-vpn
# the cluster e2e's test binary, built as make e2e-cluster builds it: into the Go build cache
static test -c -o /dev/null ./test/cluster

if ! wait "$helm_build"; then cat "$helm_log" >&2; log "building helm failed"; exit 1; fi
if ! wait "$kr_build"; then cat "$kr_log" >&2; log "building kube-router failed"; exit 1; fi
tail -1 "$kr_log"
