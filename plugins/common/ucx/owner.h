// The owner's side: every range a reader names is checked against the live regions
// (CheckRange) before a byte is served or stored; reads' replies, writes' receives, batches,
// and the copies for a reader on this host.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_OWNER_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_OWNER_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// A batched write too large for one eager message, received whole before it is applied.
struct BatchPut {
  Ep* ep;
  uint64_t token, id;
  uint32_t n;
  std::string bytes;
};

// The owner's bounds check (peers::RegionTable::Check): OK with the region in *out when the
// range lies in a live region; else STALE or INVALID_ARGUMENT.
rayaccel_status CheckRange(Ep* ep, uint64_t region, uint64_t offset, uint64_t length, Region** out);

std::string ReplyHeader(uint64_t token, uint64_t id, rayaccel_status status);

// Sends the reads validated in the handler: the region's bytes, or the status alone.
void ServeGets(Ep* ep);

// A reader on this host's copied batch write (the ranges with their addresses in the reader,
// no bytes): each range's status goes back. Inside a UCX callback.
void CopyPutBatch(Ep* ep, Peer* p, uint64_t id, uint32_t n, const char* bytes, size_t size);

// Sends the batched reads validated in the handler: each range's status, then the bytes of
// those served, copied out of the regions now (a range is checked again: a region may have
// gone since), so no region is held while the reply travels.
void ServeBatchGets(Ep* ep);

// A reader's batched write, whole in `bytes` (the ranges, then their bytes in order): each
// range is checked against the live regions and stored, and the reader hears each one's status.
void ApplyPutBatch(Ep* ep, uint64_t token, uint64_t id, uint32_t n, const char* bytes, size_t size);

void BatchPutReceived(void* request, ucs_status_t status, size_t length, void* user_data);

// A reader's write: checked against the owner's live regions before a byte lands. Inside a
// UCX callback.
void OnPut(Ep* ep, Ep::Fabric* fabric, uint64_t token, uint64_t id, uint64_t region,
           uint64_t offset, uint64_t length, void* data, size_t data_length, bool rndv);

// A reader on this host asks its owner to copy its bytes at `from` (in the reader's memory)
// into a region: checked against the owner's live regions as a write by message is. Inside a
// UCX callback.
void CopyPut(Ep* ep, uint64_t token, uint64_t id, uint64_t region, uint64_t offset, uint64_t length,
             uint64_t from, size_t data_length);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_OWNER_H_
