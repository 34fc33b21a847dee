#!/usr/bin/env bash
# test-packages.sh GROUP: prints the packages of one group of tests, one per line.
#   apiserver  the packages whose tests start a Kubernetes API server (they import envtest or
#              internal/testing/testenv): they need hack/test-binaries.sh's kube-apiserver
#   other      every other package: make test runs them while Kubernetes is still being built
#   unit       the packages whose tests need neither root nor an API server nor a tool the
#              repository builds (helm): what `make unit` runs. A package is left out when its
#              tests import the harnesses of network namespaces, charon, WireGuard sites, the VM
#              or envtest, or are the chart's, the docs' or the tool table's (they build or load
#              what is slow to get).
set -euo pipefail
cd "$(dirname "$0")/.."
group=${1:?usage: test-packages.sh apiserver|other|unit}
module=$(go list -m)
case $group in
  apiserver | other) slow="$module/internal/testing/testenv|sigs.k8s.io/controller-runtime/pkg/envtest"; slowdirs='^$' ;;
  unit)
    slow="$module/internal/testing/(testenv|netns|charontest|wgtest|vmtest)|sigs.k8s.io/controller-runtime/pkg/envtest"
    slowdirs="^$module/(charts|docs|hack|test/|internal/testing/(netns|vmtest|charontest|wgtest|testenv))" ;;
  *) echo "test-packages.sh: unknown group $group (apiserver, other or unit)" >&2; exit 2 ;;
esac
want=fast; [ "$group" = apiserver ] && want=slow
# The packages with tests, from their test variants ("pkg [pkg.test]", "pkg_test [pkg.test]")
# and those variants' dependencies: a package is slow when one of its variants depends on a
# slow package.
go list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... |
  awk -v slow="$slow" -v slowdirs="$slowdirs" -v want="$want" '
    $2 !~ /^\[/ { next }
    {
      pkg = $1
      sub(/_test$/, "", pkg)
      all[pkg] = 1
      bad = pkg ~ slowdirs
      for (i = 3; i <= NF && !bad; i++) if ($i ~ "^(" slow ")$") bad = 1
      if (bad) slowpkg[pkg] = 1
    }
    END { for (p in all) if ((p in slowpkg) == (want == "slow")) print p }' | sort
