# syntax=docker/dockerfile:1
#
# Container image of the load-aware descheduler.
#
#   docker build -t load-aware-descheduler:0.1.0 .
#
# Two stages. "builder" fetches the runtime dependencies as wheels (binary only, every file checked against
# the sha256 in requirements.lock), builds the project's own wheel with a build backend just as pinned
# (requirements-build.lock) and installs all of them into a virtualenv. "runtime" starts again from the slim base and copies only that virtualenv: no compiler, no
# build backend, no package manager cache, no source tree.
#
# For reproducible builds, pin the base image by digest: --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# Dependencies first, so this layer is reused when only the code changes. --only-binary: every runtime
# dependency publishes manylinux wheels for CPython 3.11 on amd64 and arm64, so nothing is compiled.
COPY requirements.lock requirements-build.lock ./
RUN pip wheel --no-cache-dir --require-hashes --only-binary=:all: --wheel-dir /wheels -r requirements.lock

# The build backend (setuptools, wheel) in a virtualenv of its own, hash-checked like the dependencies:
# left to build isolation, `pip wheel .` would fetch whatever setuptools is newest, unpinned and unchecked.
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements-build.lock

COPY pyproject.toml README.md ./
COPY descheduler ./descheduler
# --no-build-isolation: build with the pinned backend above; --check-build-dependencies: fail if it no
# longer satisfies pyproject.toml's [build-system] requires.
# The runtime virtualenv gets no installer: made --without-pip (the venv module would add pip and
# setuptools, which scanners flag) and filled by the build virtualenv's pip through --python.
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --check-build-dependencies \
      --wheel-dir /dist . \
 && python -m venv --without-pip /opt/venv \
 && /opt/build/bin/pip --python /opt/venv/bin/python install --no-cache-dir --no-index --find-links /wheels \
      --require-hashes -r requirements.lock \
 && /opt/build/bin/pip --python /opt/venv/bin/python install --no-cache-dir --no-index --no-deps /dist/*.whl \
 && /opt/venv/bin/descheduler --help > /dev/null


FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="load-aware-descheduler" \
      org.opencontainers.image.description="Load-aware Kubernetes descheduler: moves pods off nodes whose measured CPU/memory usage is too high" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed numeric user, so Kubernetes can verify runAsNonRoot without looking up a name.
RUN groupadd --system --gid 65532 descheduler \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin descheduler

# The root filesystem is read-only in the Deployment: never try to write .pyc files at run time (the
# virtualenv was byte-compiled when it was installed). Unbuffered output so logs are not lost on exit.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

COPY --from=builder /opt/venv /opt/venv

USER 65532:65532
# healthzBindAddress and metricsBindAddress of the default configuration.
EXPOSE 10258 10259
ENTRYPOINT ["descheduler"]
CMD ["run", "--config", "/etc/descheduler/config.yaml"]
