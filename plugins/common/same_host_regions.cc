#include "common/same_host_regions.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

namespace rayaccel::plugin {
namespace {

constexpr uint32_t kMagic = 0x54525852;  // "RXRT"
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 64;
constexpr size_t kMaxRanges = 1024;  // per system call (the kernel's UIO_MAXIOV)

struct Header {
  uint32_t magic, version, entries;
};

// A region's entry, written as a seqlock: `sequence` odd while the owner changes it.
struct Entry {
  std::atomic<uint64_t> sequence;
  uint64_t id, base, length;
};
static_assert(sizeof(Entry) == 32, "entries are 32 bytes");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "a plain word in shared memory");

static_assert(kHeaderBytes + uint64_t{kPublishedRegions} * sizeof(Entry) == kPublishedRegionsBytes,
              "the table's bytes as same_host_regions.h says");
Entry* EntryAt(char* base, uint32_t index) {
  return reinterpret_cast<Entry*>(base + kHeaderBytes) + index;
}

// Fields read once, and written, as the seqlock needs without fences (which ThreadSanitizer does
// not model): a field read with acquire keeps the sequence's second read after it; a field
// written with release carries the odd sequence written before it to a reader that sees it.
template <typename T>
T Once(const T& field) {
  return __atomic_load_n(&field, __ATOMIC_ACQUIRE);
}
template <typename T>
void Set(T* field, T value) {
  __atomic_store_n(field, value, __ATOMIC_RELEASE);
}

// The owner's change of an entry: odd while fields are written, then even again, one step on.
void Write(Entry* e, uint64_t id, uint64_t base, uint64_t length) {
  const uint64_t s = e->sequence.load(std::memory_order_relaxed);
  e->sequence.store(s + 1, std::memory_order_relaxed);
  Set(&e->id, id);
  Set(&e->base, base);
  Set(&e->length, length);
  e->sequence.store(s + 2, std::memory_order_release);
}

}  // namespace

std::unique_ptr<PublishedRegions> PublishedRegions::Create(std::string* why) {
  auto memory = SharedMemory::Create(kPublishedRegionsBytes, why);
  if (memory == nullptr) return nullptr;
  auto* h = static_cast<Header*>(memory->data());
  h->magic = kMagic;
  h->version = kVersion;
  h->entries = kPublishedRegions;
  std::unique_ptr<PublishedRegions> table(new PublishedRegions());
  table->memory_ = std::move(memory);
  return table;
}

void PublishedRegions::Publish(uint64_t id, const void* base, uint64_t length) {
  Write(EntryAt(static_cast<char*>(memory_->data()), id % kPublishedRegions), id,
        reinterpret_cast<uintptr_t>(base), length);
}

void PublishedRegions::Withdraw(uint64_t id) {
  Entry* e = EntryAt(static_cast<char*>(memory_->data()), id % kPublishedRegions);
  if (Once(e->id) == id) Write(e, 0, 0, 0);
}

std::unique_ptr<PublishedRegionsReader> PublishedRegionsReader::Map(pid_t owner, int fd,
                                                                    uint64_t device, uint64_t inode,
                                                                    uint64_t length,
                                                                    std::string* why) {
  if (length != kPublishedRegionsBytes) {
    *why = "the owner's region table is of another size";
    return nullptr;
  }
  auto memory = PeerMemory::Map(owner, fd, device, inode, length, why);
  if (memory == nullptr) return nullptr;
  const auto* h = reinterpret_cast<const Header*>(memory->data());
  if (Once(h->magic) != kMagic || Once(h->version) != kVersion ||
      Once(h->entries) != kPublishedRegions) {
    *why = "the owner's region table is of another layout";
    return nullptr;
  }
  // The owner's process as it is now: a pid freed by its death and taken by another process
  // is not read from (the pidfd says the owner died).
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, owner, 0));
  if (pidfd < 0) {
    *why = std::string("pidfd_open: ") + std::strerror(errno);
    return nullptr;
  }
  const std::string stat = "/proc/" + std::to_string(owner) + "/stat";
  const int stat_fd = open(stat.c_str(), O_RDONLY | O_CLOEXEC);
  if (stat_fd < 0) {
    *why = "open " + stat + ": " + std::strerror(errno);
    close(pidfd);
    return nullptr;
  }
  return std::unique_ptr<PublishedRegionsReader>(
      new PublishedRegionsReader(std::move(memory), owner, pidfd, stat_fd));
}

