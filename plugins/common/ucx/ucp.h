// libucp, loaded with dlopen when the first endpoint opens, and the operator's UCX_TLS split
// into the two fabrics an endpoint opens.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_UCP_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_UCP_H_

#include <ucp/api/ucp.h>

#include <string>

#include "rayaccel/plugin.h"

namespace rayaccel::plugin::ucx {

#define RAYACCEL_UCP_FUNCTIONS(X)   \
  X(ucp_config_read)                \
  X(ucp_config_modify)              \
  X(ucp_config_release)             \
  X(ucp_init_version)               \
  X(ucp_cleanup)                    \
  X(ucp_context_query)              \
  X(ucp_worker_create)              \
  X(ucp_worker_destroy)             \
  X(ucp_worker_get_address)         \
  X(ucp_worker_release_address)     \
  X(ucp_worker_progress)            \
  X(ucp_worker_set_am_recv_handler) \
  X(ucp_ep_create)                  \
  X(ucp_ep_close_nbx)               \
  X(ucp_ep_flush_nbx)               \
  X(ucp_mem_map)                    \
  X(ucp_mem_unmap)                  \
  X(ucp_am_send_nbx)                \
  X(ucp_am_recv_data_nbx)           \
  X(ucp_request_check_status)       \
  X(ucp_request_free) X(ucp_worker_get_efd) X(ucp_worker_arm) X(ucp_mem_query) X(ucs_status_string)

struct Ucp {
#define RAYACCEL_UCP_MEMBER(f) decltype(&::f) f = nullptr;
  RAYACCEL_UCP_FUNCTIONS(RAYACCEL_UCP_MEMBER)
#undef RAYACCEL_UCP_MEMBER
  std::string error;  // why libucp could not be used; empty when it can
};

// Loads `library` (empty: libucp.so.0) on the first call; later calls must name the same
// library (or none), since a process holds one UCX. Else an error says which is loaded.
const Ucp& LoadUcp(const std::string& library, std::string* mismatch);

// After the first endpoint opened.
const Ucp& Lib();

std::string StatusText(ucs_status_t s);

// A UCX status as the ABI's: a peer that went away is PEER_LOST, not a local fault.
rayaccel_status FromUcs(ucs_status_t s);

rayaccel_status FailUcs(rayaccel_error* error, const char* what, ucs_status_t s);

// The two fabrics an endpoint opens, each a UCX context with the operator's UCX_TLS split in
// two: "local" (UCX's self, within this process; shared memory only where the operator names
// it) and "network" (TCP, RDMA: every other peer, on this host or another). Shared memory and
// CMA are left out by default, because a peer that dies mid-transfer breaks the survivor:
//  - CMA: UCX 1.13 aborts the whole process when process_vm_readv finds its peer gone on an
//    endpoint without error handling (cma_ep.c, "No such process"), and it offers no error
//    handling on CMA; a reader died with the peer it read from.
//  - posix/sysv: a sender killed while writing into the receiver's shared-memory queue leaves
//    the slot it took unfinished, and the receiver's queue stops there for every peer: after a
//    peer was killed mid 256 MiB read, a new peer's 1 MiB read never completed.
// Apart, because UCX given both shared memory and TCP picks shared memory for a same-host peer's
// messages and TCP for its rendezvous, and an operator's shared memory stays confined to the
// local fabric. An empty string: no such fabric.
struct Transports {
  std::string local, network;
  bool shared_memory = false;  // the operator named posix or sysv
};

Transports SplitTransports(const char* configured);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_UCP_H_
