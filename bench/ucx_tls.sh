# Sourced by the benchmarks that run rayaccel beside ucx_perftest on one UCX_TLS (already
# exported). Sets theirs_tls, the transports rayaccel's UCX helper uses for that UCX_TLS, for
# ucx_perftest: the same, without CMA (docs/transport.md). Where UCX_TLS leaves shared memory
# out (tcp alone: the fabric between hosts), rayaccel leaves its own same-host paths out too
# (RAYACCEL_TRANSPORT_SAME_HOST=0: no copies or mappings between the two processes), unless
# the caller chose otherwise.
# theirs_tls is for the script that sources this:
# shellcheck shell=bash disable=SC2034
case "$UCX_TLS" in
  all | "") theirs_tls="^cma" ;;
  ^*) theirs_tls="$UCX_TLS,cma" ;;
  *) theirs_tls=$(echo "$UCX_TLS" | tr ',' '\n' | grep -vx cma | sed 's/^s[h]*m$/posix,sysv/' | paste -sd,) ;;
esac
case ",$UCX_TLS," in
  ,, | ,all,* | ,^* | *,posix,* | *,sysv,* | *,sm,* | *,shm,* | *,cma,*) ;;
  *) export RAYACCEL_TRANSPORT_SAME_HOST=${RAYACCEL_TRANSPORT_SAME_HOST:-0} ;;
esac
