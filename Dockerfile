# syntax=docker/dockerfile:1
# Multi-stage: build with the Rust toolchain, run on slim Debian as non-root.
FROM rust:1-bookworm AS build
WORKDIR /src
# Everything the manifest names (bins, benches, embedded files); .dockerignore
# keeps target/ and local databases out.
COPY . .
RUN cargo build --release --locked --bin streamforge \
 && cp target/release/streamforge /usr/local/bin/streamforge

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin streamforge \
 && mkdir -p /data && chown streamforge /data
COPY --from=build /usr/local/bin/streamforge /usr/local/bin/streamforge
USER streamforge
VOLUME /data
EXPOSE 8080
# Two glibc malloc arenas: request buffers freed on many threads otherwise
# stay resident per arena (BENCHMARKS.md: 171 vs 203 bytes of RSS per event).
ENV MALLOC_ARENA_MAX=2 \
    STREAMFORGE_ADDR=0.0.0.0:8080 \
    STREAMFORGE_DB=/data/streamforge.db \
    STREAMFORGE_URL=http://127.0.0.1:8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["streamforge", "health"]
ENTRYPOINT ["streamforge"]
CMD ["serve"]
