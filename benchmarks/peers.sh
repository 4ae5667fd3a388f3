#!/usr/bin/env bash
# Install, start and stop the peer brokers that `pagemq perf` is compared against, each with a
# STOMP listener on 127.0.0.1 on a port that does not clash with pagemq (61613):
#
#   RabbitMQ (Debian rabbitmq-server + rabbitmq_stomp)   stomp://127.0.0.1:61615  guest/guest
#   ActiveMQ Classic (Debian activemq, KahaDB)           stomp://127.0.0.1:61614
#
# Usage: benchmarks/peers.sh install|start|stop|status|reset [rabbitmq|activemq|all]
#        benchmarks/peers.sh compare [pagemq perf flags]   (pagemq at $PAGEMQ_URL, if running)
#
# Every listener (STOMP, AMQP/OpenWire, Erlang distribution, epmd, JMX) is bound to
# 127.0.0.1. State, configs and logs live under $PEERS_DIR (default /tmp/pagemq-peers), never
# in the repository and never in the packages' system-wide config, so `reset` starts over
# from empty queues. Needs root for `install` (apt-get); the brokers run as the invoking user.
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-/tmp/pagemq-peers}
RABBIT_STOMP_PORT=${RABBIT_STOMP_PORT:-61615}
RABBIT_AMQP_PORT=${RABBIT_AMQP_PORT:-5682}
RABBIT_DIST_PORT=${RABBIT_DIST_PORT:-25682}
RABBIT_EPMD_PORT=${RABBIT_EPMD_PORT:-4379}
AMQ_STOMP_PORT=${AMQ_STOMP_PORT:-61614}
AMQ_OPENWIRE_PORT=${AMQ_OPENWIRE_PORT:-61626}
AMQ_HEAP=${AMQ_HEAP:-1g}

log() { echo "peers.sh: $*" >&2; }

wait_port() {  # port, seconds, name
    local port=$1 deadline=$((SECONDS + $2))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ((SECONDS > deadline)); then log "$3 did not open 127.0.0.1:$port"; return 1; fi
        sleep 1
    done
    log "$3 listening on 127.0.0.1:$port"
}

# -- RabbitMQ -------------------------------------------------------------------------------

