# Developer entry points. The build, test, image and dev-* targets work on a machine with a Rust
# toolchain (dev-rollout and get-nodes-status also need kubectl and jq); the kind-* targets need kind
# and a container engine.
CARGO ?= cargo
KUBECTL ?= kubectl
KIND ?= kind
JQ ?= jq
# jq's colours (`watch -c` shows them); empty for plain JSON.
JQ_COLOR ?= -C
# The image `make image` writes and `make kind-load` loads (dev/kustomization.yaml runs update-operator:dev).
IMAGE ?= ghcr.io/update-operator/update-operator:0.1.0
IMAGE_ARCHIVE ?= target/update-operator-image.tar
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
# The static binary: glibc's static libraries on the gnu target.
TARGET ?= x86_64-unknown-linux-gnu
# Static, and its relative relocations packed (DT_RELR, `-z pack-relative-relocs`: GNU ld 2.38+, glibc 2.36+): the
# x86_64 binary is a static PIE, which relocates itself at start; its 725 KB `.rela.dyn` table, read whole at every
# start, becomes an 8 KB `.relr.dyn`, and each agent's peak RSS 0.8 MiB lower (docs/performance.md). The arm64
# binary is a static non-PIE executable (the Rust target has no static PIE), with nothing to pack. The x86_64 binary
# is also linked in the agent's code order (static-binary): Rust 1.90+ links it with lld, which takes
# --symbol-ordering-file; the arm64 one is linked by GNU ld (gcc-aarch64-linux-gnu), in the compiler's order.
STATIC_RUSTFLAGS ?= -C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs
# The image's second platform, cross-compiled: Debian's gcc-aarch64-linux-gnu links it (and compiles ring's C
# code) against libc6-dev-arm64-cross's static glibc; `rustup target add aarch64-unknown-linux-gnu` first.
ARM64_TARGET ?= aarch64-unknown-linux-gnu
ARM64_CC ?= aarch64-linux-gnu-gcc
# IMAGE_ARM64=no: `make image` packs the $(TARGET) binary alone (what `make kind-load` does: a local kind cluster
# runs on the build machine, which then needs no cross compiler).
IMAGE_ARM64 ?= yes
ifeq ($(IMAGE_ARM64),yes)
ARM64_PLATFORM = --platform arm64=target/$(ARM64_TARGET)/release/update-operator
endif
KIND_CLUSTER ?= update-operator-dev
KIND_IMAGE ?= update-operator:dev
# make dev-rollout: the update-operator binary it runs, and where it keeps pids and logs.
UPDATE_OPERATOR ?= target/release/update-operator
DEV_ROLLOUT_DIR ?= target/dev-rollout
# make dev-rollout ROLLOUT_IMAGE=v2: the spec.image it sets on the NodeVersion (default: the example's).
ROLLOUT_IMAGE ?=

.PHONY: build test fmt lint manifests demo static-binary bench image kind-cluster kind-load deploy-dev kind-rollout \
	get-nodes-status watch-nodes-status dev-cluster dev-rollout dev-rollout-stop

## build: the update-operator binary (release)
build:
	$(CARGO) build --release --locked --bin update-operator

## test: every test of the workspace, every cloud provider included (what CI runs)
test:
	$(CARGO) test --workspace --all-features --locked

## fmt: format the code
fmt:
	$(CARGO) fmt --all

## lint: formatting check and clippy with warnings as errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --all-features --locked -- -D warnings

## manifests: regenerate deploy/crds/ and deploy/update-operator.yaml from the Rust types
manifests:
	$(CARGO) run --quiet --locked -p shared --example crdgen -- deploy

## demo: watch a simulated rollout (ARGS="--fail-update worker-3" for a failure path)
demo:
	$(CARGO) run --release --locked -p dev --bin demo -- $(ARGS)

