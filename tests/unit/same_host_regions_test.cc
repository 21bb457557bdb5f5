// An owner's published host regions (plugins/common/same_host_regions.h), as a reader on its
// host reads them: a range inside a live region is found and copied; outside it, in a region
// withdrawn or never published, or in one whose entry changed during the copy (withdrawn,
// republished), or from an owner that has died, nothing is kept.
#include "same_host_regions.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rayaccel::plugin {
namespace {

std::unique_ptr<PublishedRegionsReader> ReaderOf(pid_t owner, const PublishedRegions& table,
                                                 std::string* why) {
  const SharedMemory& m = table.memory();
  return PublishedRegionsReader::Map(owner, m.fd(), m.device(), m.inode(), m.length(), why);
}

TEST(PublishedRegions, ARangeIsReadOnlyWhileItsRegionHoldsStill) {
  std::string why;
  auto table = PublishedRegions::Create(&why);
  ASSERT_NE(table, nullptr) << why;
  std::vector<char> region(1 << 16, 'r');
  table->Publish(7, region.data(), region.size());
  auto reader = ReaderOf(getpid(), *table, &why);
  ASSERT_NE(reader, nullptr) << why;

  PublishedRegionsReader::Range range;
  EXPECT_FALSE(reader->Find(7, 1, region.size(), &range)) << "past the end";
  EXPECT_FALSE(reader->Find(7, region.size() + 1, 0, &range));
  EXPECT_FALSE(reader->Find(8, 0, 16, &range)) << "never published";
  EXPECT_FALSE(reader->Find(0, 0, 16, &range));
  ASSERT_TRUE(reader->Find(7, 100, 4096, &range));
  std::vector<char> mine(4096, 0);
  iovec local{mine.data(), mine.size()};
  bool ok = false;
  reader->Copy(&range, &local, 1, &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(mine[0], 'r');
  EXPECT_EQ(mine[4095], 'r');

  // A shared READ's part (the owner serving the rest): kept on the same terms, but for
  // whether the owner is stopped, which its answer says.
  std::memset(mine.data(), 0, mine.size());
  EXPECT_EQ(reader->CopyServed(range, local), PublishedRegionsReader::Kept::kYes);
  EXPECT_EQ(mine[4095], 'r');

  // Withdrawn between the look-up and the copy's end: the bytes are not kept.
  ASSERT_TRUE(reader->Find(7, 0, 16, &range));
  table->Withdraw(7);
  reader->Copy(&range, &local, 1, &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(reader->CopyServed(range, local), PublishedRegionsReader::Kept::kWithdrawn);
  EXPECT_FALSE(reader->Find(7, 0, 16, &range)) << "withdrawn";
  // Published again (as after a re-registration under a new id in the same place, or the
  // same): a look-up from before does not hold.
  table->Publish(7, region.data(), region.size());
  ASSERT_TRUE(reader->Find(7, 0, 16, &range));
  table->Publish(7 + kPublishedRegions, region.data(), 32);
  reader->Copy(&range, &local, 1, &ok);
  EXPECT_FALSE(ok);
  EXPECT_FALSE(reader->Find(7, 0, 16, &range)) << "its place taken by a newer region";
  EXPECT_TRUE(reader->Find(7 + kPublishedRegions, 0, 32, &range));
  // Withdrawing a region whose place another took leaves the other.
  table->Withdraw(7);
  EXPECT_TRUE(reader->Find(7 + kPublishedRegions, 0, 32, &range));
}

// An address the owner no longer has (or never had) fails the copy, and so does an owner
// that is stopped or has died (its pid may be another process's by then).
TEST(PublishedRegions, NothingIsKeptFromMemoryTheOwnerLacksOrFromADeadOwner) {
  std::string why;
  auto table = PublishedRegions::Create(&why);
  ASSERT_NE(table, nullptr) << why;
  table->Publish(1, InPeer(4096), 4096);  // not this process's
  auto reader = ReaderOf(getpid(), *table, &why);
  ASSERT_NE(reader, nullptr) << why;
  PublishedRegionsReader::Range range;
  ASSERT_TRUE(reader->Find(1, 0, 64, &range));
  std::vector<char> mine(64, 0);
  iovec local{mine.data(), mine.size()};
  bool ok = true;
  reader->Copy(&range, &local, 1, &ok);
  EXPECT_FALSE(ok);
  EXPECT_EQ(reader->CopyServed(range, local), PublishedRegionsReader::Kept::kNotMapped);

  // A child owner publishes a region of its own, is mapped, then dies.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    static char memory[4096];
    std::memset(memory, 'c', sizeof(memory));
    std::string w;
    auto t = PublishedRegions::Create(&w);
    if (t == nullptr) _exit(1);
    t->Publish(3, memory, sizeof(memory));
    const SharedMemory& m = t->memory();
    uint64_t says[4] = {static_cast<uint64_t>(m.fd()), m.device(), m.inode(), m.length()};
    if (write(ready[1], says, sizeof(says)) != sizeof(says)) _exit(1);
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  uint64_t says[4] = {};
  ASSERT_EQ(read(ready[0], says, sizeof(says)), static_cast<ssize_t>(sizeof(says)));
  auto theirs = PublishedRegionsReader::Map(child, static_cast<int>(says[0]), says[1], says[2],
                                            says[3], &why);
  ASSERT_NE(theirs, nullptr) << why;
  ASSERT_TRUE(theirs->Find(3, 0, 64, &range));
  theirs->Copy(&range, &local, 1, &ok);
  EXPECT_TRUE(ok);
  EXPECT_EQ(mine[0], 'c');
  // Stopped, its memory is not read (a request to it fails once the peer timeout passes).
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  theirs->Copy(&range, &local, 1, &ok);
  EXPECT_FALSE(ok) << "read from a stopped owner";
  EXPECT_EQ(theirs->CopyServed(range, local), PublishedRegionsReader::Kept::kYes)
      << "a shared READ's part: the owner's answer for the rest decides";
  ASSERT_EQ(kill(child, SIGCONT), 0);
  theirs->Copy(&range, &local, 1, &ok);
  EXPECT_TRUE(ok) << "and again once it runs";
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(theirs->Find(3, 0, 64, &range)) << "the table outlives its owner in our mapping";
  std::memset(mine.data(), 0, mine.size());
  theirs->Copy(&range, &local, 1, &ok);
  EXPECT_FALSE(ok) << "read from a dead owner";
  EXPECT_EQ(theirs->CopyServed(range, local), PublishedRegionsReader::Kept::kOwnerGone);
  close(ready[0]);
  close(ready[1]);
}

TEST(PublishedRegions, ATableOfAnotherLayoutIsNotMapped) {
  std::string why;
  auto plain = SharedMemory::Create(64 + kPublishedRegions * 32, &why);
  ASSERT_NE(plain, nullptr) << why;
  EXPECT_EQ(PublishedRegionsReader::Map(getpid(), plain->fd(), plain->device(), plain->inode(),
                                        plain->length(), &why),
            nullptr);
  EXPECT_NE(why.find("layout"), std::string::npos) << why;
}

}  // namespace
}  // namespace rayaccel::plugin
