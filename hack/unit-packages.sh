#!/usr/bin/env bash
# Prints the packages whose tests need neither root nor a Kubernetes API server nor a tool
# the repository builds (helm): what `make unit` runs. A package is left out when its tests
# import the harnesses of network namespaces, charon, WireGuard sites, the VM or envtest, or
# are the chart's, the docs' or the tool table's (they build or load what is slow to get).
set -euo pipefail
cd "$(dirname "$0")/.."
module=$(go list -m)
slow="$module/internal/testing/(testenv|netns|charontest|wgtest|vmtest)|sigs.k8s.io/controller-runtime/pkg/envtest"
go list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... |
  awk -v slow="$slow" -v m="$module" '
    # test variants only ("pkg [pkg.test]" and "pkg_test [pkg.test]"), named by their package
    $2 !~ /^\[/ { next }
    {
      pkg = $1
      sub(/_test$/, "", pkg)
      bad = 0
      for (i = 3; i <= NF; i++) if ($i ~ "^(" slow ")$") { bad = 1; break }
      if (pkg ~ "^" m "/(charts|docs|hack|test/|internal/testing/(netns|vmtest|charontest|wgtest|testenv))") bad = 1
      if (bad) slowpkg[pkg] = 1; else fast[pkg] = 1
    }
    END { for (p in fast) if (!(p in slowpkg)) print p }' | sort
