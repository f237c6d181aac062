# Stand-in for the official redis:7 image on the project's machines, which reach no image registry: Debian's Redis
# (7.0), listening on all of the container's interfaces as the official image does. Build context: docker/sandbox.
ARG BASE_IMAGE=localhost/debian-py:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
USER redis
WORKDIR /tmp
EXPOSE 6379
ENTRYPOINT ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/tmp"]
