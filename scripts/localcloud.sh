#!/usr/bin/env bash
# The local cloud (docs/mechanism.md#design-6): DynamoDB Local (:8000), moto_server (:4566),
# a PostgreSQL cluster of the project's own (own data dir, own port) and the
# dedup cache, a redis-server of its own (:56379). A second Region's stores
# beside them (issue 15): DynamoDB Local (:8001) and a PostgreSQL cluster
# (:54330); moto serves both Regions (a client signing with another Region
# gets its own queues). Every
# port is on 127.0.0.1; logs and pids live under .local/ (git-ignored).
#   localcloud.sh up     start what is not running, wait until ready (idempotent)
#   localcloud.sh down   stop what runs (idempotent)
#   localcloud.sh apps   (re)start the project's own services: pspsim, frontdoor,
#                        and the stack (`localcloud serve`: the template's
#                        functions, mappings and schedules, admin API on :8071)
#   localcloud.sh status print what runs, and the stack's functions and triggers
#   localcloud.sh regions-up    the two-Region local cloud beside it (issue 15,
#                        docs/regions.md): two live stacks, us-east-1 and
#                        us-west-2, from the two-Region app's templates, each
#                        with its own DynamoDB Local, PostgreSQL cluster,
#                        queues, functions and front door (idempotent)
#   localcloud.sh regions-down  stop the two live Region stacks and their stores
#   localcloud.sh restart-dynamodb  a fresh, empty DynamoDB Local (the chaos
#                        runner's -fresh-every: its writes slow as the stream
#                        records of deleted tables pile up)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCAL=$ROOT/.local
LOGS=$LOCAL/logs
PIDS=$LOCAL/pids
mkdir -p "$LOGS" "$PIDS"

# One knob per part: a port and its URL follow each other (or are refused).
# shellcheck source=scripts/ports.sh
source "$ROOT/scripts/ports.sh"
DDB_PORT=${ONCEPAY_DDB_PORT:-8000}
MOTO_PORT=${ONCEPAY_MOTO_PORT:-4566}
PG_PORT=${ONCEPAY_PG_PORT:-54329}
R2_DDB_PORT=${ONCEPAY_R2_DDB_PORT:-8001}
R2_PG_PORT=${ONCEPAY_R2_PG_PORT:-54330}
CACHE_PORT=${ONCEPAY_CACHE_PORT:-56379}
READY_TIMEOUT=${ONCEPAY_READY_TIMEOUT:-60}

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)

die() { printf 'localcloud: %s\n' "$*" >&2; exit 1; }
say() { printf 'localcloud: %s\n' "$*"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# running PID: the process exists and is no zombie (a killed process whose
# parent has not reaped it yet runs no more: a test kills a Region's stack,
# and its parent is whoever adopted it).
running() {
  kill -0 "$1" 2>/dev/null || return 1
  case "$(ps -o stat= -p "$1" 2>/dev/null)" in Z* | "") return 1 ;; esac
}

alive() { # name
  local f=$PIDS/$1.pid
  [ -f "$f" ] && running "$(cat "$f")"
}

