# Developer entry points. Every target works on a machine with a Rust toolchain.
CARGO ?= cargo

.PHONY: build test fmt lint manifests demo bench

## build: the update-operator binary (release)
build:
	$(CARGO) build --release --locked --bin update-operator

## test: every test of the workspace (what CI runs)
test:
	$(CARGO) test --workspace --locked

## fmt: format the code
fmt:
	$(CARGO) fmt --all

## lint: formatting check and clippy with warnings as errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## manifests: regenerate deploy/crds/ and deploy/update-operator.yaml from the Rust types
manifests:
	$(CARGO) run --quiet --locked -p shared --example crdgen -- deploy

## demo: watch a simulated rollout (ARGS="--fail-update worker-3" for a failure path)
demo:
	$(CARGO) run --release --locked -p dev --bin demo -- $(ARGS)

## bench: the rollout benchmark, 1000 nodes (ARGS="--nodes 5000" for other sizes); prints JSON
bench:
	$(CARGO) build --release --locked --bin update-operator
	$(CARGO) build --release --locked -p dev --bin bench
	./target/release/bench --binary ./target/release/update-operator $(ARGS)
