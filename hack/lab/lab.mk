# The lab: a real Kubernetes of $LAB_NODES nodes (default 3) with the operator and a client's sites (hack/lab/).
# Included from the Makefile. Needs root (CI and the lab run as root).

LAB_STATE ?= /var/lib/bnerd-lab
export LAB_STATE

.PHONY: lab lab-down lab-cluster lab-images e2e-cluster

lab: ## a three-node cluster (LAB_NODES) + operator + sample client (IPsec and WireGuard sites); status and a live tunnel
	@LAB_T0=$$(date +%s.%N); export LAB_T0; \
	  hack/lab/cluster-up.sh && hack/lab/lab.sh

lab-down: ## remove everything `make lab` created (processes, cgroups, mounts, netns, sysctls)
	@hack/lab/cluster-down.sh

lab-cluster: ## only the cluster (KUBECONFIG=$(LAB_STATE)/pki/admin.kubeconfig)
	@hack/lab/cluster-up.sh

lab-images: ## build the OCI image archives into bin/images
	@hack/lab/build-images.sh

# The suite is built static and -trimpath, as the images' binaries are (packages compiled once).
# The suite's output is long and a CI log keeps only its tail: on failure the failed steps' own
# lines are printed again, last (hack/failed-tests).
e2e-cluster: ## a fresh lab, the cluster end-to-end suite (test/cluster, Go), torn down afterwards
	@hack/lab/cluster-down.sh >/dev/null 2>&1 || true
	@mkdir -p $(BIN); log=$(BIN)/e2e-cluster.log; rm -f $$log; rc=0; \
	  LAB_T0=$$(date +%s.%N) hack/lab/cluster-up.sh || rc=$$?; \
	  if [ $$rc = 0 ]; then \
	    set -o pipefail; BNERD_LAB=1 CGO_ENABLED=0 go test -trimpath -count=1 -v -timeout 35m ./test/cluster/ 2>&1 | tee $$log || rc=$$?; \
	  fi; \
	  hack/lab/cluster-down.sh; \
	  if [ $$rc != 0 ] && [ -s $$log ]; then \
	    echo "=== the failed steps' output again (full log: $$log) ==="; go run ./hack/failed-tests < $$log; \
	  fi; exit $$rc
