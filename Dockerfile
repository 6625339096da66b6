# The update-operator image used by deploy/update-operator.yaml. Build it with
#   docker build -t ghcr.io/update-operator/update-operator:0.1.0 .
# (not built by CI here: this machine has no container engine).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin update-operator

# The agent reaches the host through the Bottlerocket API socket or, with the command backend,
# through nsenter; the command backend's image needs util-linux (nsenter) added.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/update-operator /usr/local/bin/update-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/update-operator"]
