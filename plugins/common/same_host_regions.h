// An owner's live host regions, published to the readers it proved on its host, so that a READ
// need not wake the owner: the reader copies the range out of the owner's process itself
// (process_vm_readv), within the bounds the table gives, and keeps the bytes only if the
// region's entry did not change from before the copy to after it (a sequence number per entry,
// as a seqlock). Deregistration changes the entry before it returns, so before the memory can
// be freed: a copy that overlapped a deregistration is discarded, never served.
//
// Only READs: a write must land in memory the owner still holds when the bytes arrive, which
// no check after the copy can undo, so WRITEs stay the owner's (same_host_ring.h). What a READ
// of its own needs is what mapping the ring needs: a reader of the same user that may ptrace
// the owner, which could read its memory anyway; the table lets it read the ranges it was given
// and know they were live, nothing more. A reader that scribbles on the table (it is the owner's
// file, opened through /proc) misleads only readers of that owner, all of them the same user.
#ifndef RAYACCEL_PLUGINS_COMMON_SAME_HOST_REGIONS_H_
#define RAYACCEL_PLUGINS_COMMON_SAME_HOST_REGIONS_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/same_host_copy.h"

namespace rayaccel::plugin {

// Entries of the table: region ids (from 1, never reused) at id % kPublishedRegions, so a
// region whose place a newer one took is simply not found there (its READs go to the owner).
constexpr uint32_t kPublishedRegions = 4096;
// The table's bytes: a 64-byte header, then 32 bytes an entry.
constexpr uint64_t kPublishedRegionsBytes = 64 + uint64_t{kPublishedRegions} * 32;

// The owner's side. Not thread-safe: the endpoint's lock guards it.
class PublishedRegions {
 public:
  static std::unique_ptr<PublishedRegions> Create(std::string* why);
  // Region `id` is [base, base + length) of this process, for readers to copy from.
  void Publish(uint64_t id, const void* base, uint64_t length);
  // Region `id` is no longer (if it was there): a copy overlapping this call is discarded.
  void Withdraw(uint64_t id);
  const SharedMemory& memory() const { return *memory_; }

 private:
  PublishedRegions() = default;
  std::unique_ptr<SharedMemory> memory_;
};

// The reader's side: the owner's table, mapped, and the owner's process, by pidfd.
class PublishedRegionsReader {
 public:
  static std::unique_ptr<PublishedRegionsReader> Map(pid_t owner, int fd, uint64_t device,
                                                     uint64_t inode, uint64_t length,
                                                     std::string* why);
  ~PublishedRegionsReader();
  PublishedRegionsReader(const PublishedRegionsReader&) = delete;
  PublishedRegionsReader& operator=(const PublishedRegionsReader&) = delete;

  // A range of a region as the table has it now: where it is in the owner, and the entry's
  // sequence number to check after the copy. False where the table has no such live region,
  // or the range lies outside it.
  struct Range {
    uint64_t region, address, length;
    uint32_t entry;
    uint64_t sequence;
  };
  bool Find(uint64_t region, uint64_t offset, uint64_t length, Range* out) const;
  // Copies `count` ranges (Find's) into this process's `local` ranges, in one system call per
  // 1024; ok[i] says whether range i's bytes may be kept: copied whole while its entry held
  // still, and the owner lives and is not stopped (a request to a stopped owner fails once its
  // peer timeout passes, as every request does: its memory is not read meanwhile either).
  void Copy(const Range* ranges, const iovec* local, size_t count, bool* ok) const;
  // Copy of one range while the owner serves another part of the same READ on the ring, whose
  // answer, if it comes, says the owner ran: no look at whether it is stopped. Whether the
  // bytes may be kept, or why not.
  enum class Kept { kYes, kOwnerGone, kWithdrawn, kNotMapped };
  Kept CopyServed(const Range& range, const iovec& local) const;

 private:
  PublishedRegionsReader(std::unique_ptr<PeerMemory> memory, pid_t owner, int pidfd, int stat)
      : memory_(std::move(memory)), owner_(owner), pidfd_(pidfd), stat_(stat) {}
  bool Running() const;
  bool Alive() const;
  bool Unchanged(const Range& r) const;
  std::unique_ptr<PeerMemory> memory_;
  pid_t owner_;
  int pidfd_;
  int stat_;  // /proc/<owner>/stat, open: whether it is stopped
};

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_SAME_HOST_REGIONS_H_
