# Stand-in for the official postgres:15 image on the project's machines, which reach no image registry: Debian's
# PostgreSQL 15 with the official image's interface (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA,
# pg_isready), enough for docker/compose.yaml. Build context: docker/sandbox (docs/container.md).
ARG BASE_IMAGE=localhost/debian-py:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data && chown postgres:postgres /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data PGHOST=/tmp
USER postgres
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
