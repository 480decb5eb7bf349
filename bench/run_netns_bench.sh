#!/usr/bin/env bash
# run_netns_bench.sh [TOWER] [OUT_DIR] — the ranks dimension of `tower bench`
# over emulated links (issue 17, "ranks in network namespaces joined by veth
# pairs with a rate limit"): each rank runs in a network namespace of its own
# (a "host"), every host is joined to a switch namespace by a veth pair, and
# both ends of every pair are rate-limited with tc's token bucket (tbf) to
# each rate of RATES in turn; then bench/run_ranks_bench.sh runs
# `mpirun -np R tower bench` across those hosts (MPI's TCP transport only: no
# shared memory between hosts), with the ping-pong measured on the same links.
#
# Where it sits: bench/, not a test (it asserts nothing).  Needs root (or
# CAP_NET_ADMIN), iproute2's ip and tc, and Open MPI's mpirun.  It makes only
# namespaces of its own (tower_nb<pid>_*), and gives addresses only inside them
# (10.213.<n>.0/24, n from the pid); the root namespace gets no address, no
# route and no qdisc: mpirun itself runs in host 0's namespace and starts the
# other hosts' daemons through an rsh agent that enters their namespace
# instead of ssh.  Everything it made is removed on exit, also on failure or
# Ctrl-C.
#
# Environment: RATES (default "1gbit 10gbit", tc's units), RANKS ("2 4"),
# DELAY (optional one-way delay per link through netem, e.g. 50us; default
# none), and run_ranks_bench.sh's MODELS, MODES, TOWERS, BATCH, STEPS, WARMUP, PS_DEDICATED.
# Output: OUT_DIR/<rate>/ranks_<R>.{csv,log} and the table run_ranks_bench.sh
# prints, once per rate.  Ranks still share this machine's cores: the link is
# emulated, the compute is not.
set -euo pipefail
tower=$(readlink -f "${1:-build/cmd/tower}")
out=$(readlink -f "${2:-bench_netns_out}")
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "run_netns_bench.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, veth pairs and tc)"
for c in ip tc mpirun; do command -v "$c" >/dev/null || die "$c is missing (apt-get install iproute2 openmpi-bin)"; done
[ -x "$tower" ] || die "$tower: no tower binary (build first)"
ranks_list=${RANKS:-2 4}
n_hosts=0
for r in $ranks_list; do [ "$r" -gt "$n_hosts" ] && n_hosts=$r; done
[ "$n_hosts" -ge 1 ] && [ "$n_hosts" -le 16 ] || die "RANKS '$ranks_list': 1 to 16 ranks"

tag="tower_nb$$"
short="tnb$(($$ % 100000))"                 # interface names: at most 15 bytes
subnet="10.213.$(($$ % 200 + 20))"
work=$(mktemp -d "/tmp/${tag}-XXXXXX")
sw="${tag}_sw"
cleanup() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^${tag}_" || true); do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$sw"
ip netns exec "$sw" ip link add "${short}br" type bridge
ip netns exec "$sw" ip link set "${short}br" up
: > "$work/map"
: > "$work/hosts"
for ((i = 0; i < n_hosts; i++)); do
  ns="${tag}_h$i"
  ip netns add "$ns"
  ip link add "${short}h$i" netns "$ns" type veth peer name "${short}s$i" netns "$sw"
  ip netns exec "$sw" ip link set "${short}s$i" master "${short}br"
  ip netns exec "$sw" ip link set "${short}s$i" up
  ip netns exec "$ns" ip addr add "$subnet.$((i + 1))/24" dev "${short}h$i"
  ip netns exec "$ns" ip link set "${short}h$i" up
  ip netns exec "$ns" ip link set lo up
  echo "$subnet.$((i + 1)) $ns" >> "$work/map"
  echo "$subnet.$((i + 1)) slots=1" >> "$work/hosts"
done
cat > "$work/agent.sh" <<EOF
#!/bin/sh
# mpirun's rsh agent: "\$1" is a host of the hostfile, the rest the command
# for its shell; run it inside that host's namespace instead of over ssh.
ns=\$(awk -v h="\$1" '\$1 == h {print \$2}' "$work/map")
[ -n "\$ns" ] || { echo "agent: unknown host \$1" >&2; exit 1; }
shift
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/agent.sh"

# tbf on both ends of every link (each direction's egress); the bucket holds
# 1 ms at the rate (at least 64 KiB: a longer bucket lets a 16 MiB message
# pass above the rate), and the queue 50 ms before it drops.
set_rate() {
  local rate=$1 bits burst
  local num=${rate%%[kmg]bit} mult
  case ${rate#"$num"} in gbit) mult=1000000000 ;; mbit) mult=1000000 ;; kbit) mult=1000 ;; *) mult=0 ;; esac
  [[ "$num" =~ ^[0-9]+$ ]] && [ "$mult" -gt 0 ] || die "RATES: '$rate': expected a whole number of kbit, mbit or gbit (e.g. 10gbit)"
  bits=$((num * mult))
  burst=$((bits / 8 / 1000)); [ "$burst" -lt 65536 ] && burst=65536
  for ((i = 0; i < n_hosts; i++)); do
    for end in "${tag}_h$i ${short}h$i" "$sw ${short}s$i"; do
      set -- $end
      ip netns exec "$1" tc qdisc del dev "$2" root 2>/dev/null || true
      if [ -n "${DELAY:-}" ]; then
        ip netns exec "$1" tc qdisc add dev "$2" root handle 1: netem delay "$DELAY" 2>/dev/null ||
          die "DELAY=$DELAY: tc cannot add a netem qdisc here (this kernel ($(uname -r)) has no sch_netem?); run without DELAY"
        ip netns exec "$1" tc qdisc add dev "$2" parent 1: handle 2: tbf rate "$rate" burst "$burst" latency 50ms
      else
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms
      fi
    done
  done
}

export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include="$subnet.0/24" OMPI_MCA_oob_tcp_if_include="$subnet.0/24"
for rate in ${RATES:-1gbit 10gbit}; do
  set_rate "$rate"
  echo "== $n_hosts host namespace(s) on a switch, every link $rate each way${DELAY:+, delay $DELAY}"
  RANKS="$ranks_list" \
  MPIRUN="ip netns exec ${tag}_h0 mpirun --hostfile $work/hosts --mca plm_rsh_agent $work/agent.sh" \
    bash "$here/run_ranks_bench.sh" "$tower" "$out/$rate"
done
