#!/bin/sh
# rayaccel's transport against NIXL (Ray's RDT backend): host memory between two processes,
# READ and WRITE, 8 B to 64 MiB, single transfers and lists of 64 and 1024, NIXL's UCX backend
# in both error modes; ratios in one run (bench/compare_nixl.py).
#   bench/compare_nixl.sh [BUILD_DIR] [--veth] [compare_nixl.py options]
# --veth: across two network namespaces joined by a veth pair (created here, removed at exit;
# root), TCP on the veth alone (UCX_TLS=tcp, UCX_NET_DEVICES), the two namespaces standing for two
# hosts (RAYACCEL_TRANSPORT_SAME_HOST=0: no copies between the processes); else both on this host.
# --own-memory: a second table, rayaccel on memory each process allocated and registered (as a
# tensor is) rather than memory the transport allocated.
# Needs NIXL (requirements.txt pins nixl-cu12, installed by make into BUILD_DIR/venv).
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
python="$build/venv/bin/python"
"$python" -c 'import nixl_cu12' 2>/dev/null || {
  echo "compare_nixl.sh: NIXL is not installed in $build/venv (run make)" >&2; exit 2; }
script="$(dirname "$0")/compare_nixl.py"
if [ "${1:-}" != "--veth" ]; then
  exec "$python" "$script" "$build" --python "$python" "$@"
fi
shift
a=rxna$$ b=rxnb$$ va=rxnva$$ vb=rxnvb$$
trap 'ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null' EXIT
ip netns add $a && ip netns add $b
ip link add $va type veth peer name $vb
ip link set $va netns $a && ip link set $vb netns $b
ip -n $a addr add 10.231.9.1/24 dev $va && ip -n $b addr add 10.231.9.2/24 dev $vb
for ns in $a $b; do ip -n $ns link set lo up; done
ip -n $a link set $va up && ip -n $b link set $vb up
UCX_TLS=tcp "$python" "$script" "$build" --python "$python" \
  --owner-prefix "ip netns exec $a env UCX_TLS=tcp UCX_NET_DEVICES=$va RAYACCEL_TRANSPORT_SAME_HOST=0" \
  --reader-prefix "ip netns exec $b env UCX_TLS=tcp UCX_NET_DEVICES=$vb RAYACCEL_TRANSPORT_SAME_HOST=0" "$@"
