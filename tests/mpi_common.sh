# mpi_common.sh — sourced by the MPI tests (label mpi) once $tower names the
# binary: skips (exit 77) without mpirun, with a tower built without MPI, or
# where mpirun cannot start 2 ranks here (the probe: a one-process mode under
# mpirun -np 2 must be refused with its one line); exports Open MPI's
# settings for root and for ranks on one machine (shared memory, then TCP on
# loopback); mpi=(${mpi_timeout:+timeout "$mpi_timeout"} mpirun --oversubscribe --bind-to none) for the test's jobs
# (each under `timeout $mpi_timeout` when the test sets mpi_timeout first),
# and $probe holds the probe's output.
command -v mpirun >/dev/null 2>&1 || { echo "skipped: mpirun is missing (apt-get install openmpi-bin)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
mpi=(${mpi_timeout:+timeout "$mpi_timeout"} mpirun --oversubscribe --bind-to none)
probe=$("${mpi[@]}" -np 2 "$tower" train --variable_update replicated --all_reduce host --data /nonexistent-probe 2>&1 || true)
if echo "$probe" | grep -q "built without MPI"; then echo "skipped: this tower was built without MPI"; exit 77; fi
if ! echo "$probe" | grep -q "runs in one process, and mpirun started 2 ranks"; then
  echo "skipped: mpirun cannot start 2 ranks here: $probe" | head -5
  exit 77
fi

# mpi_rank_pid RANK: the process of that rank among the children of $launcher (the test's backgrounded mpirun),
# or nothing.
mpi_rank_pid() {
  local p
  # the ranks are mpirun's children, and mpirun is $launcher or, under `timeout`, its child
  for p in $(pgrep -P "$launcher" 2>/dev/null) $(pgrep -P "$(pgrep -P "$launcher" | head -1)" 2>/dev/null); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$p"
  done
  return 0
}

# mpi_kill_rank RANK SECONDS: with $launcher the test's backgrounded mpirun, find RANK's process (within
# 20 s), let the job run SECONDS more, kill -9 that process, and check that the whole job ends within 10 s
# with a non-zero status (calls the test's fail otherwise).  Sets $killed_rc (the job's status) and
# $killed_took (seconds from the kill to the end).
mpi_kill_rank() {
  local rank=$1 victim="" t_kill
  for _ in $(seq 1 200); do
    victim=$(mpi_rank_pid "$rank" | head -1)
    [ -n "$victim" ] && break
    sleep 0.1
  done
  [ -n "$victim" ] || { kill "$launcher"; fail "could not find rank $rank's process"; }
  sleep "$2"
  t_kill=$(date +%s.%N)
  kill -9 "$victim"
  for _ in $(seq 1 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then kill -9 "$launcher"; fail "the job still runs 10 s after rank $rank was killed"; fi
  killed_rc=0
  wait "$launcher" || killed_rc=$?
  killed_took=$(echo "$(date +%s.%N) - $t_kill" | bc)
  [ "$killed_rc" != 0 ] || fail "the job exited 0 after rank $rank was killed"
  return 0
}

# mpi_stop_job NAME SIG TARGET WANT MULTIPLE CHECKER WAIT_REGEX NP TRAIN_ARGS...: a stop by signal.  Starts
# `tower train TRAIN_ARGS --train_dir $work/NAME` on NP ranks in the background ($launcher, rank 0's log in
# $work/NAME.log), waits up to 120 s for a log line matching WAIT_REGEX, sends SIG to every rank's process
# (TARGET all) or to rank TARGET's, then checks: mpirun ends within 10 s and leaves no rank process running (a
# zombie on its way is fine); rank 0 says "stop requested by WANT after step N" and "stopped at step N", N a
# multiple of MULTIPLE (every worker made the same steps); `CHECKER check DIR` loads model.ckpt-N as the latest
# with no partial checkpoint.  Uses the test's $work, $tower and fail; clears launcher; sets mpi_stop_step (N)
# and mpi_stop_sec (seconds from the signal to mpirun's end).
mpi_stop_job() {
  local name=$1 sig=$2 target=$3 want=$4 multiple=$5 checker=$6 wait_re=$7 np=$8 p victim pids sent
  shift 8
  local dir=$work/$name log=$work/$name.log deadline=$((SECONDS + 120))
  "${mpi[@]}" -np "$np" "$tower" train "$@" --train_dir "$dir" >"$log" 2>&1 &
  launcher=$!
  until grep -qs -- "$wait_re" "$log"; do
    kill -0 "$launcher" 2>/dev/null || { cat "$log"; fail "$name: the run ended before a line matching '$wait_re'"; }
    [ $SECONDS -lt $deadline ] || { cat "$log"; fail "$name: no line matching '$wait_re' in 120 s"; }
    sleep 0.1
  done
  pids=$(pgrep -P "$launcher" | tr '\n' ' ')
  victim=$pids
  [ "$target" = all ] || victim=$(mpi_rank_pid "$target")
  [ -n "$victim" ] || fail "$name: could not find rank $target's process"
  # shellcheck disable=SC2086
  kill "-$sig" $victim
  sent=$SECONDS
  for _ in $(seq 1 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then cat "$log"; fail "$name: the job still runs 10 s after SIG$sig"; fi
  wait "$launcher" 2>/dev/null || true
  launcher=
  mpi_stop_sec=$((SECONDS - sent))
  for p in $pids; do
    for _ in $(seq 1 20); do
      [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] || break
      sleep 0.1
    done
    if [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ]; then
      fail "$name: rank process $p still runs after mpirun ended"
    fi
  done
  mpi_stop_step=$(sed -n "s/.*stop requested by $want after step \([0-9]*\): checkpoint.*/\1/p" "$log" | head -1)
  [ -n "$mpi_stop_step" ] || { cat "$log"; fail "$name: rank 0 printed no 'stop requested by $want after step N' line"; }
  grep -q "stopped at step $mpi_stop_step;" "$log" || { cat "$log"; fail "$name: rank 0 did not finish at step $mpi_stop_step"; }
  [ $((mpi_stop_step % multiple)) = 0 ] ||
    fail "$name: stopped at step $mpi_stop_step, not a multiple of $multiple workers (their steps differ)"
  "$checker" check "$dir" >"$dir.check" || { cat "$dir.check"; fail "$name: a checkpoint does not load"; }
  [ "$(sed -n 's/^latest //p' "$dir.check")" = "$mpi_stop_step" ] ||
    { cat "$dir.check"; fail "$name: the latest checkpoint is not step $mpi_stop_step"; }
  if grep -q "^tmp \|^orphan \|^bad " "$dir.check"; then cat "$dir.check"; fail "$name: a partial checkpoint is left"; fi
}

# refused WHAT REGEX COMMAND...: COMMAND exits non-zero and prints a line matching REGEX (uses the test's $work
# and fail).
refused() {
  local what=$1 re=$2
  shift 2
  if "$@" >"$work/refused.log" 2>&1; then fail "$what was accepted"; fi
  grep -q -- "$re" "$work/refused.log" || { cat "$work/refused.log"; fail "$what: no line says why"; }
  echo "$what: refused ($(grep -m1 -o -- "$re.*" "$work/refused.log" | cut -c1-150))"
}

# logged LOG: rank 0's logged steps, space-separated.
logged() { sed -n 's/.*: step \([0-9]*\), loss = .*/\1/p' "$1" | tr '\n' ' '; }

# steps_rise WHAT LOG S...: rank 0's logged steps in LOG only grow, and include every S.
steps_rise() {
  local what=$1 log=$2 steps prev=0 s
  shift 2
  steps=$(logged "$log")
  for s in $steps; do [ "$s" -gt "$prev" ] || fail "$what: rank 0's logged steps go back ($steps)"; prev=$s; done
  for s in "$@"; do echo " $steps " | grep -q " $s " || { cat "$log"; fail "$what: rank 0 logged no step $s"; }; done
}
