# The update-operator image for Docker users (one registry: Docker Hub's rust image builds it; the
# result is FROM scratch). Without a container engine, `make image` writes the same layout as an OCI
# archive. Build with
#   docker build -t ghcr.io/update-operator/update-operator:0.1.0 .
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# A static binary (glibc's static libraries), so that the image needs no base.
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --bin update-operator \
 && printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' > /passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /passwd /etc/passwd
COPY --from=build /group /etc/group
COPY --from=build /src/target/x86_64-unknown-linux-gnu/release/update-operator /usr/local/bin/update-operator
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# The command backend's manifest runs the agent as root (runAsUser: 0); everything else as 65532.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/update-operator"]
