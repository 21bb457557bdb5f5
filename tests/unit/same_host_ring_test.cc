// The same-host request ring (plugins/common/same_host_ring.h) between its owner's thread and a
// reader mapping it through /proc, as two processes do: requests answered in order with their
// data, a full ring refusing more, an owner asleep woken by a post, a ring of another layout
// refused, and a reader that writes garbage into its slots or dies mid-request reaching the
// handler with checked fields only and costing the owner nothing.
#include "same_host_ring.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rayaccel::plugin {
namespace {

using std::chrono::microseconds;

// The reader's mapping of `owner`'s ring, as a reader in another process makes it.
std::unique_ptr<RingReader> MapOf(const RingOwner& owner, std::string* why) {
  const SharedMemory& m = owner.memory();
  return RingReader::Map(getpid(), m.fd(), m.device(), m.inode(), m.length(), why);
}

// Waits for request `n`'s answer (Sleep until it comes, or 10 s).
bool Answered(const RingReader& reader, uint32_t n, uint32_t* status) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!reader.Done(n, status)) {
    if (std::chrono::steady_clock::now() > until) return false;
    reader.Sleep(n, microseconds(1000));
  }
  return true;
}

// An owner whose handler answers a READ with `length` bytes of (offset + i) and counts calls.
struct EchoOwner {
  std::unique_ptr<RingOwner> ring;
  std::atomic<int> calls{0};
  explicit EchoOwner(microseconds spin, microseconds idle = std::chrono::seconds(1)) {
    std::string why;
    ring = RingOwner::Create(&why);
    EXPECT_NE(ring, nullptr) << why;
    ring->Start(
        [this](const RingCall& call, char* data) -> uint32_t {
          calls++;
          if (call.op != RingOp::kRead || call.length > kRingSlotData) return 2;
          for (uint64_t i = 0; i < call.length; ++i) data[i] = static_cast<char>(call.offset + i);
          return 0;
        },
        spin, idle);
  }
};

TEST(SameHostRing, RequestsAreAnsweredInOrderWithTheirBytes) {
  for (microseconds spin : {microseconds(0), microseconds(50)}) {
    EchoOwner owner(spin);
    std::string why;
    auto reader = MapOf(*owner.ring, &why);
    ASSERT_NE(reader, nullptr) << why;
    for (uint32_t i = 0; i < 5 * kRingSlots; ++i) {
      uint32_t n = 0, status = 99;
      ASSERT_TRUE(reader->Next(&n));
      EXPECT_EQ(n, i + 1);
      reader->Post(n, {RingOp::kRead, 0, 7, i, 100, 0});
      ASSERT_TRUE(Answered(*reader, n, &status)) << "request " << n << " was not answered";
      EXPECT_EQ(status, 0u);
      const char* got = reader->data(n);
      for (uint32_t b = 0; b < 100; ++b) ASSERT_EQ(got[b], static_cast<char>(i + b)) << n;
      reader->Take(n);
    }
    // What the handler refuses comes back as its status, for that request alone.
    uint32_t n = 0, status = 0;
    ASSERT_TRUE(reader->Next(&n));
    reader->Post(n, {RingOp::kWrite, 0, 7, 0, 1, 0});
    ASSERT_TRUE(Answered(*reader, n, &status));
    EXPECT_EQ(status, 2u);
    EXPECT_EQ(owner.calls.load(), static_cast<int>(5 * kRingSlots + 1));
  }
}

TEST(SameHostRing, AFullRingTakesNoMoreUntilAnAnswerIsTakenBack) {
  EchoOwner owner(microseconds(50));
  std::string why;
  auto reader = MapOf(*owner.ring, &why);
  ASSERT_NE(reader, nullptr) << why;
  for (uint32_t i = 0; i < kRingSlots; ++i) {
    uint32_t n = 0;
    ASSERT_TRUE(reader->Next(&n));
    reader->Post(n, {RingOp::kRead, 0, 1, 0, 8, 0});
  }
  uint32_t n = 0, status = 0;
  EXPECT_FALSE(reader->Next(&n)) << "a slot still holding an answer was offered again";
  ASSERT_TRUE(Answered(*reader, kRingSlots, &status));  // answered in order: all are
  EXPECT_FALSE(reader->Next(&n)) << "answered is not taken back";
  reader->Take(1);
  ASSERT_TRUE(reader->Next(&n));
  EXPECT_EQ(n, kRingSlots + 1);
}