rabbit_env() {
    local dir=$PEERS_DIR/rabbitmq
    export HOME=$dir  # the Erlang cookie lives here, not in the caller's home
    export RABBITMQ_NODENAME=pagemq-peer@localhost
    export RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
    export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
    export RABBITMQ_MNESIA_BASE=$dir/mnesia
    export RABBITMQ_LOG_BASE=$dir/log
    export RABBITMQ_PID_FILE=$dir/rabbitmq.pid
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT=$RABBIT_AMQP_PORT
    export RABBITMQ_DIST_PORT=$RABBIT_DIST_PORT
    export ERL_EPMD_ADDRESS=127.0.0.1
    export ERL_EPMD_PORT=$RABBIT_EPMD_PORT
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

rabbit_start() {
    local dir=$PEERS_DIR/rabbitmq
    mkdir -p "$dir/mnesia" "$dir/log"
    cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$RABBIT_AMQP_PORT
stomp.listeners.tcp.1 = 127.0.0.1:$RABBIT_STOMP_PORT
stomp.default_user = guest
stomp.default_pass = guest
loopback_users.guest = true
log.console = false
log.file.level = warning
CONF
    rabbit_env
    [ -f "$dir/enabled_plugins" ] || echo "[]." >"$dir/enabled_plugins"
    /usr/lib/rabbitmq/bin/rabbitmq-plugins --offline enable rabbitmq_stomp >/dev/null
    if [ -f "$dir/rabbitmq.pid" ] && kill -0 "$(cat "$dir/rabbitmq.pid")" 2>/dev/null; then
        log "rabbitmq already running (pid $(cat "$dir/rabbitmq.pid"))"
        return 0
    fi
    nohup /usr/lib/rabbitmq/bin/rabbitmq-server >"$dir/log/console.log" 2>&1 &
    wait_port "$RABBIT_STOMP_PORT" 120 rabbitmq
}

rabbit_stop() {
    local dir=$PEERS_DIR/rabbitmq
    [ -d "$dir" ] || return 0
    rabbit_env
    /usr/lib/rabbitmq/bin/rabbitmqctl stop >/dev/null 2>&1 || true
    # epmd was started for this node on its own port; it is ours to stop.
    epmd -port "$RABBIT_EPMD_PORT" -kill >/dev/null 2>&1 || true
    log "rabbitmq stopped"
}

rabbit_status() {
    rabbit_env
    /usr/lib/rabbitmq/bin/rabbitmqctl list_queues name durable type messages consumers 2>/dev/null \
        || log "rabbitmq not running"
}

# -- ActiveMQ Classic -----------------------------------------------------------------------

amq_home() {
    if [ -d /usr/share/activemq ]; then echo /usr/share/activemq; else log "activemq is not installed"; return 1; fi
}

amq_start() {
    local home dir=$PEERS_DIR/activemq
    home=$(amq_home)
    mkdir -p "$dir/conf" "$dir/data" "$dir/tmp"
    # A private copy of the packaged configuration; only the transport connectors change.
    cp -r "$home"/conf/. "$dir/conf/" 2>/dev/null || true
    cp -r /etc/activemq/instances-available/main/. "$dir/conf/" 2>/dev/null || true
    python3 - "$dir/conf/activemq.xml" "$AMQ_STOMP_PORT" "$AMQ_OPENWIRE_PORT" <<'PY'
import re, sys
path, stomp, openwire = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path).read()
connectors = f"""<transportConnectors>
            <transportConnector name="openwire" uri="tcp://127.0.0.1:{openwire}?maximumConnections=1000"/>
            <transportConnector name="stomp" uri="stomp://127.0.0.1:{stomp}?maximumConnections=1000&amp;wireFormat.maxFrameSize=104857600"/>
        </transportConnectors>"""
if "<transportConnectors>" in text:
    text = re.sub(r"<transportConnectors>.*?</transportConnectors>", connectors, text, flags=re.S)
else:
    text = text.replace("</broker>", connectors + "\n    </broker>", 1)
# no web console / jetty in the comparison: it only adds ports
text = re.sub(r'<import resource="jetty.xml"/>', "", text)
open(path, "w").write(text)
PY
    if [ -f "$dir/activemq.pid" ] && kill -0 "$(cat "$dir/activemq.pid")" 2>/dev/null; then
        log "activemq already running (pid $(cat "$dir/activemq.pid"))"
        return 0
    fi
    (
        cd "$dir"
        nohup java -Xms"$AMQ_HEAP" -Xmx"$AMQ_HEAP" \
            -Djava.util.logging.config.file=logging.properties \
            -Djava.io.tmpdir="$dir/tmp" \
            -Dactivemq.classpath="$dir/conf" \
            -Dactivemq.home="$home" -Dactivemq.base="$dir" \
            -Dactivemq.conf="$dir/conf" -Dactivemq.data="$dir/data" \
            -jar "$home/bin/activemq.jar" start "xbean:file:$dir/conf/activemq.xml" \
            >"$dir/console.log" 2>&1 &
        echo $! >"$dir/activemq.pid"
    )
    wait_port "$AMQ_STOMP_PORT" 120 activemq
}

