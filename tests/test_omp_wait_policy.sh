#!/usr/bin/env bash
# test_omp_wait_policy.sh TOWER — Tower's OpenMP wait policy (cmd/main.c,
# docs/performance.md): with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT in
# the environment the process starts again with its own setting, which
# OMP_DISPLAY_ENV=verbose shows (the runtime's 300000 from the first start,
# then the second start's count): passive (0) for commands without OpenMP
# teams of 2+ threads (--version), towers of one thread each (train
# --num_towers C on C cores, bench --towers C) and GPU towers (--device gpu);
# a short spin (OMP_WAIT_POLICY=active, GOMP_SPINCOUNT=10000) for eval, for
# train with one CPU tower of every core (--device cpu, the CPU default of
# one tower), for bench whose smallest --towers count gives a tower 2+
# threads; passive again where OMP_NUM_THREADS=1 leaves one thread.  An
# explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT wins, with no second start; the
# command's output appears once.  Skipped (77) where the OpenMP runtime does
# not print GOMP_SPINCOUNT (not GNU OpenMP).
set -euo pipefail
tower=$1
fail() { echo "FAIL: $*"; exit 1; }
spin() { # env settings...: the GOMP_SPINCOUNT lines the run printed, space-separated
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" OMP_DISPLAY_ENV=verbose "$tower" --version 2>&1 |
        sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tr '\n' ' ' | sed 's/ $//'
}
out=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$tower" --version)
[ "$(grep -c '^tower ' <<<"$out")" = 1 ] || fail "tower --version printed its line $(grep -c '^tower ' <<<"$out") times"
default=$(spin)
[ -n "$default" ] || { echo "skipped: the OpenMP runtime prints no GOMP_SPINCOUNT"; exit 77; }
[ "$default" = "300000 0" ] || fail "unset: spin counts '$default', expected '300000 0' (a second start with passive)"
[ "$(spin OMP_WAIT_POLICY=active)" = 30000000000 ] || fail "OMP_WAIT_POLICY=active: '$(spin OMP_WAIT_POLICY=active)'"
[ "$(spin OMP_WAIT_POLICY=passive)" = 0 ] || fail "OMP_WAIT_POLICY=passive: '$(spin OMP_WAIT_POLICY=passive)'"
[ "$(spin GOMP_SPINCOUNT=1000)" = 1000 ] || fail "GOMP_SPINCOUNT=1000: '$(spin GOMP_SPINCOUNT=1000)'"
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # the CPUs this process may run on, as cmd/main.c counts
if [ "$cores" -ge 2 ]; then
    check() { # expected, then [VAR=value ...] and tower's arguments
        local want=$1
        shift
        local settings=()
        while [[ $# -gt 0 && $1 == *=* && $1 != --* ]]; do settings+=("$1"); shift; done
        local got
        got=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS -u OMPI_COMM_WORLD_LOCAL_SIZE \
            "${settings[@]}" OMP_DISPLAY_ENV=verbose "$tower" "$@" 2>&1 |
            sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tr '\n' ' ' | sed 's/ $//')
        [ "$got" = "$want" ] || fail "${settings[*]} tower $*: spin counts '$got', expected '$want'"
    }
    check "300000 10000" eval --help
    check "300000 10000" train --device cpu --help
    check "300000 10000" train --device=cpu --num_towers=1 --help
    check "300000 0" train --device cpu --num_towers "$cores" --help
    check "300000 0" train --device gpu --help
    check "300000 10000" bench --device cpu --help
    check "300000 10000" bench --device cpu --towers "$cores,1" --help
    check "300000 0" bench --device cpu --towers "$cores" --help
    check "300000 0" OMP_NUM_THREADS=1 eval --help
    [ "$(env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=0 OMP_DISPLAY_ENV=verbose "$tower" eval --help 2>&1 |
        grep -c "GOMP_SPINCOUNT = '0'")" = 1 ] || fail "GOMP_SPINCOUNT=0 with eval: not the environment's, or a second start"
    echo "the spin for teams of 2+ threads (eval, one CPU tower, bench from one tower) on $cores cores: ok"
else
    echo "one core: no command runs a team of 2 threads (the spin cases not checked)"
fi
echo "OpenMP wait policy: passive by default, a short spin for teams, the environment's when set: ok"
