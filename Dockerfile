# One image for the operator and the exporter sidecar:
#   trainguard operator ...   (the chart's Deployment)
#   trainguard exporter ...   (the sidecar the webhook injects)
# The build stage makes the trainguard wheel and a virtualenv with it and its dependencies; the
# final stage copies only that virtualenv onto the same slim base: no compiler, no source tree. The
# otlp extra is in, so a monitor's spec.exporter.otlp works with the default sidecar image.
#
# Nothing is resolved at build time: the dependencies and the wheel's build backend are installed from
# requirements/image.lock and requirements/build.lock, pinned with the hashes of their files
# (`make image-lock` writes them; tests/packaging/test_image_lock.py fails when pyproject.toml moves
# and they do not).
#
# The base is pinned by tag, which its publisher rebuilds (Debian updates). To pin the very bytes,
# resolve the tag's digest once where the registry is reachable,
#   docker buildx imagetools inspect python:3.11.14-slim-trixie    (the first "Digest:", the index's)
# and build with --build-arg PYTHON_DIGEST=sha256:<that digest>, or make it the default below. No
# digest is pinned yet: none could be verified where this was written.
ARG PYTHON_DIGEST=""

FROM python:3.11.14-slim-trixie${PYTHON_DIGEST:+@}${PYTHON_DIGEST} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/image.lock requirements/build.lock ./requirements/
# the dependencies first (a layer that changes only with the lock), then the build backend
RUN python -m venv /opt/trainguard \
 && /opt/trainguard/bin/pip install --require-hashes --no-deps -r requirements/image.lock \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --no-deps -r requirements/build.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
# trainguard itself, without dependencies; pip check fails the build if the lock lacks one
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && wheel="$(echo /wheels/trainguard-*.whl)" \
 && /opt/trainguard/bin/pip install --no-deps "${wheel}" \
 && /opt/trainguard/bin/pip check \
 && /opt/trainguard/bin/pip uninstall --yes pip

FROM python:3.11.14-slim-trixie${PYTHON_DIGEST:+@}${PYTHON_DIGEST}
LABEL org.opencontainers.image.title="trainguard" \
      org.opencontainers.image.description="trainguard operator and exporter sidecar" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/trainguard /opt/trainguard
# MALLOC_ARENA_MAX: glibc makes a malloc arena per thread up to 8 per core, and the operator's threads
# (kopf's handlers, the watch caches, the loops) keep memory in each: 2 cut the operator's steady RSS at
# 2,000 monitors from 428 to 389 MiB (docs/performance.md)
ENV PATH=/opt/trainguard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
# 65532: the user the chart's Deployment and the injected sidecar run as
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["trainguard"]
CMD ["--help"]
