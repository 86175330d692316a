# syntax=docker/dockerfile:1
# The controller image. A release build on the official Rust image, copied onto distroless
# (glibc and CA certificates, no shell, no package manager) and run as UID 65532, the user the
# Helm chart's securityContext expects. The entrypoint is the controller, so the chart passes
# only environment variables, as it does for upstream Karpenter's image.
#
#   docker build -t ghcr.io/OWNER/karpenter-rs:0.1.0 --build-arg KARPENTER_RS_COMMIT=$(git rev-parse --short HEAD) .

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# Reported by the karpenter_build_info metric.
ARG KARPENTER_RS_COMMIT=unknown
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    KARPENTER_RS_COMMIT="${KARPENTER_RS_COMMIT}" cargo build --release --locked --bin karpenter-rs \
    && install -D -m 0755 target/release/karpenter-rs /out/karpenter-rs

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="karpenter-rs" \
      org.opencontainers.image.description="Kubernetes node lifecycle controller for Amazon EKS, a drop-in replacement for Karpenter v1" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/karpenter-rs /usr/local/bin/karpenter-rs
USER 65532:65532
# METRICS_PORT and HEALTH_PROBE_PORT defaults.
EXPOSE 8080 8081
ENTRYPOINT ["karpenter-rs", "run"]
