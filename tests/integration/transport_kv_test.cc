// The KV-cache pattern of disaggregated serving, between this process as the prefill (its cache
// in memory it allocated, one region per layer and K or V) and a decode process
// (tests/support/transport_peer.cc kv-decode) pulling every block as one batch with a
// notification: the notification arrives only once every block landed, so that the prefill may
// free them on hearing it; and a decode killed mid-pull leaves the prefill's blocks whole, its
// deregistrations prompt and its tables (threads, descriptors) as before. On the owner's request
// ring, by the owner's copies asked by message, and by messages alone.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rayaccel/transport.h"
#include "support/child_process.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using ::rayaccel::testing::MakeTempDir;
using ::rayaccel::testing::ScopedEnv;

constexpr uint64_t kBlock = 16 << 10;
constexpr int kRegions = 16;       // 8 layers x K, V
constexpr uint64_t kBlocks = 256;  // per region: 4 MiB, 64 MiB in all

size_t Count(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}
size_t Threads() { return Count("/proc/self/task"); }
// This process's open descriptors, each as what it names.
std::multiset<std::string> Files() {
  std::multiset<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    // A socket or pipe is named by its inode: what counts is the kind.
    out.insert(target.substr(0, target.find('[')));
  }
  return out;
}
std::string Names(const std::multiset<std::string>& files) {
  std::string out;
  for (const std::string& f : files) absl::StrAppend(&out, f, " ");
  return out;
}

uint64_t Fnv(const std::vector<std::vector<unsigned char>>& regions) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& r : regions) {
    for (unsigned char c : r) h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

class TransportKv : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string mode = GetParam();
    same_host_ =
        std::make_unique<ScopedEnv>("RAYACCEL_TRANSPORT_SAME_HOST", mode == "messages" ? "0" : "1");
    ring_ = std::make_unique<ScopedEnv>("RAYACCEL_TRANSPORT_RING", mode == "ring" ? "1" : "0");
    dir_ = MakeTempDir(absl::StrCat("transport-kv-", mode));
    key_ = dir_ + "/key";
    {
      std::ofstream k(key_);
      k << std::string(32, 'k');
    }
    std::filesystem::permissions(
        key_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    TransportOptions o;
    o.plugin = "sim";
    o.search_path = {RAYACCEL_PLUGIN_DIR};
    o.key_file = key_;
    auto t = Transport::Open(o);
    ASSERT_TRUE(t.ok()) << t.status();
    prefill_ = *std::move(t);
    // Block b of region r: its bytes say (r, b), the rest a byte of the region's.
    std::ofstream lines(dir_ + "/prefill.txt");
    lines << absl::WebSafeBase64Escape(prefill_->address()) << "\n";
    for (int r = 0; r < kRegions; ++r) {
      cache_.emplace_back(kBlocks * kBlock, static_cast<unsigned char>('a' + r));
      for (uint64_t b = 0; b < kBlocks; ++b) {
        std::memcpy(&cache_.back()[b * kBlock], &b, sizeof(b));
        cache_.back()[b * kBlock + 8] = static_cast<unsigned char>(r);
      }
      auto region = prefill_->Register(cache_.back().data(), cache_.back().size());
      ASSERT_TRUE(region.ok()) << region.status();
      regions_.push_back(*region);
      lines << absl::WebSafeBase64Escape(*prefill_->Describe(*region)) << "\n";
    }
  }
  std::unique_ptr<testing::PipedChild> Decode(bool loop) {
    return std::make_unique<testing::PipedChild>(
        RAYACCEL_TRANSPORT_PEER,
        std::vector<std::string>{"kv-decode", dir_ + "/prefill.txt", key_, loop ? "1" : "0"});
  }
  std::unique_ptr<ScopedEnv> same_host_, ring_;
  std::string dir_, key_;
  std::unique_ptr<Transport> prefill_;
  std::vector<std::vector<unsigned char>> cache_;
  std::vector<Transport::RegionId> regions_;
};

// The prefill frees its blocks the moment it hears the notification: it overwrites them and
// deregisters them. Had the notification come before every block landed, the decode would have
// some of the new bytes, or a refusal.
TEST_P(TransportKv, TheNotificationComesOnlyOnceEveryBlockLanded) {
  const uint64_t want = Fnv(cache_);
  auto decode = Decode(/*loop=*/false);
  for (int round = 0; round < 3; ++round) {
    std::thread pull([&] {
      std::string answer = decode->Ask("pull");
      EXPECT_EQ(answer, absl::StrCat("landed ", want)) << "round " << round;
    });
    auto heard = prefill_->TakeNotifications(1, absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(heard.ok()) << heard.status();
    ASSERT_EQ(heard->size(), 1u);
    EXPECT_EQ((*heard)[0], "pulled");
    if (round == 2) {  // freed for good: overwritten, and deregistered
      for (auto& r : cache_) std::memset(r.data(), 0xEE, r.size());
      for (Transport::RegionId r : regions_) EXPECT_TRUE(prefill_->Deregister(r).ok());
    } else {  // freed and reused for the next round: overwritten, then refilled after a while
      std::vector<std::vector<unsigned char>> kept = cache_;
      for (auto& r : cache_) std::memset(r.data(), 0xEE, r.size());
      pull.join();
      for (size_t r = 0; r < cache_.size(); ++r) {
        std::memcpy(cache_[r].data(), kept[r].data(), kept[r].size());
      }
      continue;
    }
    pull.join();
  }
}

// A decode killed mid-pull, again and again: the prefill's blocks keep their bytes, it
// deregisters them at once (nothing waits on the dead reader), and its threads and descriptors
// come back to what they were before the decode connected; the next decode pulls them whole.
TEST_P(TransportKv, ADecodeKilledMidPullLeavesThePrefillWholeAndItsTablesClean) {
  const uint64_t want = Fnv(cache_);
  // A first decode, which leaves what UCX keeps once it has had a peer (an event descriptor);
  // then the tables as they are between decodes, once its ring's thread has gone.
  const size_t threads = Threads();
  EXPECT_EQ(Decode(/*loop=*/false)->Ask("pull"), absl::StrCat("landed ", want));
  for (absl::Time until = absl::Now() + absl::Seconds(30);
       Threads() != threads && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::multiset<std::string> files = Files();
  for (int round = 0; round < 3; ++round) {
    auto decode = Decode(/*loop=*/true);
    ASSERT_EQ(decode->Ask("pull"), "pulling");
    absl::SleepFor(absl::Milliseconds(20 * (round + 1)));
    ASSERT_EQ(kill(decode->pid(), SIGKILL), 0);
    decode.reset();  // reaped, its pipes closed
    for (absl::Time until = absl::Now() + absl::Seconds(30);
         (Threads() != threads || Files() != files) && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(Threads(), threads) << "round " << round;
    EXPECT_EQ(Names(Files()), Names(files)) << "round " << round;
    EXPECT_EQ(Fnv(cache_), want) << "round " << round;
  }
  auto decode = Decode(/*loop=*/false);
  EXPECT_EQ(decode->Ask("pull"), absl::StrCat("landed ", want));
  for (Transport::RegionId r : regions_) EXPECT_TRUE(prefill_->Deregister(r).ok());
}

INSTANTIATE_TEST_SUITE_P(Ucx, TransportKv, ::testing::Values("ring", "copies", "messages"));

}  // namespace
}  // namespace rayaccel
