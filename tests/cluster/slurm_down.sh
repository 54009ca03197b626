#!/usr/bin/env bash
# Stop the cluster tests/cluster/slurm_up.sh STATE_DIR started (slurmd, slurmctld, slurmdbd and its MariaDB; munge stays).
set -u
DIR=${1:?usage: slurm_down.sh STATE_DIR}
for d in slurmd slurmctld slurmdbd mariadb; do
  pid=$(cat "$DIR/$d.pid" 2>/dev/null) && kill "$pid" 2>/dev/null
done
for _ in $(seq 50); do
  alive=0
  for d in slurmd slurmctld slurmdbd mariadb; do pid=$(cat "$DIR/$d.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && exit 0
  sleep 0.1
done
for d in slurmd slurmctld slurmdbd mariadb; do pid=$(cat "$DIR/$d.pid" 2>/dev/null) && kill -9 "$pid" 2>/dev/null; done
exit 0
