#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the fleet tests, from Debian's package: initdb and pg_ctl,
# run as an unprivileged user when called as root (PostgreSQL refuses root), listening only on a
# Unix socket inside DIR, password authentication (SCRAM) for the superuser.
#
#   pg-cluster.sh start DIR    creates DIR, starts the cluster, prints its superuser URL
#   pg-cluster.sh halt DIR     stops it (fast); the data stays
#   pg-cluster.sh kill DIR     SIGKILLs the postmaster; the data stays
#   pg-cluster.sh restart DIR  starts a halted or killed cluster again
#   pg-cluster.sh freeze DIR   SIGSTOPs the postmaster and its children: connections hang
#   pg-cluster.sh thaw DIR     SIGCONTs them
#   pg-cluster.sh destroy DIR  stops it and removes DIR
set -euo pipefail
command=${1:?start, halt, kill, restart or destroy}
dir=${2:?a directory}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ]; then
    echo "PostgreSQL is not installed: bash .ci/test installs Debian's postgresql package" >&2
    exit 1
fi
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
    else
        "$@"
    fi
}
start() {
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 30 \
        -o "-k $dir -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null
}
# Sends SIG to the postmaster and its children (its backends and auxiliary processes).
signal_cluster() {
    local pid
    pid=$(head -n 1 "$dir/data/postmaster.pid")
    # shellcheck disable=SC2046
    kill -"$1" "$pid" $(pgrep -P "$pid" || true)
}
case $command in
    start)
        mkdir -p "$dir"
        [ "$(id -u)" = 0 ] && chown nobody:nogroup "$dir"
        chmod 0755 "$dir"
        password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
        printf '%s\n' "$password" > "$dir/password"
        [ "$(id -u)" = 0 ] && chown nobody:nogroup "$dir/password"
        as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=scram-sha-256 --pwfile="$dir/password" \
            -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
        start
        echo "postgres://postgres:$password@localhost/postgres?host=$dir"
        ;;
    restart) start ;;
    halt) as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null ;;
    freeze) signal_cluster STOP ;;
    thaw) signal_cluster CONT ;;
    destroy)
        # A frozen cluster cannot stop.
        [ -f "$dir/data/postmaster.pid" ] && { signal_cluster CONT 2>/dev/null || true; }
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
        rm -rf "$dir"
        ;;
    kill)
        pid=$(head -n 1 "$dir/data/postmaster.pid")
        # Its children (backends, checkpointer...) name neither the directory nor the postmaster
        # once it is gone: note them first.
        children=$(pgrep -P "$pid" || true)
        kill -9 "$pid"
        # They notice the postmaster is gone and exit; wait until they have (a zombie counts as
        # gone: its memory and sockets are released).
        for _ in $(seq 100); do
            alive=""
            for child in $children; do
                state=$(awk '{print $3}' "/proc/$child/stat" 2>/dev/null || true)
                [ -n "$state" ] && [ "$state" != Z ] && alive=1
            done
            [ -z "$alive" ] && break
            sleep 0.1
        done
        # The lock files name a pid that may linger as a zombie where nothing reaps it.
        rm -f "$dir/data/postmaster.pid" "$dir"/.s.PGSQL.*.lock
        ;;
    *) echo "unknown command $command" >&2; exit 2 ;;
esac
