#!/usr/bin/env bash
# A one-machine SLURM cluster for tests and benchmarks (Debian's slurm-wlm + munge, run as root):
#   tools/local_slurm.sh start    # writes /etc/slurm/{slurm,gres}.conf, starts munged, slurmctld, slurmd
#   tools/local_slurm.sh stop     # stops exactly the daemons it started (PIDs in /run/precisionflow-slurm)
# Partitions: debug (default) and gpu; the node carries one fake GPU (gres gpu:fake:1, File=/dev/null),
# so jobs asking --gpus=1 are scheduled and see CUDA_VISIBLE_DEVICES=0. No slurmdbd: use the profile's
# status command (squeue); MinJobAge=3600 keeps finished jobs visible to scontrol for an hour: a test
# run on a busy machine outlasts five minutes, and its first jobs vanished before they were checked.
# The config lives at the default path: SLURM's job steps strip SLURM_CONF (../REFERENCE.md).
set -euo pipefail
STATE=/run/precisionflow-slurm
host=$(hostname -s)

start() {
  for tool in munged slurmctld slurmd sbatch; do
    command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y slurm-wlm munge" >&2; exit 3; }
  done
  [ "$(id -u)" = 0 ] || { echo "local SLURM needs root (it starts system daemons)" >&2; exit 3; }
  mkdir -p "$STATE" /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
  [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none; }
  chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  memory_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=precisionflow
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MinJobAge=3600
ReturnToService=2
GresTypes=gpu
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$memory_mb Gres=gpu:fake:1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP
CONF
  cat > /etc/slurm/gres.conf <<CONF
AutoDetect=off
NodeName=$host Name=gpu Type=fake File=/dev/null
CONF
  if [ ! -s "$STATE/munged.pid" ] || ! kill -0 "$(cat "$STATE/munged.pid")" 2>/dev/null; then
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid --force
    sleep 0.5; cp /run/munge/munged.pid "$STATE/munged.pid"
  fi
  slurmctld -i
  slurmd
  for _ in $(seq 60); do
    state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
    case "$state" in idle|mix|alloc) echo "local SLURM up: node $host ($state)"; return 0;; esac
    sleep 1
  done
  echo "local SLURM did not come up; see /var/log/slurm/" >&2; stop; exit 1
}

stop() {
  for daemon in slurmd slurmctld munged; do
    if [ -s "$STATE/$daemon.pid" ]; then
      pid=$(cat "$STATE/$daemon.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done  # daemons take a moment
      rm -f "$STATE/$daemon.pid"
    fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
