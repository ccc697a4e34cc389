# keepstate container image.
#
# Build stage: the Go toolchain builds one static binary (CGO off), so the
# runtime image needs no C library.
# Runtime stage: alpine with a fixed non-root user. Alpine rather than a
# distroless image because docker-compose health checks need a command inside
# the container (busybox wget) and `kubectl exec ... sh` helps when a volume
# needs inspecting; it adds a few MB. The numeric UID/GID (10001) let
# Kubernetes verify runAsNonRoot; k8s/base sets the same ids and fsGroup so
# the PersistentVolume at /data is writable.
#
# The data directory is /data (KEEPSTATE_DATA_DIR); mount a volume there.
# The API listens on :7001. The entrypoint is `keepstate run`; override the
# entrypoint for other subcommands (`keepstate reset`, `keepstate produce`).

ARG GO_VERSION=1.26
ARG ALPINE_VERSION=3.22

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first so that source changes keep the download layer cached.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# TestStaticBuild (deploytest/image_test.go) runs this same build command and
# checks that the result is statically linked.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/keepstate ./cmd/keepstate

FROM alpine:${ALPINE_VERSION}
RUN addgroup -S -g 10001 keepstate \
 && adduser -S -D -H -u 10001 -G keepstate -h /data keepstate \
 && mkdir -p /data \
 && chown 10001:10001 /data
COPY --from=build /out/keepstate /usr/local/bin/keepstate
USER 10001:10001
WORKDIR /data
ENV KEEPSTATE_DATA_DIR=/data \
    KEEPSTATE_HTTP_ADDR=:7001
VOLUME ["/data"]
EXPOSE 7001
ENTRYPOINT ["/usr/local/bin/keepstate", "run"]