## static-binary: the x86_64 binary the image ships and the bench runs: static, and linked twice so that the
## functions the agent runs lie together (tools/agent-order/README.md: the agent's peak RSS 9.3 -> 4.5 MiB)
static-binary:
	RUSTFLAGS="$(STATIC_RUSTFLAGS)" $(CARGO) rustc --release --locked --target $(TARGET) --bin update-operator \
		-- -C strip=none
	python3 tools/agent-order/resolve.py tools/agent-order/agent.order target/$(TARGET)/release/update-operator \
		> target/agent-order.resolved
	RUSTFLAGS="$(STATIC_RUSTFLAGS)" $(CARGO) rustc --release --locked --target $(TARGET) --bin update-operator \
		-- -C link-arg=-Wl,--symbol-ordering-file=$(CURDIR)/target/agent-order.resolved \
		-C link-arg=-Wl,--no-warn-symbol-ordering

## bench: the rollout benchmark, 1000 nodes (ARGS="--nodes 5000" for other sizes; ARGS="--nodes 0 --group-nodes 1000"
## for a replacement rollout through the simulated cloud); prints JSON.
## Its controller and agent processes run the binary the image ships (static, as `make image` builds it).
bench: static-binary
	$(CARGO) build --profile harness --locked -p dev --bin bench
	./target/harness/bench --binary ./target/$(TARGET)/release/update-operator $(ARGS)

## image: the container image for amd64 and arm64 as an OCI archive holding an image index (kind load
## image-archive, skopeo copy --all, ctr import; docker load takes the amd64 image), no container engine
image: static-binary
ifeq ($(IMAGE_ARM64),yes)
	CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=$(ARM64_CC) CC_aarch64_unknown_linux_gnu=$(ARM64_CC) \
		RUSTFLAGS="$(STATIC_RUSTFLAGS)" \
		$(CARGO) build --release --locked --target $(ARM64_TARGET) --bin update-operator
endif
	$(CARGO) run --quiet --release --locked -p oci-image -- --platform amd64=target/$(TARGET)/release/update-operator \
		$(ARM64_PLATFORM) --ca-bundle $(CA_BUNDLE) --reference $(IMAGE) --output $(IMAGE_ARCHIVE)

## kind-cluster: a local kind cluster (dev/kind-cluster.yml: a control plane and two workers, opted in)
kind-cluster:
	$(KIND) create cluster --name $(KIND_CLUSTER) --config dev/kind-cluster.yml

## kind-load: build the image as $(KIND_IMAGE) and load it into the kind cluster
kind-load:
	$(MAKE) image IMAGE=$(KIND_IMAGE) IMAGE_ARM64=no
	$(KIND) load image-archive $(IMAGE_ARCHIVE) --name $(KIND_CLUSTER)

## deploy-dev: create or update the operator on the current cluster with the dev settings (dev/kustomization.yaml)
deploy-dev:
	$(KUBECTL) apply -k dev/

## kind-rollout: reload the image and the configuration, then restart the operator's pods
kind-rollout: kind-load deploy-dev
	$(KUBECTL) -n update-operator rollout restart deployment/update-operator-controller daemonset/update-operator-agent
	$(KUBECTL) -n update-operator rollout status deployment/update-operator-controller
	$(KUBECTL) -n update-operator rollout status daemonset/update-operator-agent

## get-nodes-status: each node's update.edgeless.systems annotations and labels, and whether it is cordoned
get-nodes-status:
	@$(KUBECTL) get nodes -o json | $(JQ) $(JQ_COLOR) -S -f dev/nodes-status.jq

## watch-nodes-status: get-nodes-status every 2 s (watch -c)
watch-nodes-status:
	watch -c -- $(MAKE) --no-print-directory get-nodes-status

## dev-cluster: the in-memory dev cluster in the foreground (6 nodes); prints its kubeconfig
dev-cluster:
	$(CARGO) run --release --locked -p dev --bin dev-cluster -- --nodes 6 --control-planes 1 $(ARGS)

## dev-rollout: build, (re)start the controller and agents as processes on the dev cluster, apply the NodeVersion
dev-rollout:
	$(CARGO) build --release --locked --bin update-operator
	UPDATE_OPERATOR=$(UPDATE_OPERATOR) DEV_ROLLOUT_DIR=$(DEV_ROLLOUT_DIR) KUBECTL=$(KUBECTL) ROLLOUT_IMAGE=$(ROLLOUT_IMAGE) \
		dev/dev-rollout.sh

## dev-rollout-stop: stop the processes dev-rollout started
dev-rollout-stop:
	DEV_ROLLOUT_DIR=$(DEV_ROLLOUT_DIR) dev/dev-rollout.sh stop