TEST(SameHostRing, AnOwnerAsleepIsWokenByAPostAndStopsWhenTold) {
  // Asleep as soon as nothing is posted, and never looking again unasked: a post whose wake-up
  // were lost would leave its request unanswered past Answered's deadline.
  EchoOwner owner(microseconds(0), std::chrono::hours(1));
  std::string why;
  auto reader = MapOf(*owner.ring, &why);
  ASSERT_NE(reader, nullptr) << why;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint32_t n = 0, status = 0;
  ASSERT_TRUE(reader->Next(&n));
  reader->Post(n, {RingOp::kRead, 0, 1, 0, 8, 0});
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Answered(*reader, n, &status));
    reader->Take(n);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(reader->Next(&n));
    reader->Post(n, {RingOp::kRead, 0, 1, 0, 8, 0});
  }
  ASSERT_TRUE(Answered(*reader, n, &status));
  owner.ring.reset();  // stops and joins a thread asleep on the futex
}

TEST(SameHostRing, ARingOfAnotherLayoutOrSizeIsNotMapped) {
  std::string why;
  auto plain = SharedMemory::Create(kRingBytes, &why);  // zeros: no ring header
  ASSERT_NE(plain, nullptr) << why;
  EXPECT_EQ(RingReader::Map(getpid(), plain->fd(), plain->device(), plain->inode(), plain->length(),
                            &why),
            nullptr);
  EXPECT_NE(why.find("layout"), std::string::npos) << why;
  EchoOwner owner(microseconds(0));
  const SharedMemory& m = owner.ring->memory();
  EXPECT_EQ(RingReader::Map(getpid(), m.fd(), m.device(), m.inode(), m.length() / 2, &why),
            nullptr);
  EXPECT_EQ(RingReader::Map(getpid(), m.fd(), m.device(), m.inode() + 1, m.length(), &why),
            nullptr);
}

// A reader that scribbles over every slot (numbers, ops, lengths, counts) and one forked reader
// that dies with requests posted: the handler sees only what a slot posted in order names, and
// the owner serves an honest reader after.
TEST(SameHostRing, GarbageInTheSlotsAndADeadReaderCostTheOwnerNothing) {
  std::vector<RingCall> seen;
  std::mutex mu;
  std::string why;
  auto ring = RingOwner::Create(&why);
  ASSERT_NE(ring, nullptr) << why;
  ring->Start(
      [&](const RingCall& call, char* data) -> uint32_t {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(call);
        std::memset(data, 0x5A, 16);
        return 0;
      },
      microseconds(50));
  auto reader = MapOf(*ring, &why);
  ASSERT_NE(reader, nullptr) << why;
  // Everything after the header's first line scribbled over: futex words, flags, every slot's
  // numbers and fields.
  {
    const SharedMemory& m = ring->memory();
    auto raw = PeerMemory::Map(getpid(), m.fd(), m.device(), m.inode(), m.length(), &why);
    ASSERT_NE(raw, nullptr) << why;
    std::memset(raw->data() + 64, 0xFF, raw->length() - 64);
  }
  // A child, forked with the mapping, posts requests with absurd fields and dies mid-way.
  pid_t child = fork();
  if (child == 0) {
    for (uint32_t n = 1; n <= 3; ++n) {
      reader->Post(n, {static_cast<RingOp>(0xDEAD), 0xFFFFFFFFu, ~0ull, ~0ull, ~0ull, ~0ull});
    }
    _exit(0);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // The three posted in order reach the handler as they were written; the scribbled slots
  // after them (numbers that are not the next request's) never do.
  {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      std::lock_guard<std::mutex> lock(mu);
      if (seen.size() == 3) break;
    }
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 3u);
    for (const RingCall& c : seen) {
      EXPECT_EQ(static_cast<uint32_t>(c.op), 0xDEADu);  // passed on as read, for the handler
      EXPECT_EQ(c.count, 0xFFFFFFFFu);                  // to refuse: the ring checks nothing
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen.size(), 3u);
  }
  ring.reset();  // and the owner's thread ends when told
}

}  // namespace
}  // namespace rayaccel::plugin