PublishedRegionsReader::~PublishedRegionsReader() {
  close(pidfd_);
  close(stat_);
}

bool PublishedRegionsReader::Alive() const {
  pollfd p{pidfd_, POLLIN, 0};
  return poll(&p, 1, 0) == 0;  // readable once the owner has exited
}

bool PublishedRegionsReader::Running() const {
  if (!Alive()) return false;
  // The state after the command's closing parenthesis: T stopped, t traced (stopped too).
  char buffer[512];
  const ssize_t n = pread(stat_, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return false;
  buffer[n] = '\0';
  const char* close_paren = std::strrchr(buffer, ')');
  if (close_paren == nullptr || close_paren[1] != ' ') return false;
  const char state = close_paren[2];
  return state != 'T' && state != 't' && state != 'Z' && state != 'X';
}

bool PublishedRegionsReader::Find(uint64_t region, uint64_t offset, uint64_t length,
                                  Range* out) const {
  const uint32_t index = static_cast<uint32_t>(region % kPublishedRegions);
  Entry* e = EntryAt(memory_->data(), index);
  const uint64_t s = e->sequence.load(std::memory_order_acquire);
  if ((s & 1) != 0) return false;
  const uint64_t id = Once(e->id), base = Once(e->base), size = Once(e->length);
  if (e->sequence.load(std::memory_order_relaxed) != s) return false;  // torn
  if (id != region || id == 0 || offset > size || length > size - offset) return false;
  *out = {region, base + offset, length, index, s};
  return true;
}

// After the copy, a system call: the kernel's reads of the owner's memory are done by then.
bool PublishedRegionsReader::Unchanged(const Range& r) const {
  return EntryAt(memory_->data(), r.entry)->sequence.load(std::memory_order_acquire) == r.sequence;
}

void PublishedRegionsReader::Copy(const Range* ranges, const iovec* local, size_t count,
                                  bool* ok) const {
  std::vector<iovec> remote(std::min(count, kMaxRanges));
  for (size_t at = 0; at < count; at += kMaxRanges) {
    const size_t n = std::min(kMaxRanges, count - at);
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      remote[i] = {InPeer(ranges[at + i].address), ranges[at + i].length};
      total += ranges[at + i].length;
    }
    const ssize_t moved = process_vm_readv(owner_, local + at, n, remote.data(), n, 0);
    const bool whole = moved >= 0 && static_cast<uint64_t>(moved) == total;
    for (size_t i = 0; i < n; ++i) ok[at + i] = whole;
  }
  const bool running = Running();
  for (size_t i = 0; i < count; ++i) ok[i] = ok[i] && running && Unchanged(ranges[i]);
}

PublishedRegionsReader::Kept PublishedRegionsReader::CopyServed(const Range& range,
                                                                const iovec& local) const {
  const iovec remote{InPeer(range.address), range.length};
  const ssize_t moved = process_vm_readv(owner_, &local, 1, &remote, 1, 0);
  // After the copy, as Copy: a pid the owner's death freed may name another process by now.
  if (!Alive()) return Kept::kOwnerGone;
  if (!Unchanged(range)) return Kept::kWithdrawn;
  if (moved < 0 || static_cast<uint64_t>(moved) != range.length) return Kept::kNotMapped;
  return Kept::kYes;
}

}  // namespace rayaccel::plugin
