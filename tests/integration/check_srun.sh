#!/usr/bin/env bash
# Data-parallel training launched by Slurm's srun: a one-node Slurm cluster (munged, slurmctld, slurmd from
# Debian's packages, every file of theirs in a scratch folder, on ports of its own) starts two ranks of
# `kestrel train`; they read their ranks from MPI through Slurm's PMIx, train as one process does, and only
# rank 0 speaks and writes. Needs root (the daemons) and the packages; skipped (status 77) without them.
#   check_srun.sh KESTREL_CLI
set -euo pipefail
cli=$1
for tool in munged slurmctld slurmd srun scontrol sinfo; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is not installed (Debian: slurmd slurmctld slurm-client munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "skipped: starting Slurm's daemons needs root"; exit 77; }

# Run inside a Slurm job (CI on a cluster), the job's own variables would steer this cluster's srun.
while read -r name; do unset "$name"; done < <(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p')
dir=$(mktemp -d /tmp/kestrel_srun.XXXXXX)
export SLURM_CONF=$dir/slurm.conf
host=$(hostname -s)
mkdir -p "$dir"/{state,spool,log}
daemons=()
stop() {
  # The job's ranks first (slurmstepd outlives the daemons otherwise), then the daemons.
  local jobs
  jobs=$(squeue -h -o %i 2>/dev/null || true)
  [ -z "$jobs" ] || scancel --quiet --full $jobs >/dev/null 2>&1 || true
  scontrol shutdown >/dev/null 2>&1 || true
  sleep 0.5
  for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 1' INT TERM  # ctest's timeout: stop the cluster on the way out

# munge authenticates Slurm's messages: a key and a socket of this cluster's own.
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --foreground --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed" >"$dir/log/munged.out" 2>&1 &
daemons+=($!)

# No cgroups (proctrack/linuxproc, task/none): containers rarely allow them. Four CPUs on any machine
# (config_overrides), so two ranks fit on a 2-core CI runner.
cat > "$SLURM_CONF" <<EOF
ClusterName=kestrel_test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=pmix
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
for _ in $(seq 100); do [ -S "$dir/munge.socket" ] && break; sleep 0.1; done
slurmctld -D -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D -f "$SLURM_CONF" >"$dir/log/slurmd.out" 2>&1 &
daemons+=($!)
for _ in $(seq 200); do [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.1; done
if [ "$(sinfo -h -o %T 2>/dev/null)" != idle ]; then
  echo "FAIL: the test cluster's node did not come up"; tail -n 20 "$dir"/log/*.log; exit 1
fi

# A small MLP on synthetic data: two ranks under srun, then one process alone.
cat > "$dir/mlp.json" <<'EOF'
{"name": "srun_mlp", "input": {"shape": [32]}, "layers": [
  {"type": "linear", "out_features": 64}, {"type": "relu"}, {"type": "linear", "out_features": 10}]}
EOF
cat > "$dir/run.json" <<'EOF'
{"model": "mlp.json", "data": {"dataset": "synthetic", "train_samples": 500, "test_samples": 48, "classes": 10, "workers": 1},
 "optimizer": {"type": "adam", "lr": 0.001}, "batch_size": 24, "epochs": 1, "max_steps": 20, "seed": 3,
 "log_every": 5, "backend": {"preference": ["cpu"]}}
EOF
output=$(timeout 180 srun -n 2 --immediate=30 "$cli" train "$dir/run.json" --out "$dir/both" --no-progress 2>&1) || {
  echo "FAIL: srun -n 2 kestrel train ended with status $?"; echo "$output"; exit 1; }
echo "$output"
"$cli" train "$dir/run.json" --out "$dir/alone" --quiet

fail() { echo "FAIL: $*"; exit 1; }
grep -q "data-parallel over 2 ranks started by srun (2 processes)" <<<"$output" || fail "the ranks did not see srun's world of 2"
[ "$(grep -c "final: 20 steps" <<<"$output")" -eq 1 ] || fail "not exactly one rank (rank 0) reported the end"
[ -f "$dir/both/checkpoint.json" ] || fail "rank 0 wrote no checkpoint"
python3 - "$dir/both/summary.json" "$dir/alone/summary.json" <<'EOF' || fail "the two ranks did not train as one process"
import json, sys
both, alone = (json.load(open(path)) for path in sys.argv[1:3])
assert both["world_size"] == 2, both["world_size"]
assert abs(both["test_loss"] - alone["test_loss"]) <= 1e-5 * alone["test_loss"], (both["test_loss"], alone["test_loss"])
assert both["test_accuracy"] == alone["test_accuracy"], (both["test_accuracy"], alone["test_accuracy"])
print(f"srun: 2 ranks test loss {both['test_loss']:.6f}, one process {alone['test_loss']:.6f}")
EOF
echo "PASS"
