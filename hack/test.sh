#!/usr/bin/env bash
# `make test`: the whole suite, as CI runs it, in timed stages (hack/stage.sh). The Debian
# packages and the VM kit are installed in the background while the generated files and lint
# are checked and the Kubernetes API server is built; every later stage waits for them. One
# build configuration throughout (static, -trimpath: the Makefile's STATIC and TRIM, as the
# images and Kubernetes are built), so go vet, go test, Kubernetes and the lab's builds compile
# each shared package once: the API server is built after lint for that reason, from what lint
# compiled. The race detector runs in make test-race. What the lab cluster runs is built while
# the tests run. Missing tools fail the tests instead of skipping them (BNERD_REQUIRE_TOOLS=1).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/bin
mkdir -p "$bin"
export STAGE_TIMES=$bin/stage-times
rm -f "$STAGE_TIMES"
make=(make --no-print-directory)

summary() {
  echo "=== stage times (s):"
  cat "$STAGE_TIMES" 2>/dev/null
}

prep_log=$bin/prepare.log
hack/stage.sh prepare bash -c 'hack/install-test-deps.sh && hack/vm/kit.sh >/dev/null' >"$prep_log" 2>&1 &
prep=$!
# golangci-lint (make lint runs it after go vet): built beside the generated files' check
hack/golangci-lint.sh >"$bin/golangci-lint.log" 2>&1 &

rc=0
hack/stage.sh verify-generated "${make[@]}" verify-generated &&
  hack/stage.sh lint "${make[@]}" lint &&
  hack/stage.sh kube-apiserver bash -c 'hack/lab/build-kube.sh apiserver >/dev/null' || rc=$?
wait "$prep" || { prc=$?; [ $rc != 0 ] || rc=$prc; }
cat "$prep_log"
[ $rc != 0 ] || hack/test-binaries.sh >/dev/null || rc=$?
if [ $rc != 0 ]; then summary; exit $rc; fi

# What the lab runs (the rest of Kubernetes: the API server is built; kube-router, the
# images, ...: hack/lab/build.sh), then the images' reproducibility check, are built while the
# tests run, which wait on timers and packets more than on the CPU: only e2e-cluster needs them.
lab_log=$bin/build-lab.log
(hack/stage.sh build-lab hack/lab/build.sh && hack/stage.sh images-reproducible "${make[@]}" images-reproducible) >"$lab_log" 2>&1 &
lab=$!
lab_built() { wait "$lab"; local r=$?; cat "$lab_log"; return $r; }

export BNERD_REQUIRE_TOOLS=1
hack/stage.sh go-test env KUBEBUILDER_ASSETS="$(hack/test-binaries.sh)" CGO_ENABLED=0 go test -trimpath -count=1 -timeout 30m ./... &&
  hack/stage.sh test-vm "${make[@]}" test-vm &&
  lab_built &&
  hack/stage.sh e2e-cluster "${make[@]}" e2e-cluster || rc=$?
wait "$lab" 2>/dev/null
summary
exit $rc
