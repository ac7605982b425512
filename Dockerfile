# One image for the operator and the exporter sidecar:
#   trainguard operator ...   (the chart's Deployment)
#   trainguard exporter ...   (the sidecar the webhook injects)
# The build stage makes the trainguard wheel and a virtualenv with it and its dependencies; the
# final stage copies only that virtualenv onto the same slim base: no compiler, no source tree. The
# otlp extra is in, so a monitor's spec.exporter.otlp works with the default sidecar image.
FROM python:3.11.14-slim-trixie AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/trainguard \
 && wheel="$(echo /wheels/trainguard-*.whl)" \
 && /opt/trainguard/bin/pip install "${wheel}[operator,exporter,otlp]" \
 && /opt/trainguard/bin/pip uninstall --yes pip

FROM python:3.11.14-slim-trixie
LABEL org.opencontainers.image.title="trainguard" \
      org.opencontainers.image.description="trainguard operator and exporter sidecar" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/trainguard /opt/trainguard
ENV PATH=/opt/trainguard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: the user the chart's Deployment and the injected sidecar run as
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["trainguard"]
CMD ["--help"]
