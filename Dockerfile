# The update-operator image for Docker users (one registry: Docker Hub's rust image builds it; the
# result is FROM scratch). Without a container engine, `make image` writes the same layout as an OCI
# archive, for amd64 and arm64. Build with
#   docker build -t ghcr.io/update-operator/update-operator:0.1.0 .
# or both platforms (each built natively, the other under emulation):
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/update-operator/update-operator:0.1.0 .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# A static binary (glibc's static libraries) for the build platform's architecture, so that the image needs
# no base.
RUN target="$(uname -m)-unknown-linux-gnu" \
 && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$target" --bin update-operator \
 && cp "target/$target/release/update-operator" /update-operator \
 && printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' > /passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /passwd /etc/passwd
COPY --from=build /group /etc/group
COPY --from=build /update-operator /usr/local/bin/update-operator
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# The command backend's manifest runs the agent as root (runAsUser: 0); everything else as 65532.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/update-operator"]
