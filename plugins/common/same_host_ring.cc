#include "common/same_host_ring.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <utility>

namespace rayaccel::plugin {
namespace {

using Clock = std::chrono::steady_clock;

RingHeader* HeaderAt(char* base) { return reinterpret_cast<RingHeader*>(base); }
RingSlot* SlotAt(char* base, uint32_t n) {
  return reinterpret_cast<RingSlot*>(base + sizeof(RingHeader)) + n % kRingSlots;
}

// FUTEX_WAIT and FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is in memory two processes map.
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::microseconds timeout) {
  timespec t{static_cast<time_t>(timeout.count() / 1000000),
             static_cast<long>(timeout.count() % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &t, nullptr, 0);
}
void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

// This thread's CPU (glibc reads it from rseq: a load); ~0u where unknown.
uint32_t ThisCpu() {
  const int cpu = sched_getcpu();
  return cpu < 0 ? ~0u : static_cast<uint32_t>(cpu);
}

// Moves the calling thread off `cpu` where `allowed` (its affinity) has another: its affinity
// without that CPU, which migrates it at once, then as it was (which leaves it where it went).
void MoveOff(uint32_t cpu, const cpu_set_t& allowed) {
  if (cpu >= CPU_SETSIZE || CPU_COUNT(&allowed) < 2 || !CPU_ISSET(cpu, &allowed)) return;
  cpu_set_t elsewhere = allowed;
  CPU_CLR(cpu, &elsewhere);
  if (sched_setaffinity(0, sizeof(elsewhere), &elsewhere) == 0) {
    sched_setaffinity(0, sizeof(allowed), &allowed);
  }
}

// One turn of a spin: the CPU's pause. (Not sched_yield: on a 2-vCPU VM it cost 9 us a turn.)
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A field of shared memory read once: the other side may change it meanwhile.
template <typename T>
T Once(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_RELAXED);
}

}  // namespace

std::chrono::microseconds RingSpin() {
  const char* v = std::getenv("RAYACCEL_TRANSPORT_SPIN_US");
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long us = std::strtol(v, &end, 10);
    if (*end == '\0' && us >= 0 && us <= 10000) return std::chrono::microseconds(us);
  }
  return std::chrono::microseconds(50);
}

bool RingEnabled() { return !EnvironmentSaysOff("RAYACCEL_TRANSPORT_RING"); }

// --- The owner

std::unique_ptr<RingOwner> RingOwner::Create(std::string* why) {
  auto memory = SharedMemory::Create(kRingBytes, why);
  if (memory == nullptr) return nullptr;
  char* base = static_cast<char*>(memory->data());
  auto* h = new (base) RingHeader{};
  h->magic = kRingMagic;
  h->version = kRingVersion;
  h->slots = kRingSlots;
  h->slot_data = kRingSlotData;
  for (uint32_t i = 0; i < kRingSlots; ++i) new (SlotAt(base, i)) RingSlot{};
  std::unique_ptr<RingOwner> ring(new RingOwner());
  ring->memory_ = std::move(memory);
  return ring;
}

RingOwner::~RingOwner() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void RingOwner::Start(Handler handler, std::chrono::microseconds spin,
                      std::chrono::microseconds idle) {
  thread_ =
      std::thread([this, handler = std::move(handler), spin, idle] { Serve(handler, spin, idle); });
}

void RingOwner::Stop() {
  stop_.store(true);
  RingHeader* h = HeaderAt(static_cast<char*>(memory_->data()));
  h->doorbell.fetch_add(1);
  FutexWake(&h->doorbell, 1);
}

void RingOwner::Serve(const Handler& handler, std::chrono::microseconds spin,
                      std::chrono::microseconds idle) {
  char* base = static_cast<char*>(memory_->data());
  RingHeader* h = HeaderAt(base);
  uint32_t next = 1;
  Clock::time_point last = Clock::now(), moved;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) CPU_ZERO(&allowed);
  while (!stop_.load(std::memory_order_relaxed)) {
    RingSlot* s = SlotAt(base, next);
    if (s->posted.load(std::memory_order_acquire) == next) {
      // Where the request is served from: a reader waiting on this CPU sleeps rather than spin
      // against the copy.
      const uint32_t serving_cpu = ThisCpu();
      if (h->owner_cpu.load(std::memory_order_relaxed) != serving_cpu) {
        h->owner_cpu.store(serving_cpu);
      }
      const RingCall call{static_cast<RingOp>(Once(s->op)),
                          Once(s->count),
                          Once(s->region),
                          Once(s->offset),
                          Once(s->length),
                          Once(s->address)};
      uint32_t status;
      try {
        status = handler(call, s->data);
      } catch (...) {
        status = 13;  // RAYACCEL_STATUS_INTERNAL: the handler's own fault, this request's alone
      }
      __atomic_store_n(&s->status, status, __ATOMIC_RELAXED);
      s->done.store(next, std::memory_order_release);
      h->answered.fetch_add(1);
      if (h->readers_sleeping.load() != 0) FutexWake(&h->answered, INT_MAX);
      ++next;
      last = Clock::now();
      continue;
    }
    uint32_t cpu = ThisCpu();
    if (h->reader_cpu.load(std::memory_order_relaxed) == cpu && spin.count() > 0 &&
        Clock::now() - moved > std::chrono::milliseconds(1)) {
      // Sharing the reader's CPU: this thread, the ring's own, moves (same_host_ring.h); at most
      // once a millisecond, should the reader follow.
      MoveOff(cpu, allowed);
      moved = Clock::now();
      cpu = ThisCpu();
    }
    if (h->owner_cpu.load(std::memory_order_relaxed) != cpu) h->owner_cpu.store(cpu);
    if (Clock::now() - last < spin && h->reader_cpu.load(std::memory_order_relaxed) != cpu) {
      CpuRelax();
      continue;
    }
    // Asleep until a reader rings. The flag before the last look, the reader's post before its
    // look at the flag (both sequentially consistent): one of the two sees the other.
    h->owner_sleeping.store(1);
    const uint32_t bell = h->doorbell.load();
    if (s->posted.load() != next && !stop_.load()) {
      FutexWait(&h->doorbell, bell, idle);
    }
    h->owner_sleeping.store(0);
    last = Clock::now();
  }
}

