# The function's runtime image, for machines with a Docker engine. CI builds
# the same image without one (hack/build-image.sh: a debootstrap'd Debian 12
# minbase root filesystem plus /venv, assembled with crane), and
# tests/test_packages.py checks that the two agree on the base, the user, the
# entrypoint, the port and the environment.
#
# Both use Debian 12's own python3 (3.11): the build stage makes /venv with it
# and installs the wheel and binary wheels of every dependency; the final stage
# has python3 and /venv only: no pip, no compilers, no apt lists, no docs.
FROM debian:12.11-slim AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY function ./function
RUN python3 -m venv /venv \
 && /venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && /venv/bin/pip install --no-cache-dir --only-binary=:all: /wheels/*.whl \
 && /venv/bin/pip uninstall -y setuptools pip \
 && rm -f /venv/bin/Activate.ps1 /venv/bin/activate.csh /venv/bin/activate.fish \
 && /venv/bin/function-model-serving serve --help >/dev/null \
 && /venv/bin/python -m function.contract.devicecel.worker </dev/null >/dev/null

FROM debian:12.11-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get -y --no-install-recommends dist-upgrade \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
      /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
 && find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/nonroot \
      --shell /usr/sbin/nologin nonroot
COPY --from=build /venv /venv
ENV PATH=/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 9443
# gRPC on 0.0.0.0:9443 with the mTLS certificates Crossplane mounts at
# TLS_SERVER_CERTS_DIR (the SDK's standard options).
ENTRYPOINT ["/venv/bin/function-model-serving", "serve"]