wait_for() { # name check-command...
  local name=$1; shift
  local deadline=$((SECONDS + READY_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "localcloud: $name did not become ready within ${READY_TIMEOUT}s; last lines of its log:" >&2
      tail -n 20 "$LOGS/$name.log" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.2
  done
  say "$name ready"
}

# The PostgreSQL data dir must be reachable by the postgres OS user (initdb and
# the server refuse root). .local/ is used when that user can traverse to it;
# otherwise a per-checkout dir under /var/tmp.
pg_data_dir() {
  if runuser -u postgres -- test -x "$LOCAL" 2>/dev/null && runuser -u postgres -- test -w "$LOCAL/pgroot" 2>/dev/null; then
    echo "$LOCAL/pgroot/data"; return
  fi
  mkdir -p "$LOCAL/pgroot" && chown postgres "$LOCAL/pgroot" 2>/dev/null || true
  if runuser -u postgres -- test -w "$LOCAL/pgroot" 2>/dev/null; then
    echo "$LOCAL/pgroot/data"; return
  fi
  local alt=/var/tmp/oncepay-$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)
  mkdir -p "$alt" && chown postgres "$alt"
  echo "$alt/data"
}

start_ddb() { # [name port]: the first Region's by default
  local name=${1:-dynamodb-local} port=${2:-$DDB_PORT}
  if port_open "$port"; then say "$name already on :$port"; return; fi
  local dir=$LOCAL/tools/dynamodb-local
  [ -f "$dir/DynamoDBLocal.jar" ] || die "DynamoDB Local is not installed: run 'make setup'"
  # exec: no shell stays behind holding this script's stdout (a `make up |
  # tee` would wait on it until the server stops).
  (cd "$dir" && exec setsid nohup java -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
      -inMemory -port "$port" -disableTelemetry >"$LOGS/$name.log" 2>&1 &)
  wait_for "$name" port_open "$port"
  # setsid may fork, so $! is not always the server: record the server itself.
  pgrep -n -f "$dir/DynamoDBLocal.jar -inMemory -port $port -disableTelemetry" >"$PIDS/$name.pid"
}

start_moto() { # [name port]
  local name=${1:-moto} port=${2:-$MOTO_PORT}
  if port_open "$port"; then say "$name already on :$port"; return; fi
  command -v moto_server >/dev/null || die "moto_server is not installed: run 'make setup'"
  setsid nohup moto_server -H 127.0.0.1 -p "$port" >"$LOGS/$name.log" 2>&1 &
  wait_for "$name" curl -fsS "http://127.0.0.1:$port/moto-api/"
  pgrep -n -f "moto_server -H 127.0.0.1 -p $port" >"$PIDS/$name.pid"
}

# The dedup cache (ElastiCache for Valkey in AWS): a redis-server of the
# project's own, in memory only, with eviction off as the stack's (an
# evicted key turns into a silent duplicate: a full cache refuses writes).
start_cache() {
  if port_open "$CACHE_PORT"; then say "cache already on :$CACHE_PORT"; return; fi
  command -v redis-server >/dev/null || die "redis-server is not installed: run 'make setup'"
  setsid nohup redis-server --bind 127.0.0.1 --port "$CACHE_PORT" --save "" --appendonly no \
    --maxmemory 64mb --maxmemory-policy noeviction --protected-mode yes >"$LOGS/cache.log" 2>&1 &
  wait_for cache port_open "$CACHE_PORT"
  pgrep -n -f "redis-server 127.0.0.1:$CACHE_PORT" >"$PIDS/cache.pid" || pgrep -n -f "redis-server.*$CACHE_PORT" >"$PIDS/cache.pid"
}

# The server's settings. wal_level=logical, with slots, senders and workers
# to spare, lets a test replicate one Region's ledger to the other's
# (internal/localcloud/pgrepl: a few subscriptions at once, each with its
# table-sync workers).
pg_opts() { # port data-dir
  echo "-p $1 -c listen_addresses=127.0.0.1 -k $2 -c max_connections=300 -c wal_level=logical" \
    "-c max_replication_slots=32 -c max_wal_senders=32 -c max_logical_replication_workers=32 -c max_worker_processes=48"
}

start_pg() { # name port data-dir-name: postgres $PG_PORT data, postgres-r2 $R2_PG_PORT data-r2
  local name=$1 port=$2 dirname=$3
  local pathfile=$LOCAL/pgdata${name#postgres}.path # pgdata.path, pgdata-r2.path
  [ -n "$PGBIN" ] || die "PostgreSQL is not installed: run 'make setup'"
  if port_open "$port"; then
    say "$name already on :$port"
    if [ -f "$pathfile" ]; then
      pg_logical "$name" "$port" "$(cat "$pathfile")"
      pg_tls "$port" "$(cat "$pathfile")"
      pg_retry "$port"
    fi
    return
  fi
  # The second Region's data dir is a sibling of the first's.
  local data; data="$(dirname "$(pg_data_dir)")/$dirname"
  echo "$data" >"$pathfile"
  # The server writes its log as the postgres user: next to its data dir,
  # which that user can reach; .local/logs gets a link to it.
  local pglog; pglog="$(dirname "$data")/$name.log"
  if [ ! -f "$data/PG_VERSION" ]; then
    say "initdb $data"
    (cd / && runuser -u postgres -- "$PGBIN/initdb" -D "$data" -U postgres -A trust -E UTF8 --no-instructions) >"$LOGS/$name-initdb.log" 2>&1 \
      || { tail -n 20 "$LOGS/$name-initdb.log" >&2; die "$name: initdb failed"; }
  fi
  (cd / && runuser -u postgres -- touch "$pglog")
  ln -sfn "$pglog" "$LOGS/$name.log"
  (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$data" -l "$pglog" -w -t "$READY_TIMEOUT" \
    -o "$(pg_opts "$port" "$data")" start) >/dev/null \
    || { tail -n 20 "$pglog" >&2; die "$name did not start"; }
  head -1 "$data/postmaster.pid" >"$PIDS/$name.pid"
  wait_for "$name" "$PGBIN/pg_isready" -h 127.0.0.1 -p "$port"
  pg_tls "$port" "$data"
  pg_retry "$port"
}

# The logical replication launcher starts at most one subscription's worker
# per wal_retrieve_retry_interval (5 s by default, for the whole cluster):
# each test's new subscription would wait that long. Reloadable, so set in
# place like ssl.
pg_retry() { # port
  if [ "$(psql_admin "$1" -Atc 'SHOW wal_retrieve_retry_interval')" != 200ms ]; then
    psql_admin "$1" -qc "ALTER SYSTEM SET wal_retrieve_retry_interval = '200ms'" -c "SELECT pg_reload_conf()" >/dev/null
  fi
}

# wal_level takes a restart: a cluster an older checkout started without
# logical decoding is restarted once with today's settings (its sessions are
# cut; the stack's pools reconnect).
pg_logical() { # name port data-dir
  local name=$1 port=$2 data=$3
  [ "$(psql_admin "$port" -Atc 'SHOW wal_level')" = logical ] && return
  say "$name: restarting with wal_level=logical"
  (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$data" -l "$(dirname "$data")/$name.log" -w -t "$READY_TIMEOUT" \
    -m fast -o "$(pg_opts "$port" "$data")" restart) >/dev/null \
    || { tail -n 20 "$LOGS/$name.log" >&2; die "$name did not restart"; }
  head -1 "$data/postmaster.pid" >"$PIDS/$name.pid"
  wait_for "$name" "$PGBIN/pg_isready" -h 127.0.0.1 -p "$port"
}

# The stack's DSN says sslmode=require (Aurora's rds.force_ssl): the local
# cluster speaks TLS too, with a self-signed certificate made once in its
# data dir. ssl is a reloadable setting, so a cluster already running
# without it is switched on in place, with no restart.
pg_tls() { # port data-dir
  local port=$1 data=$2
  if ! runuser -u postgres -- test -f "$data/server.crt"; then
    command -v openssl >/dev/null || die "openssl is not installed: run 'make setup'"
    (cd / && runuser -u postgres -- openssl req -x509 -newkey rsa:2048 -nodes -days 3650 \
      -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
      -keyout "$data/server.key" -out "$data/server.crt") >"$LOGS/postgres-tls.log" 2>&1 \
      || { tail -n 20 "$LOGS/postgres-tls.log" >&2; die "could not make the ledger's TLS certificate"; }
    chmod 600 "$data/server.key"
  fi
  if [ "$(psql_admin "$port" -Atc 'SHOW ssl')" != on ]; then
    psql_admin "$port" -qc "ALTER SYSTEM SET ssl = on" -c "SELECT pg_reload_conf()" >/dev/null
    say "postgres :$port: TLS on"
  fi
}

psql_admin() { local port=$1; shift; "$PGBIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X "$@"; }

pg_stop() { # name
  local pathfile=$LOCAL/pgdata${1#postgres}.path
  if [ -f "$pathfile" ] && [ -n "$PGBIN" ]; then
    local data; data=$(cat "$pathfile")
    if [ -f "$data/postmaster.pid" ]; then
      (cd / && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$data" -m fast -w stop) >/dev/null 2>&1 && say "stopped $1" || true
    fi
    rm -f "$PIDS/$1.pid"
  fi
}

# The project's own local services: built from this checkout and restarted on
# every `up`, so they always run the code in the tree.
FRONTDOOR_ADDR=${ONCEPAY_FRONTDOOR_ADDR:-127.0.0.1:8080}
PSPSIM_ADDR=${ONCEPAY_PSPSIM_ADDR:-127.0.0.1:8090}
ADMIN_ADDR=${ONCEPAY_ADMIN_ADDR:-127.0.0.1:8071}

start_app() { # name addr binary args...
  local name=$1 addr=$2; shift 2
  stop_pid "$name" 60 >/dev/null
  if port_open "${addr##*:}"; then
    die "$name: $addr is taken by a process this checkout did not start (another checkout's local cloud?); stop it first"
  fi
  setsid nohup "$@" >"$LOGS/$name.log" 2>&1 &
  local pid=$!
  echo $pid >"$PIDS/$name.pid"
  # Ready when it listens; a process that exits while we wait has failed
  # (the stack exits when a custom resource answers FAILED).
  local deadline=$((SECONDS + ${APP_READY_TIMEOUT:-$READY_TIMEOUT}))
  until port_open "${addr##*:}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$LOGS/$name.log" >&2; die "$name exited before it was ready (log: $LOGS/$name.log)"
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 30 "$LOGS/$name.log" >&2; die "$name did not become ready within ${APP_READY_TIMEOUT:-$READY_TIMEOUT}s"
    fi
    sleep 0.2
  done
  say "$name ready"
}

# The stack is restarted only when what it runs changed (its binary, the
# template, the provisioned resources and function environments, and the
# functions' own code: the stack builds their bootstraps when it starts, and
# they are not part of its binary), so a second `make up` changes nothing:
# its pollers keep their place and its schedules their rhythm.
start_stack() {
  GOFLAGS=-buildvcs=false go build -o "$LOCAL/bin/localcloud" ./cmd/localcloud
  # The functions' own sources: the project's and the constructs' module's
  # (stackenv, config, eventsource, totalstable: the handlers import them).
  local fnsrc; fnsrc=$(go list -deps -f '{{with .Module}}{{if or .Main (eq .Path "github.com/oncepay/oncepay/cdk/oncepay")}}{{range $.GoFiles}}{{$.Dir}}/{{.}} {{end}}{{end}}{{end}}' ./lambdas/...)
  # shellcheck disable=SC2086 # one path per word
  local sum; sum=$(cat "$LOCAL/bin/localcloud" "$ROOT/cdk.out/Oncepay.template.json" "$LOCAL/resources.json" \
    "$LOCAL/functions.json" "$ROOT/Makefile" $fnsrc 2>/dev/null | sha256sum | cut -c1-16)
  if alive stack && [ "$(cat "$PIDS/stack.sum" 2>/dev/null)" = "$sum" ]; then
    say "stack already running on $ADMIN_ADDR (unchanged)"
    return
  fi
  # Ready once every function's host bootstrap is built and the custom
  # resources (the ledger migration) have answered: minutes on a cold cache.
  APP_READY_TIMEOUT=${ONCEPAY_STACK_READY_TIMEOUT:-600} ONCEPAY_ADMIN_ADDR=$ADMIN_ADDR start_app stack "$ADMIN_ADDR" "$LOCAL/bin/localcloud" serve -admin "$ADMIN_ADDR"
  echo "$sum" >"$PIDS/stack.sum"
}

start_apps() {
  GOFLAGS=-buildvcs=false go build -o "$LOCAL/bin/pspsim" ./cmd/pspsim
  # The simulator signs webhooks with the PSP secret's webhook_secret, the
  # value the webhook function verifies with: the provisioner resolved it
  # into .local/env. It goes in the environment, not on the command line.
  # It delivers them to the front door's /webhooks/psp route; its keys,
  # charges and undelivered events survive this restart in .local/pspsim.state.
  local whsec=""
  [ -f "$LOCAL/env" ] && whsec=$(sed -n 's/^PSPSIM_WEBHOOK_SECRET=//p' "$LOCAL/env")
  PSPSIM_WEBHOOK_SECRET=$whsec start_app pspsim "$PSPSIM_ADDR" "$LOCAL/bin/pspsim" -addr "$PSPSIM_ADDR" \
    -webhook-url "http://$FRONTDOOR_ADDR/webhooks/psp" -state "$LOCAL/pspsim.state"
  # The front door is the stack's: it serves the template's routes over the
  # function runner on $FRONTDOOR_ADDR. An older checkout's standalone one
  # is stopped.
  stop_pid frontdoor >/dev/null
  start_stack
}

stop_pid() { # name [grace seconds]
  local f=$PIDS/$1.pid grace=${2:-5}
  if [ -f "$f" ]; then
    local pid; pid=$(cat "$f")
    if running "$pid"; then
      if [[ "$1" == stack* ]]; then
        # The stack drains on SIGTERM: invocations in flight run to their
        # end before it stops its environments (its children), so they get
        # no signal of their own until the grace has passed.
        kill "$pid" 2>/dev/null || true
        for _ in $(seq $((grace * 10))); do running "$pid" || break; sleep 0.1; done
      fi
      # setsid may fork: the server can be a child of the recorded pid.
      pkill -TERM -P "$pid" 2>/dev/null || true
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do running "$pid" || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      say "stopped $1"
    fi
    rm -f "$f"
  fi
}

# The two-Region local cloud (issue 15, docs/regions.md): the two-Region
# app's stacks, each run as the one-Region stack is (localcloud up, then
# localcloud serve), with a state directory under .local/regions/<Region>.
# us-east-1 has stores of its own (DynamoDB Local :8002, PostgreSQL :54331)
# so its tables and ledger never meet the one-Region stack's, which has the
# same logical ids; us-west-2 uses the second Region's stores (:8001,
# :54330), where the in-process Region tests make only tables and databases
# of random names. One moto of their own (:4567) keeps both Regions' queues,
# topics and secrets apart from the one-Region stack's (moto keeps Regions
# apart by the request's signature). A PSP simulator of their own (:8091)
# is the one PSP of both. Replication between them is not run here: the test that plays a
# Region failure starts it (internal/localcloud/pgrepl, globaltable) and
# cuts it.
REGIONS_DIR=$LOCAL/regions
RG_MOTO_PORT=${ONCEPAY_REGIONS_MOTO_PORT:-4567}
R1L_DDB_PORT=${ONCEPAY_R1_DDB_PORT:-8002}
R1L_PG_PORT=${ONCEPAY_R1_PG_PORT:-54331}
R1L_DOOR=${ONCEPAY_R1_FRONTDOOR_ADDR:-127.0.0.1:8081}
R2L_DOOR=${ONCEPAY_R2_FRONTDOOR_ADDR:-127.0.0.1:8082}
R1L_ADMIN=${ONCEPAY_R1_ADMIN_ADDR:-127.0.0.1:8072}
R2L_ADMIN=${ONCEPAY_R2_ADMIN_ADDR:-127.0.0.1:8073}
RG_PSPSIM_ADDR=${ONCEPAY_REGIONS_PSPSIM_ADDR:-127.0.0.1:8091}

regions_synth() {
  local out=$REGIONS_DIR/cdk.out
  # Synthesized again when the app, its constructs, the bootstraps or the
  # context below change.
  local -a ctx=(-c oncepay:regions=us-east-1,us-west-2
    -c oncepay:regionUrls=us-east-1=https://api.us-east-1.oncepay.test,us-west-2=https://api.us-west-2.oncepay.test
    -c oncepay:jwtIssuer=https://oncepay-local.test/ -c oncepay:jwtAudience=oncepay-local)
  local sum; sum=$( { echo "${ctx[*]}"; cat cdk.json cdk/oncepay/go.mod build/*/bootstrap;
    find cdk -name '*.go' -not -name '*_test.go' | sort | xargs cat; } 2>/dev/null | sha256sum | cut -c1-16)
  if [ -f "$out/Oncepay-us-west-2.template.json" ] && [ "$(cat "$REGIONS_DIR/synth.sum" 2>/dev/null)" = "$sum" ]; then return; fi
  # The Region URLs must be https to synthesize (a 421 sends callers
  # there); `localcloud up` puts the local front doors in their place.
  (cd "$ROOT" && "$ROOT/_tools/node_modules/.bin/cdk" synth --lookups=false --quiet -o "$out" "${ctx[@]}") >"$LOGS/regions-synth.log" 2>&1 \
    || { tail -n 20 "$LOGS/regions-synth.log" >&2; die "the two-Region app did not synthesize"; }
  echo "$sum" >"$REGIONS_DIR/synth.sum"
  say "two-Region templates in $out"
}

# regions_stack REGION DDB_URL PG_PORT DOOR ADMIN [up flags...]: provision
# one Region's stack and (re)start it when what it runs changed.
regions_stack() {
  local region=$1 ddb=$2 pg=$3 door=$4 admin=$5; shift 5
  local state=$REGIONS_DIR/$region tpl=$REGIONS_DIR/cdk.out/Oncepay-$region.template.json
  mkdir -p "$state/logs"
  local urls='{"us-east-1":"http://'$R1L_DOOR'","us-west-2":"http://'$R2L_DOOR'"}'
  # The Region's own everything: no AWS_* or ONCEPAY_* variable of the
  # caller's reaches it (ports.sh's one-Region URLs, or a test's exported
  # .local/env: an endpoint already set wins over the Region's own).
  local -a clean=(env) v
  for v in $(compgen -e); do case $v in AWS_*|ONCEPAY_*) clean+=(-u "$v") ;; esac; done
  local -a common=(-template "$tpl" -stack "Oncepay-$region" -region "$region" -state "$state" -dynamodb "$ddb"
    -aws "http://127.0.0.1:$RG_MOTO_PORT" -pg-port "$pg" -r2-pg-port 0 -frontdoor "http://$door" -psp "http://$RG_PSPSIM_ADDR"
    -cache "redis://127.0.0.1:$CACHE_PORT/$([ "$region" = us-east-1 ] && echo 1 || echo 2)")
  "${clean[@]}" "$LOCAL/bin/localcloud" up "${common[@]}" -region-urls "$urls" "$@" \
    >"$state/logs/up.log" 2>&1 || { tail -n 30 "$state/logs/up.log" >&2; die "$region: localcloud up failed"; }
  local name=stack-$region
  local sum; sum=$(cat "$LOCAL/bin/localcloud" "$tpl" "$state/resources.json" "$state/functions.json" "$LOCAL/lambdas"/*/bootstrap 2>/dev/null | sha256sum | cut -c1-16)
  if alive "$name" && [ "$(cat "$PIDS/$name.sum" 2>/dev/null)" = "$sum" ]; then
    say "$name already running on $admin (unchanged)"
    return
  fi
  APP_READY_TIMEOUT=${ONCEPAY_STACK_READY_TIMEOUT:-600} start_app "$name" "$admin" \
    "${clean[@]}" ONCEPAY_ENV_FILE="$state/env" "$LOCAL/bin/localcloud" serve "${common[@]}" -admin "$admin"
  echo "$sum" >"$PIDS/$name.sum"
}

regions_up() {
  alive stack || die "regions-up: the one-Region stack is not running (make up first: the PSP simulator and the bootstraps are its)"
  mkdir -p "$REGIONS_DIR"
  start_ddb dynamodb-local-r1 "$R1L_DDB_PORT" & local ddb=$!
  start_moto moto-regions "$RG_MOTO_PORT"
  start_pg postgres-r1 "$R1L_PG_PORT" data-r1
  wait "$ddb" || die "the us-east-1 DynamoDB Local did not start"
  regions_synth
  # The PSP of both Regions, one company's API: a simulator of their own,
  # which sends no webhooks (the one-Region stack's front door, where the
  # other simulator sends them, knows none of their payments).
  if ! alive pspsim-regions; then
    start_app pspsim-regions "$RG_PSPSIM_ADDR" "$LOCAL/bin/pspsim" -addr "$RG_PSPSIM_ADDR" -state "$REGIONS_DIR/pspsim.state"
  fi
  regions_stack us-east-1 "http://127.0.0.1:$R1L_DDB_PORT" "$R1L_PG_PORT" "$R1L_DOOR" "$R1L_ADMIN" \
    -replica-dynamodb "us-west-2=http://127.0.0.1:$R2_DDB_PORT"
  # us-west-2's ledger is the standby of us-east-1's: the primary's roles
  # and schema first (its rows come with the replication link).
  env -u ONCEPAY_PG_PORT "$LOCAL/bin/localcloud" standby -pg-port "$R2_PG_PORT" -primary-pg-port "$R1L_PG_PORT" -db oncepay \
    >"$LOGS/regions-standby.log" 2>&1 || { tail -n 20 "$LOGS/regions-standby.log" >&2; die "the us-west-2 standby ledger could not be made"; }
  regions_stack us-west-2 "http://127.0.0.1:$R2_DDB_PORT" "$R2_PG_PORT" "$R2L_DOOR" "$R2L_ADMIN"
}

regions_down() {
  stop_pid stack-us-west-2 60
  stop_pid stack-us-east-1 60
  rm -f "$PIDS"/stack-us-*.sum
  stop_pid pspsim-regions
  stop_pid dynamodb-local-r1
  stop_pid moto-regions
  pg_stop postgres-r1
}

case "${1:-}" in
  regions-up)
    regions_up
    ;;
  regions-down)
    regions_down
    ;;
  up)
    # The two DynamoDB Locals (a JVM start each) come up while the rest does.
    start_ddb & ddb1=$!
    start_ddb dynamodb-local-r2 "$R2_DDB_PORT" & ddb2=$!
    start_moto
    start_pg postgres "$PG_PORT" data
    start_pg postgres-r2 "$R2_PG_PORT" data-r2
    start_cache
    wait "$ddb1" && wait "$ddb2" || die "a DynamoDB Local did not start"
    ;;
  apps)
    start_apps
    ;;
  down)
    # The stacks first, while the stores and the simulator they drain
    # against still run (a drain is bounded at 55 s; 60 s here).
    regions_down
    stop_pid stack 60
    for n in frontdoor pspsim; do stop_pid "$n"; done
    rm -f "$PIDS/stack.sum"
    stop_pid dynamodb-local
    stop_pid dynamodb-local-r2
    stop_pid moto
    stop_pid cache
    pg_stop postgres
    pg_stop postgres-r2
    ;;
  restart-dynamodb)
    # Only for a run of the emulators alone (the chaos runner's worlds make
    # their own tables): a live stack holds provisioned tables and a stream
    # ARN from its start, which a fresh DynamoDB Local would not have.
    alive stack && die "restart-dynamodb: the live stack runs (make down first): its tables and stream would be gone"
    alive dynamodb-local || die "restart-dynamodb: no DynamoDB Local of this checkout runs on :$DDB_PORT (pid file $PIDS/dynamodb-local.pid)"
    stop_pid dynamodb-local
    port_open "$DDB_PORT" && die "restart-dynamodb: :$DDB_PORT still answers after the stop"
    start_ddb
    ;;
  status)
    port_open "$DDB_PORT" && say "dynamodb-local :$DDB_PORT up" || say "dynamodb-local :$DDB_PORT down"
    port_open "$MOTO_PORT" && say "moto :$MOTO_PORT up" || say "moto :$MOTO_PORT down"
    port_open "$PG_PORT" && say "postgres :$PG_PORT up" || say "postgres :$PG_PORT down"
    port_open "$R2_DDB_PORT" && say "dynamodb-local-r2 :$R2_DDB_PORT up" || say "dynamodb-local-r2 :$R2_DDB_PORT down"
    port_open "$R2_PG_PORT" && say "postgres-r2 :$R2_PG_PORT up" || say "postgres-r2 :$R2_PG_PORT down"
    port_open "$CACHE_PORT" && say "cache :$CACHE_PORT up" || say "cache :$CACHE_PORT down"
    port_open "${PSPSIM_ADDR##*:}" && say "pspsim $PSPSIM_ADDR up" || say "pspsim $PSPSIM_ADDR down"
    port_open "${FRONTDOOR_ADDR##*:}" && say "frontdoor $FRONTDOOR_ADDR up" || say "frontdoor $FRONTDOOR_ADDR down"
    if port_open "${ADMIN_ADDR##*:}"; then
      say "stack $ADMIN_ADDR up"
      if [ -x "$LOCAL/bin/localcloud" ]; then "$LOCAL/bin/localcloud" status -admin "$ADMIN_ADDR" | sed 's/^/  /'
      else go run ./cmd/localcloud status -admin "$ADMIN_ADDR" | sed 's/^/  /'; fi
    else
      say "stack $ADMIN_ADDR down"
    fi
    ;;
  *) die "usage: $0 up|apps|down|status|regions-up|regions-down|restart-dynamodb" ;;
esac
