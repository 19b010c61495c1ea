#!/usr/bin/env bash
# Start, stop and describe the real services the tests and benchmarks use.
#
#   scripts/services.sh up      install what is missing, start everything, wait until ready
#   scripts/services.sh down    stop everything started by "up"
#   scripts/services.sh env     print the environment (export lines) that points clients at them
#   scripts/services.sh status  say what is running
#   scripts/services.sh restart minio|postgres   restart one server, keeping its data (fault tests)
#
# Binaries built from source are cached in $EXA_TOOLS (default ~/.cache/exa-tools/bin);
# service state lives in $EXA_SERVICES_DIR (default .services/ in the checkout).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tools=${EXA_TOOLS:-$HOME/.cache/exa-tools/bin}
state=${EXA_SERVICES_DIR:-$here/.services}

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
TOXIPROXY_VERSION=v2.5.0
HELM_VERSION=v3.22.0
MINIO_PORT=${MINIO_PORT:-9000}
TOXIPROXY_PORT=${TOXIPROXY_PORT:-8474}
TOXIC_S3_PORT=${TOXIC_S3_PORT:-9100}
PG_PORT=${PG_PORT:-5433}
SSH_PORT=${SSH_PORT:-2222}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_PASSWORD=${PG_PASSWORD:-exa-pg-secret}
MINIO_USER=${MINIO_USER:-exa-minio}
MINIO_PASSWORD=${MINIO_PASSWORD:-exa-minio-secret}

log() { printf 'services: %s\n' "$*" >&2; }

