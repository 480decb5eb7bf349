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
