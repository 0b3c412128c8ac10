# The sglang-mm-grpc server image.
#
#   docker build -t sglang-mm-grpc:0.1.0 .        (or: podman build -t sglang-mm-grpc:0.1.0 .)
#   docker run --rm -p 50061:50061 sglang-mm-grpc:0.1.0 --processes 2
#
# The numba kernels are compiled into the image's cache at build time (each preset marked
# warm there), so a container reaches SERVING in seconds with every model; a node whose
# CPU differs from the build machine's compiles once more on first start, serving each
# model as its kernels are ready (the cache directory stays writable for it).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sglang_mm_grpc ./sglang_mm_grpc
COPY kernels ./kernels
RUN pip install --no-cache-dir --prefix=/install ".[video,media-redis]"

FROM python:3.11-slim
COPY --from=build /install /usr/local
ENV NUMBA_CACHE_DIR=/var/cache/sglang-mm-grpc/numba \
    PYTHONUNBUFFERED=1
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin mm \
    && mkdir -p "$NUMBA_CACHE_DIR" \
    && python -c "from sglang_mm_grpc.config import preset_names; from sglang_mm_grpc.server.precompile import compile_kernels; compile_kernels(preset_names())" \
    && chown -R mm:mm /var/cache/sglang-mm-grpc
USER 10001:10001
EXPOSE 50061 9100
ENTRYPOINT ["sglang-mm-grpc", "serve"]
CMD ["--host", "0.0.0.0", "--port", "50061"]
