# syntax=docker/dockerfile:1
# Multi-stage: build with the Rust toolchain, run on slim Debian as non-root.
#
#   docker build -t streamforge .
#
# With a binary built on the host instead (what tests/it/container.rs does,
# and docs/deploy.md shows): put it at bin/usr/local/bin/streamforge
# and give that folder as the build stage, which is then not built:
#
#   docker build --build-context build=bin -t streamforge .
#
# (a named build context replaces the stage of the same name, in BuildKit
# and in podman alike). docs/deploy.md: volumes, the token, stopping,
# backups, upgrades, sizing.
FROM rust:1-bookworm AS build
WORKDIR /src
# Everything the manifest names (bins, benches, embedded files); .dockerignore
# keeps target/ and local databases out.
COPY . .
# No debug info in the image's binary (the release profile keeps some for
# profiling on the host): 22 MB instead of 133 MB.
ENV CARGO_PROFILE_RELEASE_DEBUG=0
RUN cargo build --release --locked --bin streamforge \
 && cp target/release/streamforge /usr/local/bin/streamforge

FROM debian:bookworm-slim
# uid 10001 owns /data: a named volume starts as a copy of it (so it is
# writable); a bind-mounted host folder keeps its owner (chown it to 10001,
# or run with --user: docs/deploy.md).
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin streamforge \
 && mkdir -p /data && chown streamforge /data
COPY --from=build /usr/local/bin/streamforge /usr/local/bin/streamforge
USER streamforge
VOLUME /data
EXPOSE 8080
# The service allocates with jemalloc (built in); SQLite's own allocations
# use glibc's malloc, kept to two arenas.
# It serves on every interface with no token: set STREAMFORGE_TOKEN (and
# publish the port on 127.0.0.1 only where nothing else must reach it).
# STREAMFORGE_URL is where the client in the image (and the HEALTHCHECK)
# finds the server: change it with STREAMFORGE_ADDR.
ENV MALLOC_ARENA_MAX=2 \
    STREAMFORGE_ADDR=0.0.0.0:8080 \
    STREAMFORGE_DB=/data/streamforge.db \
    STREAMFORGE_URL=http://127.0.0.1:8080
# Readiness (/readyz): healthy once recovery is over, unhealthy while the
# store is failing; no token needed. The start period covers a recovery
# (seconds per million calls logged since the last checkpoint).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["streamforge", "health", "--ready"]
# Exec form: streamforge is PID 1 and gets the SIGTERM of `docker stop`
# itself (it handles it: drain, final checkpoint, exit 0). Give it time for
# the final checkpoint: `docker run --stop-timeout 60` (docs/deploy.md).
ENTRYPOINT ["streamforge"]
CMD ["serve"]
