# syntax=docker/dockerfile:1
# alivemcp container image: `docker build -t alivemcp .`
#
# Two stages: the build stage creates a virtualenv in /opt/alivemcp and installs alivemcp into
# it (every dependency ships manylinux wheels, so no compiler is needed or installed); the final
# stage copies only that virtualenv onto a fresh slim Python image and runs as a non-root user.
# tests/ship/test_dockerfile.py runs this file's build-stage RUN commands in a fresh virtualenv
# (there is no Docker engine on the build machines) and lints it with hadolint.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY alivemcp ./alivemcp
COPY probes ./probes
# --only-binary: every dependency (and the hatchling build backend) must come as a wheel, so
# the build never needs a compiler; alivemcp itself is built from /src into a regular
# (non-editable) install.
RUN python -m venv /opt/alivemcp \
    && /opt/alivemcp/bin/python -m pip install --no-cache-dir --only-binary=:all: /src \
    && /opt/alivemcp/bin/alivemcp --version

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="alivemcp" \
      org.opencontainers.image.description="Uptime and health prober for MCP servers and the AWS data plane behind them" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/alivemcp/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ALIVEMCP_HEALTHZ_URL=http://127.0.0.1:9464/healthz
# A fixed numeric uid/gid so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 alivemcp \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/alivemcp \
       --shell /usr/sbin/nologin alivemcp \
    && mkdir -p /etc/alivemcp /var/lib/alivemcp \
    && chown 10001:10001 /var/lib/alivemcp
COPY --from=build /opt/alivemcp /opt/alivemcp
COPY deploy/docker/config.yaml /etc/alivemcp/config.yaml
# Alert state (firing alerts, dedup keys, undelivered notifications) lives here.
VOLUME ["/var/lib/alivemcp"]
WORKDIR /var/lib/alivemcp
USER 10001:10001
EXPOSE 9464
# /healthz answers 200 while the event loop and the scheduler are alive. The slim image has no
# curl: Python's standard library does the request.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['ALIVEMCP_HEALTHZ_URL'], timeout=4)"]
ENTRYPOINT ["alivemcp", "run"]
CMD ["--config", "/etc/alivemcp/config.yaml"]
