# bnerd-vpn-operator. `make help` lists the targets.
SHELL := /usr/bin/env bash
CONTROLLER_GEN_VERSION := v0.23.0
BIN := $(CURDIR)/bin
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
# The version the binaries report (--version, bnerd_vpn_build_info) and `make images` tags.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/bnerd/bnerd-vpn-operator/internal/version.Version=$(VERSION)
export VERSION

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)/tmp-cg && GOBIN=$(BIN)/tmp-cg $(STATIC) go install $(TRIM) sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	@mv $(BIN)/tmp-cg/controller-gen $@ && rmdir $(BIN)/tmp-cg

.PHONY: generate
generate: $(CONTROLLER_GEN) ## regenerate deepcopy, CRDs and RBAC (committed)
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=bnerd-vpn-operator paths=./internal/controller/... output:rbac:artifacts:config=config/rbac
	@hack/sync-chart.sh
	@hack/gen-crd-docs.sh

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## fail when generated files are stale
	@hack/verify-generated.sh

.PHONY: build
build: ## build the binaries into bin/
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

.PHONY: kubectl-vpn
kubectl-vpn: ## build the kubectl plugin into bin/kubectl-vpn (with bin/ on PATH: kubectl vpn ...)
	go build -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-vpn ./cmd/kubectl-vpn

.PHONY: images
images: ## build the operator and gateway images as OCI archives in bin/images, tagged $(VERSION)
	@IMAGE_TAG=$(VERSION) hack/lab/build-images.sh

.PHONY: images-reproducible
images-reproducible: ## build the images twice (the second time uncached) and fail unless the digests match
	@hack/images-reproducible.sh

# The one build configuration of make test: static and -trimpath, as the images, the lab's
# programs and the VM tests are built, so every package is compiled once (go vet, go test and
# the builds share the build cache).
STATIC := CGO_ENABLED=0
TRIM := -trimpath

.PHONY: lint
lint: ## go vet, gofmt and golangci-lint (.golangci.yml: the packages' layering, a complexity cap)
	$(STATIC) go vet $(TRIM) ./...
	$(STATIC) $$(hack/golangci-lint.sh) run ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: test-race
test-race: test-deps test-binaries ## go test -race ./... (make test runs the same tests without the race detector: see docs/development.md)
	KUBEBUILDER_ASSETS=$$(hack/test-binaries.sh) go test -race -count=1 -timeout 45m ./...

.PHONY: unit
unit: ## the tests that need neither root, nor an API server, nor a tool the repository builds (hack/test-packages.sh unit): quick
	$(STATIC) go test $(TRIM) $$(hack/test-packages.sh unit)

.PHONY: test-binaries
test-binaries: ## install etcd and build Kubernetes (kube-apiserver for envtest; cached in bin/)
	@hack/test-binaries.sh >/dev/null

.PHONY: test-deps
test-deps: ## install the Debian packages the tests use (nftables, iproute2, ...)
	@hack/install-test-deps.sh

.PHONY: test
test: ## the whole test suite (what CI runs), in timed stages: generated files, lint, go test, the VM, images, the cluster end-to-end (hack/test.sh)
	@hack/test.sh

.PHONY: bench
bench: test-deps test-binaries ## benchmarks, printing figures (the VM's too when its kit is built: make vm-kit)
	BNERD_VMTEST=1 KUBEBUILDER_ASSETS=$$(hack/test-binaries.sh) go test -run '^$$' -bench . -benchtime 1x -timeout 30m ./...

.PHONY: vm-kit
vm-kit: ## build the VM tests' kit once (Debian's kernel and modules, initramfs; cached in bin/vm) and install qemu
	@hack/vm/kit.sh >/dev/null

.PHONY: test-vm
test-vm: test-deps vm-kit ## the tests that need a real kernel dataplane (XFRM, kernel WireGuard, 802.1Q VLANs), in a qemu VM
	BNERD_VMTEST=1 $(STATIC) go test $(TRIM) -count=1 -v -timeout 15m ./internal/testing/vmtest
	BNERD_VMTEST=1 $(STATIC) go test $(TRIM) -count=1 -v -timeout 15m -run '^TestSwitchInVM$$' ./internal/lab/labcloud

# make lab, lab-down, e2e-cluster: a real cluster of LAB_NODES nodes on this machine (hack/lab/).
include hack/lab/lab.mk
