#!/usr/bin/env bash
# `make test`: the whole suite, as CI runs it, in timed stages (hack/stage.sh). One build
# configuration throughout (static, -trimpath: the Makefile's STATIC and TRIM, as the images
# and Kubernetes are built), so go vet, go test, Kubernetes and the lab's builds compile each
# shared package once. Missing tools fail the tests instead of skipping them
# (BNERD_REQUIRE_TOOLS=1). The race detector runs in make test-race.
#
# 1. The generated files' check, then lint (go vet compiles every package the tests import),
#    beside the Debian packages and the VM kit (installed in the background) and the build of
#    golangci-lint.
# 2. Two pipelines at once, as the machine is CPU-bound while building and mostly waits while
#    testing:
#    - the lab's, the longer one: Kubernetes (all its parts, reusing what lint compiled), the
#      rest of what the lab runs, the images' reproducibility, then the cluster end-to-end;
#    - the tests': go test of the packages that need no API server (at a lower priority while
#      Kubernetes builds: the lab's pipeline is the one that decides how long make test takes),
#      then of those that do (they wait for Kubernetes' API server), then the VM's tests.
#    Each pipeline runs its stages one after the other and stops at its first failure; the
#    lab's output is printed when it ends.
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
  hack/stage.sh lint "${make[@]}" lint || rc=$?
wait "$prep" || { prc=$?; [ $rc != 0 ] || rc=$prc; }
cat "$prep_log"
if [ $rc != 0 ]; then summary; exit $rc; fi

lab_log=$bin/lab-pipeline.log
(hack/stage.sh build-kube bash -c 'hack/lab/build-kube.sh >/dev/null' &&
  hack/stage.sh build-lab hack/lab/build.sh &&
  hack/stage.sh images-reproducible "${make[@]}" images-reproducible &&
  hack/stage.sh e2e-cluster "${make[@]}" e2e-cluster) >"$lab_log" 2>&1 &
lab=$!

export BNERD_REQUIRE_TOOLS=1
gotest=(env CGO_ENABLED=0 go test -trimpath -count=1 -timeout 30m)
# shellcheck disable=SC2016 # expanded by the stage's shell, after Kubernetes is built
with_apiserver='KUBEBUILDER_ASSETS=$(hack/test-binaries.sh) && export KUBEBUILDER_ASSETS && exec "$@"'
other=$(hack/test-packages.sh other) && apiserver=$(hack/test-packages.sh apiserver) || rc=$?
[ $rc != 0 ] ||
  # shellcheck disable=SC2086 # one word per package
  { hack/stage.sh go-test nice -n 5 "${gotest[@]}" $other &&
    hack/stage.sh go-test-apiserver bash -c "$with_apiserver" _ "${gotest[@]}" $apiserver &&
    hack/stage.sh test-vm "${make[@]}" test-vm; } || rc=$?

wait "$lab" || { lrc=$?; [ $rc != 0 ] || rc=$lrc; }
cat "$lab_log"
summary
exit $rc
