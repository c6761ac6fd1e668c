# Stand-in for the official postgres image where no registry answers: Debian's PostgreSQL 15
# behind an entrypoint with the official image's contract (postgres-entrypoint.sh).
# hadolint ignore=DL3006
FROM qw-standin/bookworm
# hadolint ignore=DL3008
# The official image's postgres user (uid/gid 999) and data directory owned by it, so a service
# started as `user: postgres` (compose.yaml) initialises a fresh named volume without root.
RUN groupadd -r -g 999 postgres \
    && useradd -r -g postgres -u 999 -d /var/lib/postgresql -s /bin/bash postgres \
    && mkdir -p /etc/postgresql-common \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql \
    && chmod 700 /var/lib/postgresql/data
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
