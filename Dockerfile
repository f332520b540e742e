# syntax=docker/dockerfile:1
# Quiver, the Arrow Flight server over Lance datasets, as a container image.
#
#   docker build -t quiver .                      # the server (the last stage, `quiver`)
#   docker build -t quiver-spark-job --target spark-job .   # deploy/compose.yaml's Spark job
#   docker run -p 8815:8815 -v "$PWD/data:/data" quiver
#
# Every setting is a QUIVER_* variable (see `quiver serve --help`): the defaults below bind
# all interfaces, serve /data, health (grpc.health.v1) on 8816 and Prometheus metrics on 8817.
# The wheel is built in the first stage and installed in the next by deploy/image/*.sh, the
# same scripts tests/deploy/test_image.py runs in CI; the final stages hold no compiler,
# no build tree and no package caches, and run as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: compile the C and C++ helpers into a wheel (gcc, g++ and libc headers; the image
# has Python's)
FROM ${PYTHON_IMAGE} AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN sh deploy/image/build-wheel.sh /src /wheels

# ---- base: the wheel in a virtual environment, and the unprivileged user
FROM ${PYTHON_IMAGE} AS base
ENV PATH=/opt/quiver/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY deploy/image/install.sh /usr/local/lib/quiver-install.sh
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    sh /usr/local/lib/quiver-install.sh /wheels /opt/quiver \
    && rm /usr/local/lib/quiver-install.sh \
    && groupadd --system --gid 10001 quiver \
    && useradd --system --uid 10001 --gid quiver --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin quiver \
    && mkdir /data \
    && chown quiver:quiver /data

# ---- spark-job: the Spark pipeline example against running servers (deploy/compose.yaml)
FROM base AS spark-job
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && /opt/quiver/bin/python -m pip install --no-cache-dir --no-input pyspark==4.3.0
COPY clients/spark/examples/pipeline.py /opt/quiver-job/clients/spark/examples/pipeline.py
COPY deploy/compose/spark_job.py /opt/quiver-job/spark_job.py
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["python", "/opt/quiver-job/spark_job.py"]

# ---- quiver: the server (the default target)
FROM base AS quiver
ENV QUIVER_HOST=0.0.0.0 \
    QUIVER_PORT=8815 \
    QUIVER_HEALTH_PORT=8816 \
    QUIVER_METRICS_PORT=8817 \
    QUIVER_ROOT=/data
USER 10001:10001
WORKDIR /data
# Flight (gRPC), health (grpc.health.v1, plaintext), Prometheus metrics (HTTP)
EXPOSE 8815 8816 8817
# quiver serve drains on SIGTERM: health NOT_SERVING, new calls refused, running calls
# finish (QUIVER_DRAIN_SECONDS, 30 by default), then it exits 0
STOPSIGNAL SIGTERM
ENTRYPOINT ["quiver", "serve"]
