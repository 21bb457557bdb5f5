// The request ring's bytes in shared memory (same_host_ring.h): what the owner and its reader
// each write, where. Two processes read this layout, so it is versioned in the ring's header;
// a header alone, so that a test which lies as one side can write exactly that side's fields.
#ifndef RAYACCEL_PLUGINS_COMMON_SAME_HOST_RING_LAYOUT_H_
#define RAYACCEL_PLUGINS_COMMON_SAME_HOST_RING_LAYOUT_H_

#include <atomic>
#include <cstdint>

namespace rayaccel::plugin {

// Slots in flight per connection, and each slot's data, which holds a transfer's bytes inline
// (READ and WRITE up to kRingInlineMax) or a batch's ranges.
constexpr uint32_t kRingSlots = 16;
constexpr uint32_t kRingSlotData = 32 << 10;

constexpr uint32_t kRingMagic = 0x47525852;  // "RXRG"
constexpr uint32_t kRingVersion = 1;

// The ring's first bytes, the owner's. Each side's futex word and flag on a cache line of their
// own, so that the two sides' spinning does not bounce one line between them (the padding is
// the point).
struct RingHeader {  // NOLINT(clang-analyzer-optin.performance.Padding)
  uint32_t magic, version, slots, slot_data;
  // The owner sleeps on `doorbell` while `owner_sleeping`; a reader that posts then rings it.
  // `owner_cpu`: the CPU the owner's thread last spun on (same_host_ring.h says why).
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> owner_sleeping;
  std::atomic<uint32_t> owner_cpu;
  // Readers sleep on `answered` (bumped by every answer) while `readers_sleeping` counts them;
  // `reader_cpu`: the CPU a reader last waited on.
  alignas(64) std::atomic<uint32_t> answered;
  std::atomic<uint32_t> readers_sleeping;
  std::atomic<uint32_t> reader_cpu;
};

// One request, after the header: slot n % kRingSlots. Numbers wrap at 2^32, a multiple of
// kRingSlots, so slots stay in order; a slot's `posted` and `done` only ever hold numbers of
// requests it carried. The reader writes the request (`op` to `address`, then `posted`), the
// owner the answer (`status`, then `done`); `data` goes either way.
struct RingSlot {
  alignas(64) std::atomic<uint32_t> posted;  // written last by the reader
  std::atomic<uint32_t> done;                // written last by the owner
  uint32_t op, count;
  uint64_t region, offset, length, address;
  uint32_t status;
  alignas(64) char data[kRingSlotData];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain words");
static_assert(sizeof(RingHeader) % 64 == 0 && sizeof(RingSlot) % 64 == 0, "cache-line aligned");

// The bytes a ring takes: header and slots.
constexpr uint64_t kRingBytes = sizeof(RingHeader) + uint64_t{kRingSlots} * sizeof(RingSlot);

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_SAME_HOST_RING_LAYOUT_H_
