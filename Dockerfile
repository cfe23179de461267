# syntax=docker/dockerfile:1
# TaskPilots Handoff: a static binary on a distroless base, run as a non-root
# user. Build:  docker build -t taskpilots/handoff .
# (podman and buildah read this file too.)

# ---- build -----------------------------------------------------------------
FROM golang:1.26-bookworm AS build
# go.mod names the toolchain (standard-library security fixes); fetch it from
# the module proxy when the image's Go is older.
ENV GOTOOLCHAIN=auto CGO_ENABLED=0
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
COPY client/go.mod client/
RUN go mod download
COPY . .
ARG VERSION=""
# The SQLite driver is pure Go, so CGO_ENABLED=0 gives a fully static binary
# that runs on a base with no C library.
RUN go build -trimpath -ldflags "-s -w ${VERSION:+-X main.version=$VERSION}" \
      -o /out/taskpilots ./cmd/taskpilots \
 && mkdir -p /out/data

# ---- run -------------------------------------------------------------------
# distroless/static: CA certificates, time zones and /etc/passwd with the
# "nonroot" user (65532), and nothing else: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/taskpilots /usr/local/bin/taskpilots
# The embedded SQLite default writes ./data/taskpilots.db relative to the
# working directory; give the non-root user a directory it owns.
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /
USER 65532:65532
# SQLITE_TMPDIR: SQLite needs a writable temporary directory for large sorts
# and fails with "disk I/O error (6410)" when it finds none; an image run with
# a read-only or missing /tmp (seen in a scratch-based build of this image)
# has only the volume.
ENV TASKPILOTS_ADDR=:8080 \
    TASKPILOTS_DATABASE_URL=/data/taskpilots.db \
    SQLITE_TMPDIR=/data \
    TASKPILOTS_LOG_FORMAT=json
EXPOSE 8080
VOLUME ["/data"]
# No curl in the image: the binary asks its own /readyz (200 only when the
# database answers).
HEALTHCHECK --interval=10s --timeout=4s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/taskpilots", "healthcheck", "--url", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/taskpilots"]
CMD ["serve"]
