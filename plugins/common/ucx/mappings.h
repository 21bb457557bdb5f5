// Memory mapped between two processes of one host: device memory (DeviceMemoryOps::Export and
// Import) and host memory the helper allocated (SharedMemory, same_host_copy.h). The reader's
// mappings, and the owner asking them back before a region goes.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_MAPPINGS_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_MAPPINGS_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// Closes the reader's mapping of `region` on `c` once no copy uses it, telling the owner
// where it asked. A mapping still being asked for is left to the asker. Caller holds mu.
void ReleaseMapping(Ep* ep, Conn* c, uint64_t region);

// The connection failed or closes: every mapping goes, now or when its last copy ends.
void DropMappings(Ep* ep, Conn* c);

// Readers that map region `id` close their mappings before its memory may go: each is asked,
// and one that has not said it closed within the peer timeout is declared lost. Caller holds
// mu; the region is out of ep->regions, so no reader gets a new handle.
void UnmapPeers(Ep* ep, uint64_t id);

// The reader's mapping of `remote` for a transfer on `c`, with a user counted; null when the
// transfer is staged instead (the owner or this host's driver said no) or fails (`status`).
// The first transfer of a region asks its owner (kMapAsk) and waits for the answer with mu
// held, as deregistration waits: one round trip per region. Caller holds mu.
Mapping* MappingFor(Ep* ep, Conn* c, const RemoteRegion& remote, rayaccel_status* status,
                    std::string* why);

// A transfer between the local region and the owner's device memory, mapped: a copy on this
// host's device, complete when it returns.
rayaccel_status CopyMapped(Ep* ep, Conn* c, rayaccel_transfer_args* a, uint64_t region, Mapping* m,
                           rayaccel_error* error);

// A transfer's bytes between this process's host memory and a peer's mapped host memory.
void CopyHost(rayaccel_transfer_op op, char* mine, char* theirs, uint64_t length);

// Whether the owner maps `remote` for its readers on this host: host memory its helper allocated.
inline bool HostMapped(const RemoteRegion& remote) {
  return (remote.flags & (kMappable | kHostMemory)) == (kMappable | kHostMemory);
}

// Whether a transfer between `local` and `remote` may go through a mapping: the owner's device
// memory (this plugin's driver maps it), or its shared host memory into host memory here.
inline bool MayMap(const Ep* ep, const Region* local, const RemoteRegion& remote) {
  if ((remote.flags & kMappable) == 0) return false;
  return HostMapped(remote) ? local->host && !local->staged : ep->options.device_ops != nullptr;
}

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_MAPPINGS_H_