amq_stop() {
    local dir=$PEERS_DIR/activemq pid
    [ -f "$dir/activemq.pid" ] || return 0
    pid=$(cat "$dir/activemq.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
    rm -f "$dir/activemq.pid"
    log "activemq stopped"
}

amq_status() {
    local dir=$PEERS_DIR/activemq
    if [ -f "$dir/activemq.pid" ] && kill -0 "$(cat "$dir/activemq.pid")" 2>/dev/null; then
        log "activemq running (pid $(cat "$dir/activemq.pid"))"
    else
        log "activemq not running"
    fi
}

# -- side-by-side runs ----------------------------------------------------------------------

listener_pid() {  # port -> pid of the process listening on 127.0.0.1:port (for --broker-pid)
    ss -ltnpH "sport = :$1" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

perf() {
    local repo
    repo=$(cd "$(dirname "$0")/.." && pwd)
    if [ -x "$repo/.venv/bin/python" ]; then
        "$repo/.venv/bin/python" -m pagemq.tools.perf "$@"
    else
        pagemq perf "$@"
    fi
}

# compare [pagemq perf flags]: the same flags against every broker that is up, one after the
# other in one run (ratios measured side by side hold; absolute figures drift). Each broker
# gets a fresh destination, so leftovers from an earlier run are not counted, declared by a
# SUBSCRIBE (RabbitMQ 3.10 nacks SENDs that race a quorum queue's declaration, and its STOMP
# adapter then resets the connection), then a short warm-up (ActiveMQ's JIT). JSON lines go
# to $RESULTS.
compare() {
    local stamp results port name url pid dest
    stamp=$(date +%Y%m%d-%H%M%S)
    results=${RESULTS:-$PEERS_DIR/compare-$stamp.jsonl}
    mkdir -p "$(dirname "$results")"
    local pagemq_url=${PAGEMQ_URL:-stomp://127.0.0.1:61613}
    local targets=(
        "pagemq|$pagemq_url|"
        "activemq|stomp://127.0.0.1:$AMQ_STOMP_PORT|"
        "rabbitmq-classic|stomp://127.0.0.1:$RABBIT_STOMP_PORT|--login guest --passcode guest --vhost /"
        "rabbitmq-quorum|stomp://127.0.0.1:$RABBIT_STOMP_PORT|--login guest --passcode guest --vhost / --header x-queue-type:quorum"
    )
    for target in "${targets[@]}"; do
        IFS='|' read -r name url extra <<<"$target"
        port=${url##*:}
        pid=$(listener_pid "$port")
        if [ -z "$pid" ]; then log "$name: nothing listens on 127.0.0.1:$port, skipped"; continue; fi
        dest=/queue/perf-$name-$stamp
        # A SUBSCRIBE declares the queue before any SEND can race its declaration, then the
        # warm-up proper. $extra is a list of flags: unquoted on purpose.
        # shellcheck disable=SC2086
        perf --url "$url" $extra --destination "$dest" --phase consume --duration 1s --consumers 1 \
            --json >/dev/null || log "$name: declaring $dest failed"
        # shellcheck disable=SC2086
        perf --url "$url" $extra --destination "$dest" --phase both --count 1000 --producers 1 \
            --consumers 1 --json >/dev/null || log "$name: warm-up failed"
        log "$name: pagemq perf $* (pid $pid, $dest)"
        # shellcheck disable=SC2086
        perf --url "$url" $extra --destination "$dest" --broker-pid "$pid" --json "$@" \
            | sed "s/^{/{\"broker\":\"$name\",/" | tee -a "$results" >/dev/null || true
    done
    python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"{'broker':<17} {'phase':<8} {'role':<9} {'messages':>9} {'msg/s':>8} {'MB/s':>7} "
      f"{'p50 ms':>9} {'p99 ms':>9} {'RSS MiB':>8}")
for row in rows:
    if row.get("error"):
        print(f"{row['broker']:<17} error: {row['error']}")
    for r in row["results"]:
        lat = r["latency_ms"] or {}
        print(f"{row['broker']:<17} {r['phase']:<8} {r['role']:<9} {r['messages']:>9} "
              f"{r['msgs_per_s']:>8.0f} {r['mb_per_s']:>7.2f} {lat.get('p50', '-'):>9} "
              f"{lat.get('p99', '-'):>9} {r['broker_peak_rss_mib'] or '-':>8}"
              + ("" if r["complete"] else "  INCOMPLETE"))
print(f"(JSON lines: {sys.argv[1]})")
PY
}

# -- commands -------------------------------------------------------------------------------

install() {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    case $1 in
        rabbitmq) apt-get install -y --no-install-recommends rabbitmq-server ;;
        activemq) apt-get install -y --no-install-recommends activemq ;;
        all) apt-get install -y --no-install-recommends rabbitmq-server activemq ;;
    esac
    # The packages may start system-wide services bound to every interface; these scripts
    # run their own instances, so stop those (where an init system started them at all).
    service rabbitmq-server stop >/dev/null 2>&1 || true
    service activemq stop >/dev/null 2>&1 || true
}

each() {  # action target
    case $2 in
        rabbitmq) "rabbit_$1" ;;
        activemq) "amq_$1" ;;
        all) "rabbit_$1"; "amq_$1" ;;
        *) log "unknown broker $2 (rabbitmq, activemq or all)"; exit 2 ;;
    esac
}

action=${1:-}
target=${2:-all}
case $action in
    install) install "$target" ;;
    start | stop | status) each "$action" "$target" ;;
    compare) shift; compare "$@" ;;
    reset)
        each stop "$target"
        case $target in
            all) rm -rf "$PEERS_DIR" ;;
            *) rm -rf "${PEERS_DIR:?}/$target" ;;
        esac
        log "state under $PEERS_DIR removed"
        ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
esac
