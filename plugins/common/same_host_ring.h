// A request channel between a reader and its owner on one host, for memory the owner does not
// share by mapping (a tensor, an array: the application's own): a ring of request slots in a
// sealed memfd the owner creates per connection and the reader maps (same_host_copy.h's
// SharedMemory and PeerMemory), served by a thread of the owner's that spins while requests keep
// coming and sleeps on a futex in the ring when they stop.
//
// Why not a socket or UCX's shared-memory queues: a wake-up through the kernel costs about 40 us
// on a small VM, and UCX 1.13's queues are shared by every peer of a worker, so that a peer
// killed while sending wedges them for all. Here nothing is shared between connections, the
// owner never waits for the reader (it reads a slot, checks it, serves it and moves on), and a
// reader killed or stopped mid-request leaves a slot the owner either never sees posted or
// answers into memory nobody reads: it costs its own connection alone.
//
// Trust. Both processes of a ring are the same user on one host, each able to ptrace the other
// (what mapping the ring needs); what the ring protects is each from the other's mistakes and
// lies: the owner copies a slot's fields once, checks them as it checks a message (the handler
// does, against its live regions), and bounds every length by the slot; the reader bounds what
// it takes back by what it asked. A slot's bytes may change under either side while it reads
// them; a liar gets only garbage of its own.
//
// Each side says in the ring which CPU it spins on: two spinning threads the scheduler put on
// one CPU (a thread woken runs where its waker ran) take turns by time slices, each waiting
// milliseconds for the other's answer until the load balancer moves one (seen on a 2-vCPU VM as
// 0.2 to 2.5 ms stalls in the first thousand requests of a connection). A side that finds its
// peer on its own CPU sleeps on the ring's futex instead, which hands the CPU over at once, and
// the owner's thread (the ring's own, never the application's) moves to another CPU it may run
// on.
#ifndef RAYACCEL_PLUGINS_COMMON_SAME_HOST_RING_H_
#define RAYACCEL_PLUGINS_COMMON_SAME_HOST_RING_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/same_host_copy.h"
#include "common/same_host_ring_layout.h"

namespace rayaccel::plugin {

// What a slot asks for.
enum class RingOp : uint32_t {
  kRead = 1,         // the owner's range into the reader: inline (address 0) or to `address`
  kWrite = 2,        // the reader's bytes into the owner's range: inline, or from `address`
  kReadRanges = 3,   // `count` ranges (RingRange) into the reader's addresses
  kWriteRanges = 4,  // `count` ranges from the reader's addresses
};

// A range of kReadRanges and kWriteRanges, in the slot's data; each range's status goes back
// in its place, as a uint32_t at the start of its 32 bytes.
struct RingRange {
  uint64_t region, offset, length, address;
};

// A slot's request, as the owner copied it (once) out of shared memory.
struct RingCall {
  RingOp op;
  uint32_t count;
  uint64_t region, offset, length, address;
};

// The most ranges a slot's data holds.
constexpr uint32_t kRingMaxRanges = kRingSlotData / sizeof(RingRange);

// How long the owner keeps looking for the next request after serving one before it sleeps:
// RAYACCEL_TRANSPORT_SPIN_US (0 to 10000), 50 us where unset. A request that finds it asleep
// pays the kernel's wake-up (about 40 us here) instead of the spin's CPU.
std::chrono::microseconds RingSpin();

// Whether readers on this host get a ring (RAYACCEL_TRANSPORT_RING unset, or not 0, off, false,
// no): off, they are served by messages as before.
bool RingEnabled();

// The owner's side of one ring: its memory, and the thread that serves it.
class RingOwner {
 public:
  // Answers one request: a status (rayaccel_status values) for the slot. `data` is the slot's
  // kRingSlotData bytes, which the reader may change meanwhile.
  using Handler = std::function<uint32_t(const RingCall& call, char* data)>;

  // A ring, not yet served; null with `why` (no memfd, no memory).
  static std::unique_ptr<RingOwner> Create(std::string* why);
  // Stops and joins the thread: never call it where the handler may be waiting on a lock held.
  ~RingOwner();
  RingOwner(const RingOwner&) = delete;
  RingOwner& operator=(const RingOwner&) = delete;

  // Serves the ring on a thread of its own until Stop(). Asleep, the thread looks again unasked
  // after `idle` (a post or Stop() wakes it: the look is a safety net, not the mechanism).
  void Start(Handler handler, std::chrono::microseconds spin,
             std::chrono::microseconds idle = std::chrono::seconds(1));
  // Tells the thread to end (it does after the request it is serving); returns at once.
  void Stop();

  // What names the ring to its reader (SharedMemory's).
  const SharedMemory& memory() const { return *memory_; }

 private:
  RingOwner() = default;
  void Serve(const Handler& handler, std::chrono::microseconds spin,
             std::chrono::microseconds idle);

  std::unique_ptr<SharedMemory> memory_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The reader's side of one ring. Not thread-safe: its connection's lock guards it, except for
// Done and Sleep, which only read the ring.
class RingReader {
 public:
  // The owner's ring, mapped (PeerMemory::Map) and its header checked; null with `why`.
  static std::unique_ptr<RingReader> Map(pid_t pid, int fd, uint64_t device, uint64_t inode,
                                         uint64_t length, std::string* why);

  // The next request's number in `n`; false while every slot holds one not yet taken back.
  bool Next(uint32_t* n) const;
  // Slot data of request `n` (to fill before Post, to read after Done).
  char* data(uint32_t n) const;
  // Posts request `n` (Next()), waking the owner if it sleeps.
  void Post(uint32_t n, const RingCall& call);
  // Whether the owner answered `n`, and with what status (its word, not yet checked).
  bool Done(uint32_t n, uint32_t* status) const;
  // Request `n`, answered, is taken back: its slot is free. In order of posting.
  void Take(uint32_t n) { taken_ = n; }
  // Whether the owner's thread sleeps (a request would wait for its wake-up).
  bool OwnerAsleep() const;
  // Whether the owner's thread is awake on another CPU than this thread's: a copy of its own
  // here then runs beside the owner's, not in turn with it.
  bool OwnerAwakeElsewhere() const;
  // Sleeps until the owner has answered `n` (or another request), or `timeout`.
  void Sleep(uint32_t n, std::chrono::microseconds timeout) const;
  // Waits up to `spin` for the answer to `n`, spinning while the owner's thread runs on another
  // CPU and sleeping while it waits for this one; whether it came.
  bool Await(uint32_t n, std::chrono::microseconds spin) const;

 private:
  explicit RingReader(std::unique_ptr<PeerMemory> memory) : memory_(std::move(memory)) {}
  std::unique_ptr<PeerMemory> memory_;
  uint32_t posted_ = 0, taken_ = 0;
};

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_SAME_HOST_RING_H_
