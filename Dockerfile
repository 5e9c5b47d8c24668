# The function's runtime image. Multi-stage: build the wheel with the full
# toolchain, install it into a virtualenv, and ship only that virtualenv on a
# slim base, as a non-root user, with the `serve` entrypoint.
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /venv && /venv/bin/pip install --no-cache-dir --upgrade pip
COPY pyproject.toml README.md ./
COPY function ./function
RUN /venv/bin/pip install --no-cache-dir .

FROM python:3.11.7-slim-bookworm
COPY --from=build /venv /venv
USER 65532:65532
EXPOSE 9443
ENTRYPOINT ["/venv/bin/function-model-serving", "serve"]
