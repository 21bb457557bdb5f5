// The same-host request ring (same_host_ring.h) in the UCX helper: the owner offers one to each
// reader it proved on its host and serves it under the endpoint's lock, with the checks a
// message gets; the reader sends its transfers of host memory the owner does not map there.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_RING_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_RING_H_

#include <mutex>
#include <vector>

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// --- The owner's side

// A ring for `p`, a reader proven on this host, served from now on: written to `welcome` (its
// descriptor in this process, the file's device and inode, its length) when there is one.
// Caller holds mu.
void OfferRing(Ep* ep, Peer* p, Writer* welcome);

// A region just registered: published to readers with rings (same_host_regions.h) when it is
// host memory. Caller holds mu.
void PublishRegion(Ep* ep, const Region* region);

// `p` is going: its ring stops, to be joined outside the lock (JoinStoppedRings). Caller holds mu.
void StopRing(Ep* ep, Peer* p);

// Joins the rings' threads StopRing stopped. Caller does not hold mu.
void JoinStoppedRings(Ep* ep);

// --- The reader's side

// The owner's ring, or its published regions, as its welcome names them: the file's descriptor
// in the owner's process, its device and inode, its length.
struct SharedFileOffer {
  uint32_t fd = 0;
  uint64_t device = 0, inode = 0, length = 0;
};

// The owner's ring (and its published regions, where offered), mapped, or left (served by
// messages) with the reason logged. Caller holds mu.
void MapRing(Ep* ep, Conn* c, const SharedFileOffer& ring, const SharedFileOffer* published);

// A READ the reader makes itself from the owner's published regions (same_host_regions.h).
struct DirectRead {
  uint64_t region, offset, length;
  char* local;
  bool done;  // copied whole, from a region live throughout
};

// The owner's published regions where READs of `bytes` in all are best made here: more than a
// slot holds and less than the owner copies in parallel parts, its thread asleep (a request
// would wait for its wake-up), and, below kReadsDirectlyAlways, the first READ after a pause
// (kReadBurstGap) rather than one of a burst; null otherwise. Caller holds mu.
std::shared_ptr<PublishedRegionsReader> ReadsDirectly(Conn* c, uint64_t bytes);

// Makes `reads` from `published` (no lock needed): each `done` when it may be kept; the rest
// go to the owner.
void ReadDirectly(const PublishedRegionsReader& published, std::vector<DirectRead>* reads);

// A READ or WRITE between host memory here and the owner's, posted on the ring: true with the
// transfer's outcome in `status` (`a->request` null when it ended within the call), false when
// the connection has no ring or no free slot (the caller sends it as a message). Caller does not
// hold mu.
bool RingTransfer(Ep* ep, Conn* c, rayaccel_transfer_args* a, const RemoteRegion& remote,
                  rayaccel_status* status, rayaccel_error* error);

// A batch's copied chunk (ranges of host memory here the owner copies), posted on the ring as
// one request counted as a part of `batch`; false when there is no ring or no free slot. Caller
// holds mu.
bool StartRingChunkLocked(Ep* ep, Conn* c, Request* batch, rayaccel_transfer_op op,
                          const std::vector<ChunkItem>& items);

// After a batch posted chunks on `c`'s ring: waits (spins, the lock let go) as a single transfer
// does for the last one's answer, then lands what was answered, so that a batch the owner
// served at once ends within the call. Caller holds mu (through `lock`).
void AwaitRingChunks(Ep* ep, Conn* c, std::unique_lock<std::mutex>& lock);

// Completes the ring requests the owners answered, in order. Caller holds mu.
void DrainRings(Ep* ep);

// The connection failed: its ring requests are left to FailConnection, the ring unmapped.
// Caller holds mu.
void DropRing(Ep* ep, Conn* c);

// Sleeps on the ring of the oldest request waiting for an owner, up to `timeout`, with the lock
// let go meanwhile; false (at once) when none waits.
bool SleepOnRing(Ep* ep, std::unique_lock<std::mutex>& lock, Clock::duration timeout);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_RING_H_
