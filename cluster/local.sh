#!/usr/bin/env bash
# A whole replicated cluster on this machine, for trying things out:
#   cluster/local.sh up [N]   ZooKeeper (Debian package) on 2181, N nodes (default 3) with
#                             client ports 7001.., HTTP ports 8001.., HAProxy on 7000
#                             (routes to the leader; generated config for N nodes)
#   cluster/local.sh status   tstreams cluster status
#   cluster/local.sh down     stop everything started by `up` (by PID)
# State, logs and PID files live in ${TSTREAMS_LOCAL:-.cluster-local}/.
# Clients: ts.connect("zk://127.0.0.1:2181/local") or ts.connect("tcp://127.0.0.1:7000").
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${TSTREAMS_LOCAL:-$HERE/.cluster-local}"
PY="${PYTHON:-$HERE/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
ZK_PORT="${ZK_PORT:-2181}"
URL="zk://127.0.0.1:${ZK_PORT}/local"
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"

start_bg() {  # name, command...
    local name="$1"; shift
    nohup "$@" >"$DIR/$name.log" 2>&1 &
    echo $! >"$DIR/$name.pid"
}

wait_for() {  # description, command...
    local what="$1"; shift
    for _ in $(seq 1 150); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    echo "timed out waiting for $what" >&2
    return 1
}

up() {
    local n="${1:-3}"
    mkdir -p "$DIR/zk/data"
    local cp
    cp="$("$PY" -c 'import os; from tstreams_embedded.testing import zookeeper_classpath as c; print(os.pathsep.join(c()))')"
    printf 'tickTime=500\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n' \
        "$DIR/zk/data" "$ZK_PORT" >"$DIR/zk/zoo.cfg"
    start_bg zookeeper java -Xmx256m -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zk/zoo.cfg"
    wait_for "ZooKeeper" "$PY" -c "from tstreams_embedded.testing import four_letter_word as f; assert f($ZK_PORT) == 'imok'"
    "$PY" -m tstreams_embedded.cli cluster init "$URL" --nodes "$n"
    {
        printf 'global\n    maxconn 4000\ndefaults\n    mode tcp\n    timeout connect 2s\n    timeout client 60s\n'
        printf '    timeout server 60s\n    timeout tunnel 1h\n    timeout check 1s\n    retries 3\n    option redispatch\n'
        printf 'frontend tstreams\n    bind 127.0.0.1:7000\n    default_backend tstreams_leader\n'
        printf 'backend tstreams_leader\n    option httpchk GET /health/leader\n    http-check expect status 200\n'
        printf '    default-server inter 300ms fall 1 rise 1 on-marked-down shutdown-sessions\n'
        for i in $(seq 1 "$n"); do printf '    server n%s 127.0.0.1:%s check port %s\n' "$i" $((7000 + i)) $((8000 + i)); done
    } >"$DIR/haproxy.cfg"
    for i in $(seq 1 "$n"); do
        start_bg "n$i" "$PY" -m tstreams_embedded.cli serve --data "$DIR/n$i" --bind "tcp://127.0.0.1:$((7000 + i))" \
            --cluster "$URL" --node-id "n$i" --http "127.0.0.1:$((8000 + i))"
    done
    if command -v haproxy >/dev/null; then
        start_bg haproxy haproxy -f "$DIR/haproxy.cfg" -db
    else
        echo "haproxy not installed: skipping it (apt-get install haproxy)" >&2
    fi
    wait_for "a leader" "$PY" -c "
import json, sys
from tstreams_embedded.cluster import cluster_status
sys.exit(0 if cluster_status('$URL')['leader'] else 1)"
    "$PY" -m tstreams_embedded.cli cluster status "$URL"
    echo "up: ts.connect(\"$URL\") or ts.connect(\"tcp://127.0.0.1:7000\"); logs in $DIR"
    echo "status page: http://127.0.0.1:8001/ (any node's --http port); Prometheus metrics: http://127.0.0.1:8001/metrics"
}

down() {
    local f pid
    for f in "$DIR"/haproxy.pid "$DIR"/n*.pid "$DIR"/zookeeper.pid; do
        [ -e "$f" ] || continue
        pid="$(cat "$f")"
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$f"
    done
    echo "down"
}

case "${1:-}" in
    up) up "${2:-3}" ;;
    down) down ;;
    status) "$PY" -m tstreams_embedded.cli cluster status "$URL" ;;
    *) echo "usage: $0 up [N] | status | down" >&2; exit 2 ;;
esac
