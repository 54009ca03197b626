#!/usr/bin/env bash
# Start a single-node SLURM cluster on this machine for the `cluster` tests (tests/test_cluster_slurm.py).
#   tests/cluster/slurm_up.sh STATE_DIR     -> prints `export SLURM_CONF=...` lines; exit 0 when the node is idle
#   tests/cluster/slurm_down.sh STATE_DIR   -> stops it
# One node (this machine, 2 CPUs, no cgroups), one partition `debug`, munge auth, accounting through
# slurmdbd on a MariaDB in STATE_DIR (so `sacct` works, and submitit reads job states from it), state
# and logs in STATE_DIR, every daemon on 127.0.0.1. Installs Debian's slurm-wlm, slurmdbd, munge and
# mariadb-server when missing (apt-get; exit 3 with one line when that is impossible).
set -euo pipefail
DIR=${1:?usage: slurm_up.sh STATE_DIR}
mkdir -p "$DIR"/{state,spool,log}
PKGS="slurm-wlm slurmdbd munge mariadb-server"
DIR=$(cd "$DIR" && pwd)
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v slurmdbd >/dev/null \
  || ! command -v mariadbd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $PKGS >"$DIR/log/apt.log" 2>&1 \
      || { echo "cannot install $PKGS: $(tail -1 "$DIR/log/apt.log")"; exit 3; }
  else
    echo "$PKGS are not installed and cannot be (needs root and apt-get)"; exit 3
  fi
fi
# munge: one daemon per machine; reuse a running one
if ! munge -n </dev/null >/dev/null 2>&1; then
  [ -f /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || create-munge-key -f >/dev/null 2>&1; }
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c "/usr/sbin/munged" || /usr/sbin/munged --force
  else
    /usr/sbin/munged --force
  fi
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi
# accounting: MariaDB (its own data dir, TCP on loopback) -> slurmdbd -> slurmctld
DB_PORT=${SLURM_DB_PORT:-3307}
DBD_PORT=${SLURMDBD_PORT:-6819}
if [ ! -d "$DIR/db/mysql" ]; then
  mariadb-install-db --datadir="$DIR/db" --user=root --auth-root-authentication-method=normal --skip-test-db \
    >"$DIR/log/db-install.log" 2>&1 || { echo "mariadb-install-db failed: $(tail -1 "$DIR/log/db-install.log")"; exit 1; }
fi
/usr/sbin/mariadbd --datadir="$DIR/db" --user=root --bind-address=127.0.0.1 --port=$DB_PORT \
  --socket="$DIR/mysql.sock" --pid-file="$DIR/mariadb.pid" --skip-log-bin --innodb-buffer-pool-size=32M \
  >"$DIR/log/mariadb.log" 2>&1 &
for _ in $(seq 100); do mariadb -h127.0.0.1 -P$DB_PORT -uroot -e "select 1" >/dev/null 2>&1 && break; sleep 0.1; done
cat >"$DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=slurm_acct_db
CONF
chmod 600 "$DIR/slurmdbd.conf"
export SLURM_CONF=$DIR/slurm.conf  # slurmdbd reads slurmdbd.conf beside it
/usr/sbin/slurmdbd
NODE=localhost  # the node list names the jax.distributed coordinator host: loopback everywhere
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat >"$DIR/slurm.conf" <<CONF
ClusterName=scalelab
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MessageTimeout=30
ReturnToService=2
JobRequeue=1
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
MpiDefault=none
KillWait=5
MinJobAge=300
InactiveLimit=0
DefMemPerCPU=$(( MEM / CPUS ))
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$(hostname -s) CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF=$DIR/slurm.conf
for _ in $(seq 100); do
  sacctmgr -i show cluster >/dev/null 2>&1 && break; sleep 0.1
done
sacctmgr -i add cluster scalelab >/dev/null 2>&1 || true
/usr/sbin/slurmctld -f "$SLURM_CONF" -i
/usr/sbin/slurmd -f "$SLURM_CONF" -N $NODE
for _ in $(seq 100); do
  state=$(sinfo -h -N -n $NODE -o %T 2>/dev/null || true)
  case "$state" in idle*) echo "export SLURM_CONF=$SLURM_CONF"; exit 0 ;; esac
  sleep 0.2
done
echo "SLURM node did not come up (state: ${state:-none}); logs in $DIR/log: $(tail -1 "$DIR/log/slurmctld.log" 2>/dev/null)"
exit 1