go_install() {  # name module@version
  local name=$1 module=$2
  [ -x "$tools/$name" ] && return 0
  command -v go >/dev/null || { log "Go is needed to build $name; install Go first"; exit 1; }
  log "building $name from the Go module proxy (first time only, may take minutes)"
  mkdir -p "$tools"
  local tmp; tmp=$(mktemp -d)
  GOBIN="$tmp" go install "$module"
  mv "$tmp"/* "$tools/$name"; rmdir "$tmp"
}

install_all() {
  go_install minio "github.com/minio/minio@$MINIO_VERSION"
  go_install toxiproxy-server "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"  # chart tests (tests/test_helm.py)
}

wait_http() {  # url seconds
  local url=$1 deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$url" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { log "timed out waiting for $url"; return 1; }
    sleep 0.2
  done
}

wait_http_any() {  # url seconds: any HTTP answer (even 401) means the server is up
  local url=$1 deadline=$((SECONDS + $2))
  until curl -s -o /dev/null "$url" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { log "timed out waiting for $url"; return 1; }
    sleep 0.2
  done
}

running() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

start() {  # name command...
  local name=$1; shift
  if running "$name"; then log "$name already running"; return 0; fi
  mkdir -p "$state/log"
  nohup "$@" >"$state/log/$name.log" 2>&1 &
  echo $! >"$state/$name.pid"
}

up_minio() {
  mkdir -p "$state/minio-data"
  MINIO_ROOT_USER=$MINIO_USER MINIO_ROOT_PASSWORD=$MINIO_PASSWORD MINIO_BROWSER=off MINIO_PROMETHEUS_AUTH_TYPE=public \
    start minio "$tools/minio" server "$state/minio-data" --quiet \
      --address "127.0.0.1:$MINIO_PORT" --console-address "127.0.0.1:$((MINIO_PORT + 1))"
  wait_http "http://127.0.0.1:$MINIO_PORT/minio/health/ready" 60
  log "minio ready on 127.0.0.1:$MINIO_PORT"
}

up_toxiproxy() {
  start toxiproxy "$tools/toxiproxy-server" -host 127.0.0.1 -port "$TOXIPROXY_PORT"
  wait_http "http://127.0.0.1:$TOXIPROXY_PORT/version" 30
  log "toxiproxy ready on 127.0.0.1:$TOXIPROXY_PORT"
}

up_postgres() {
  # A throwaway PostgreSQL 15 cluster; postgres refuses to run as root.
  local dir="$state/pg" as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  if [ ! -x "$PG_BIN/initdb" ]; then
    log "installing PostgreSQL 15 (apt)"; apt-get install -y -q postgresql-15 >/dev/null
  fi
  if ! "${as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    rm -rf "$dir"; mkdir -p "$dir/sock"
    [ "$(id -u)" = 0 ] && chown -R postgres: "$dir"
    local pwfile="$dir/pw"; echo "$PG_PASSWORD" >"$pwfile"
    [ "$(id -u)" = 0 ] && chown postgres: "$pwfile"
    "${as[@]}" "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=scram-sha-256 \
      --pwfile="$pwfile" --no-sync >"$dir/initdb.log" 2>&1
    rm -f "$pwfile"
    "${as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o \
      "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $dir/sock -c fsync=off -c max_connections=200" \
      start >/dev/null
  fi
  log "postgres ready on 127.0.0.1:$PG_PORT"
}

restart_postgres() {
  local dir="$state/pg" as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  "${as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w restart >/dev/null
  log "postgres restarted"
}

down_postgres() {
  local dir="$state/pg" as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  [ -d "$dir/data" ] && "${as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1
  rm -rf "$dir"
}

up_slurm() {
  # A single-node Slurm (slurmctld + slurmd) with munge, state in $state/slurm.
  local dir="$state/slurm"
  if ! command -v slurmrestd >/dev/null; then
    log "installing Slurm, slurmrestd and munge (apt)"
    apt-get install -y -q --no-install-recommends slurm-wlm munge slurmrestd \
      slurm-wlm-jwt-plugin >/dev/null
  fi
  if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    log "slurm already running"; return 0
  fi
  mkdir -p "$dir/spool" "$dir/state" "$dir/log" /run/munge
  chown munge: /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    chown munge: /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
  [ -s "$dir/jwt.key" ] || { dd if=/dev/urandom of="$dir/jwt.key" bs=32 count=1 2>/dev/null;
    chmod 600 "$dir/jwt.key"; }
  local cpus mem
  cpus=$(nproc); mem=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat >"$dir/slurm.conf" <<CONF
ClusterName=exa
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$dir/jwt.key
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MinJobAge=600
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
  slurmctld -f "$dir/slurm.conf"
  slurmd -f "$dir/slurm.conf" -N localhost
  local deadline=$((SECONDS + 30))
  until SLURM_CONF="$dir/slurm.conf" sinfo -h -o %T 2>/dev/null | grep -qE "idle|mixed"; do
    [ $SECONDS -lt $deadline ] || { log "slurm did not become ready; see $dir/log"; return 1; }
    sleep 0.3
  done
  SLURM_JWT=daemon nohup slurmrestd -f "$dir/slurm.conf" -a rest_auth/jwt -s openapi/v0.0.38 \
    -u nobody "127.0.0.1:${SLURMRESTD_PORT:-6820}" >"$dir/log/slurmrestd.log" 2>&1 &
  echo $! >"$dir/slurmrestd.pid"
  wait_http_any "http://127.0.0.1:${SLURMRESTD_PORT:-6820}/openapi" 30
  log "slurm ready (SLURM_CONF=$dir/slurm.conf, slurmrestd on 127.0.0.1:${SLURMRESTD_PORT:-6820})"
}

up_sshd() {
  # sshd on 127.0.0.1:$SSH_PORT with its own host key and one client key: the "login node".
  local dir="$state/sshd"
  if [ -f "$dir/sshd.pid" ] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then
    log "sshd already running"; return 0
  fi
  [ -x /usr/sbin/sshd ] || { log "installing openssh-server (apt)";
    apt-get install -y -q --no-install-recommends openssh-server >/dev/null; }
  rm -rf "$dir"; mkdir -p "$dir" /run/sshd
  ssh-keygen -q -t ed25519 -N "" -f "$dir/host_key"
  ssh-keygen -q -t ed25519 -N "" -f "$dir/client_key"
  cp "$dir/client_key.pub" "$dir/authorized_keys"
  echo "[127.0.0.1]:$SSH_PORT $(cat "$dir/host_key.pub")" >"$dir/known_hosts"
  cat >"$dir/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $SSH_PORT
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
MaxSessions 100
MaxStartups 100
AcceptEnv SLURM_CONF
SetEnv SLURM_CONF=$state/slurm/slurm.conf
CONF
  /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
  log "sshd ready on 127.0.0.1:$SSH_PORT"
}

down_sshd() {
  local dir="$state/sshd"
  [ -f "$dir/sshd.pid" ] && kill "$(cat "$dir/sshd.pid")" 2>/dev/null
  rm -rf "$dir"
}

down_slurm() {
  local dir="$state/slurm"
  for d in slurmrestd slurmd slurmctld; do
    [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
  done
  sleep 0.5
  rm -rf "$dir"
}

stop() {
  local name=$1
  if running "$name"; then
    local pid; pid=$(cat "$state/$name.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$state/$name.pid"
}

print_env() {
  cat <<ENV
export EXA_MINIO_ENDPOINT=http://127.0.0.1:$MINIO_PORT
export EXA_MINIO_USER=$MINIO_USER
export EXA_MINIO_PASSWORD=$MINIO_PASSWORD
export EXA_TOXIPROXY_API=http://127.0.0.1:$TOXIPROXY_PORT
export EXA_TOXIC_S3_PORT=$TOXIC_S3_PORT
export EXA_TOOLS=$tools
export EXA_PG_URL=postgresql://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/postgres
export SLURM_CONF=$state/slurm/slurm.conf
export EXA_SLURMRESTD_URL=http://127.0.0.1:${SLURMRESTD_PORT:-6820}
export EXA_SSH_HOST=127.0.0.1
export EXA_SSH_PORT=$SSH_PORT
export EXA_SSH_USER=$(id -un)
export EXA_SSH_KEY=$state/sshd/client_key
export EXA_SSH_KNOWN_HOSTS=$state/sshd/known_hosts
ENV
}

case "${1:-}" in
  up) install_all; up_minio; up_toxiproxy; up_postgres; up_slurm; up_sshd ;;
  down) stop toxiproxy; stop minio; rm -rf "$state/minio-data"; down_postgres; down_slurm
    down_sshd ;;
  env) print_env ;;
  restart) case "${2:-}" in
      minio) stop minio; up_minio ;;
      postgres) restart_postgres ;;
      *) log "restart what? minio or postgres"; exit 2 ;;
    esac ;;
  status) for s in minio toxiproxy; do running $s && echo "$s running" || echo "$s stopped"; done
    [ -f "$state/pg/data/postmaster.pid" ] && echo "postgres running" || echo "postgres stopped" ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
