#!/usr/bin/env bash
# test_omp_wait_policy.sh TOWER — Tower's OpenMP wait policy (cmd/main.c,
# docs/performance.md): with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT in
# the environment the process starts again with OMP_WAIT_POLICY=passive, so
# GNU OpenMP's spin count is 0 (OMP_DISPLAY_ENV=verbose prints the runtime's
# own value: 300000 from the first start, then 0 from the second); an
# explicit OMP_WAIT_POLICY=active or GOMP_SPINCOUNT wins, with no second
# start; the command's output appears once.  Skipped (77) where the OpenMP
# runtime does not print GOMP_SPINCOUNT (not GNU OpenMP).
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
echo "OpenMP wait policy: passive by default, the environment's when set: ok"