// --- The reader

std::unique_ptr<RingReader> RingReader::Map(pid_t pid, int fd, uint64_t device, uint64_t inode,
                                            uint64_t length, std::string* why) {
  if (length != kRingBytes) {
    *why = "the owner's ring is of another size";
    return nullptr;
  }
  auto memory = PeerMemory::Map(pid, fd, device, inode, length, why);
  if (memory == nullptr) return nullptr;
  const RingHeader* h = HeaderAt(memory->data());
  if (Once(h->magic) != kRingMagic || Once(h->version) != kRingVersion ||
      Once(h->slots) != kRingSlots || Once(h->slot_data) != kRingSlotData) {
    *why = "the owner's ring is of another layout";
    return nullptr;
  }
  return std::unique_ptr<RingReader>(new RingReader(std::move(memory)));
}

bool RingReader::Next(uint32_t* n) const {
  if (posted_ - taken_ >= kRingSlots) return false;
  *n = posted_ + 1;
  return true;
}

char* RingReader::data(uint32_t n) const { return SlotAt(memory_->data(), n)->data; }

void RingReader::Post(uint32_t n, const RingCall& call) {
  char* base = memory_->data();
  RingSlot* s = SlotAt(base, n);
  s->op = static_cast<uint32_t>(call.op);
  s->count = call.count;
  s->region = call.region;
  s->offset = call.offset;
  s->length = call.length;
  s->address = call.address;
  // Sequentially consistent, as the owner's flag and its last look are: one of the two sides
  // sees the other's write.
  s->posted.store(n, std::memory_order_seq_cst);
  posted_ = n;
  RingHeader* h = HeaderAt(base);
  if (h->owner_sleeping.load() != 0) {
    h->doorbell.fetch_add(1);
    FutexWake(&h->doorbell, 1);
  }
}

bool RingReader::Done(uint32_t n, uint32_t* status) const {
  RingSlot* s = SlotAt(memory_->data(), n);
  if (s->done.load(std::memory_order_acquire) != n) return false;
  *status = Once(s->status);
  return true;
}

bool RingReader::OwnerAsleep() const {
  return HeaderAt(memory_->data())->owner_sleeping.load(std::memory_order_relaxed) != 0;
}

bool RingReader::OwnerAwakeElsewhere() const {
  const RingHeader* h = HeaderAt(memory_->data());
  return h->owner_sleeping.load(std::memory_order_relaxed) == 0 &&
         h->owner_cpu.load(std::memory_order_relaxed) != ThisCpu();
}

bool RingReader::Await(uint32_t n, std::chrono::microseconds spin) const {
  RingHeader* h = HeaderAt(memory_->data());
  const Clock::time_point until = Clock::now() + spin;
  uint32_t status = 0;
  while (!Done(n, &status)) {
    const Clock::time_point now = Clock::now();
    if (now >= until) return false;
    const uint32_t cpu = ThisCpu();
    if (h->reader_cpu.load(std::memory_order_relaxed) != cpu) h->reader_cpu.store(cpu);
    if (h->owner_cpu.load(std::memory_order_relaxed) == cpu && h->owner_sleeping.load() == 0) {
      Sleep(n, std::chrono::duration_cast<std::chrono::microseconds>(until - now));
    } else {
      CpuRelax();
    }
  }
  return true;
}

void RingReader::Sleep(uint32_t n, std::chrono::microseconds timeout) const {
  RingHeader* h = HeaderAt(memory_->data());
  h->readers_sleeping.fetch_add(1);
  const uint32_t seen = h->answered.load();
  uint32_t status = 0;
  if (!Done(n, &status)) FutexWait(&h->answered, seen, timeout);
  h->readers_sleeping.fetch_sub(1);
}

}  // namespace rayaccel::plugin
