// The transport against a peer that does what an attacker or a confused program would: forged
// descriptors with their checksums recomputed, UCX spoken directly without the key, wrong keys
// in a flood, and owners that stop without dying. The owner runs in another process
// (tests/support/transport_peer.cc) with guard pages around its regions and a canary page it
// never registers; nothing here may read the canary, change it or the regions' neighbours, or
// bring either process down.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/same_host_regions.h"
#include "common/same_host_ring_layout.h"
#include "gtest/gtest.h"
#include "rayaccel/transport.h"
#include "support/child_process.h"
#include "support/test_support.h"
#include "support/transport_support.h"
#include "transport/descriptor.h"

namespace rayaccel {
namespace {

using ::rayaccel::testing::Done;
using ::rayaccel::testing::Forge;
using ::rayaccel::testing::MakeTempDir;
using ::rayaccel::testing::Payload;
using ::rayaccel::testing::ScopedEnv;

// A region, and each guard around it: 16 KiB, so that an owner on this host copies a whole
// region into its reader rather than send it (kSameHostCopyMin in plugins/common/ucx/handles.h).
constexpr size_t kUnit = 16 << 10;
constexpr unsigned char kCanary = 0xC5;

std::string WriteKey(const std::string& dir, const std::string& name, char fill) {
  std::string path = dir + "/" + name;
  std::string key(32, fill);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  EXPECT_EQ(write(fd, key.data(), key.size()), static_cast<ssize_t>(key.size()));
  close(fd);
  return path;
}

// The owner process (tests/support/transport_peer.cc owner), answering on its stdout.
struct Owner {
  std::unique_ptr<testing::PipedChild> child;
  pid_t pid = -1;
  std::string address, a, b, allocated;
  uint64_t canary = 0;

  bool Alive() const { return child->Alive(); }
  std::string Ask(const std::string& command) { return child->Ask(command); }
  size_t OpenFiles() const {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"))) {
      (void)e;
      ++n;
    }
    return n;
  }
};

std::unique_ptr<Owner> StartOwner(const std::string& dir, const std::string& key_file,
                                  int timeout_ms = 10000) {
  auto o = std::make_unique<Owner>();
  std::string out = dir + "/owner.txt";
  unlink(out.c_str());
  o->child = std::make_unique<testing::PipedChild>(
      RAYACCEL_TRANSPORT_PEER,
      std::vector<std::string>{"owner", out, key_file, std::to_string(timeout_ms)});
  o->pid = o->child->pid();
  if (o->pid <= 0) return nullptr;
  if (!testing::WaitForFile(out)) return o;
  std::vector<std::string> lines = testing::Lines(out);
  if (lines.size() != 6) return o;
  absl::WebSafeBase64Unescape(lines[0], &o->address);
  absl::WebSafeBase64Unescape(lines[1], &o->a);
  absl::WebSafeBase64Unescape(lines[2], &o->b);
  absl::WebSafeBase64Unescape(lines[3], &o->allocated);
  o->canary = std::stoull(lines[4], nullptr, 16);
  return o;
}

std::unique_ptr<Transport> Reader(const std::string& key_file,
                                  absl::Duration timeout = absl::Seconds(10)) {
  TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.key_file = key_file;
  o.peer_timeout = timeout;
  auto t = Transport::Open(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

class TransportAttack : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    // "+messages": the owner on this host sends what it serves rather than copy it into us.
    // "+no-ring": it copies, asked by message rather than on its request ring.
    absl::string_view tls = GetParam();
    const bool messages = absl::ConsumeSuffix(&tls, "+messages");
    const bool no_ring = absl::ConsumeSuffix(&tls, "+no-ring");
    ring_ = !messages && !no_ring;
    env_ = std::make_unique<ScopedEnv>("UCX_TLS", std::string(tls).c_str());
    same_host_ = std::make_unique<ScopedEnv>("RAYACCEL_TRANSPORT_SAME_HOST", messages ? "0" : "1");
    ring_env_ = std::make_unique<ScopedEnv>("RAYACCEL_TRANSPORT_RING", no_ring ? "0" : "1");
    dir_ = MakeTempDir(absl::StrCat("transport-attack-", GetParam()));
    key_ = WriteKey(dir_, "key", 'k');
    owner_ = StartOwner(dir_, key_);
    ASSERT_NE(owner_, nullptr);
    ASSERT_FALSE(owner_->address.empty()) << "the owner did not start";
    before_ = owner_->Ask("check");
    ASSERT_EQ(before_.substr(0, 9), "canary ok") << before_;
  }
  // The canary is untouched, B is as it was, and the owner answers.
  void ExpectOwnerUnharmed() {
    ASSERT_TRUE(owner_->Alive()) << "the owner process died";
    std::string after = owner_->Ask("check");
    EXPECT_EQ(after.substr(0, 9), "canary ok") << after;
    EXPECT_EQ(after.substr(after.find(" b ")), before_.substr(before_.find(" b "))) << "B changed";
  }
  std::unique_ptr<ScopedEnv> env_, same_host_, ring_env_;
  std::string dir_, key_, before_;
  std::unique_ptr<Owner> owner_;
  bool ring_ = false;  // readers here are served on the owner's request ring
};

// The threads of process `pid`.
size_t Threads(pid_t pid) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    (void)e;
    ++n;
  }
  return n;
}

// FNV-1a, as the owner fingerprints its regions.
uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool HoldsCanary(const std::vector<unsigned char>& v) {
  for (unsigned char c : v) {
    if (c == kCanary) return true;
  }
  return false;
}

TEST_P(TransportAttack, ForgedDescriptorsReachNothingOutsideALiveRegion) {
  auto reader = Reader(key_);
  ASSERT_NE(reader, nullptr);
  std::vector<unsigned char> local(4 * kUnit, 0);
  auto mine = reader->Register(local.data(), local.size());
  ASSERT_TRUE(mine.ok());
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->a, 0, kUnit)).ok());
  ASSERT_EQ(local[0], 'A');
  const uint64_t b_id = Payload{std::string(transport::Decode(owner_->b)->payload)}.Get64(16);

  struct Case {
    std::string name;
    std::function<void(DescriptorInfo&, Payload&)> edit;
    uint64_t offset, length;
  };
  std::vector<Case> cases = {
      {"both lengths doubled, read past the end",
       [](DescriptorInfo& i, Payload& p) { i.length = 2 * kUnit, p.Set64(24, 2 * kUnit); }, 0,
       2 * kUnit},
      {"both lengths doubled, the page after",
       [](DescriptorInfo& i, Payload& p) { i.length = 2 * kUnit, p.Set64(24, 2 * kUnit); }, kUnit,
       kUnit},
      {"lengths huge",
       [](DescriptorInfo& i, Payload& p) { i.length = ~0ull >> 1, p.Set64(24, ~0ull >> 1); },
       (~0ull >> 2), kUnit},
      {"a region id never given",
       [](DescriptorInfo& i, Payload& p) { i.region = 999, p.Set64(16, 999); }, 0, 16},
      {"region id 0", [](DescriptorInfo& i, Payload& p) { i.region = 0, p.Set64(16, 0); }, 0, 16},
      {"another endpoint's id",
       [](DescriptorInfo& i, Payload& p) { i.endpoint ^= 1, p.Set64(8, p.Get64(8) ^ 1); }, 0, 16},
      {"a v1 payload naming the canary",
       [this](DescriptorInfo&, Payload& p) {
         Payload v1{std::string(56, '\0')};
         v1.bytes.replace(0, 8, p.bytes.substr(0, 8));
         v1.bytes[4] = 1;
         v1.bytes[6] = 16;
         v1.Set64(8, p.Get64(8));
         v1.Set64(16, p.Get64(16));
         v1.Set64(24, owner_->canary);
         v1.Set64(32, kUnit);
         p = v1;
       },
       0, 64},
      {"trailing bytes", [](DescriptorInfo&, Payload& p) { p.bytes += std::string(16, '\x55'); }, 0,
       16},
      {"unknown flag set", [](DescriptorInfo&, Payload& p) { p.bytes[6] = 8; }, 0, 16},
  };
  for (const Case& c : cases) {
    std::string forged = Forge(owner_->a, c.edit);
    if (forged.empty()) continue;  // not even an envelope the host would write
    std::fill(local.begin(), local.end(), 0);
    const uint64_t n = std::min<uint64_t>(c.length, local.size());
    for (bool write : {false, true}) {
      absl::Status s = write ? Done(reader->Write(*conn, *mine, 0, forged, c.offset, n))
                             : Done(reader->Read(*conn, *mine, 0, forged, c.offset, n));
      EXPECT_TRUE(absl::IsInvalidArgument(s) || IsStale(s))
          << c.name << (write ? " (write): " : " (read): ") << s;
    }
    EXPECT_FALSE(HoldsCanary(local)) << c.name;
  }
  // Relabelled as B: a live region, so the owner serves it, within B's bounds only.
  std::string as_b = Forge(owner_->a, [b_id](DescriptorInfo& i, Payload& p) {
    i.region = b_id, p.Set64(16, b_id), i.length = 2 * kUnit, p.Set64(24, 2 * kUnit);
  });
  EXPECT_TRUE(absl::IsInvalidArgument(Done(reader->Read(*conn, *mine, 0, as_b, 0, 2 * kUnit))));
  ASSERT_TRUE(Done(reader->Read(*conn, *mine, 0, as_b, 0, kUnit)).ok());
  EXPECT_EQ(local[0], 'B');

  // A deregistered region, under its own id or relabelled: stale, whatever the forger says.
  ASSERT_EQ(owner_->Ask("dereg-a"), "ok");
  EXPECT_TRUE(IsStale(Done(reader->Read(*conn, *mine, 0, owner_->a, 0, kUnit))));
  EXPECT_TRUE(IsStale(Done(reader->Write(*conn, *mine, 0, owner_->a, 0, kUnit))));

  // Random damage, checksum recomputed: never a crash, a hang, or a canary byte.
  std::mt19937_64 random(42);
  for (int i = 0; i < 300; ++i) {
    std::string forged = Forge(owner_->b, [&](DescriptorInfo& info, Payload& p) {
      switch (random() % 4) {
        case 0:
          info.length = random() % (4 * kUnit) + 1;
          break;
        case 1:
          info.region = random() % 8;
          break;
        default:
          break;
      }
      for (int flips = 1 + random() % 3; flips > 0; --flips) {
        p.bytes[random() % p.bytes.size()] ^= static_cast<char>(1 << (random() % 8));
      }
    });
    if (forged.empty()) continue;
    const uint64_t offset = random() % (2 * kUnit);
    const uint64_t length = 1 + random() % kUnit;
    absl::Status s = Done(reader->Read(*conn, *mine, 0, forged, offset, length), absl::Seconds(15));
    EXPECT_FALSE(absl::IsDeadlineExceeded(s)) << "a forged read hung";
  }
  EXPECT_FALSE(HoldsCanary(local));
  ExpectOwnerUnharmed();
  // And the genuine descriptor of B still works.
  EXPECT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
}

// Host memory the owner's helper allocated is a sealed memfd that a reader on its host maps
// (same_host_copy.h): reads and writes are a memcpy there, through a mapping of that region
// alone. A descriptor forged longer is not served from the mapping but refused by the owner; a
// registered region relabelled as mappable is not mapped; deregistration takes the mapping
// back. Over messages (the same-host path off) the same descriptors move the same bytes.
TEST_P(TransportAttack, AMappedRegionReachesItselfAloneAndIsTakenBackOnDeregister) {
  const bool messages = absl::EndsWith(GetParam(), "+messages");
  auto reader = Reader(key_);
  ASSERT_NE(reader, nullptr);
  std::vector<unsigned char> local(4 * kUnit, 0);
  auto mine = reader->Register(local.data(), local.size());
  ASSERT_TRUE(mine.ok());
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_EQ(owner_->Ask("fill-alloc"), "ok");

  auto read = reader->Read(*conn, *mine, 0, owner_->allocated, 0, kUnit);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->Wait(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(read->path(), messages ? TransferPath::kFabric : TransferPath::kSameHost);
  EXPECT_EQ(std::string(local.begin(), local.begin() + kUnit), std::string(kUnit, 'C'));
  if (!messages) {  // mapped: a read needs nothing of the owner's process, even stopped
    ASSERT_EQ(kill(owner_->pid, SIGSTOP), 0);
    const absl::Status stopped = Done(reader->Read(*conn, *mine, 0, owner_->allocated, 0, kUnit));
    kill(owner_->pid, SIGCONT);
    EXPECT_TRUE(stopped.ok()) << stopped;
  }
  // A write lands in the owner's memory, as its own fingerprint of the region says.
  std::fill(local.begin(), local.begin() + kUnit, 'w');
  ASSERT_TRUE(Done(reader->Write(*conn, *mine, 0, owner_->allocated, 0, kUnit)).ok());
  EXPECT_EQ(owner_->Ask("alloc"), absl::StrCat("alloc ", Fnv(local.data(), kUnit)));

  // Batches: entries of the region's one descriptor (parsed and mapped once for all of them)
  // at different offsets, and one of B, which the owner serves. A batch of mapped entries alone
  // needs nothing of a stopped owner.
  const size_t q = kUnit / 4;
  for (size_t i = 0; i < kUnit; ++i) local[i] = static_cast<unsigned char>(i * 7 % 251);
  std::vector<unsigned char> expected(kUnit);
  const size_t to[] = {3, 0, 2, 1};  // quarter i of `local` -> quarter to[i] of the region
  std::vector<TransferEntry> writes;
  for (size_t i = 0; i < 4; ++i) {
    writes.push_back({*mine, i * q, owner_->allocated, to[i] * q, q});
    std::copy_n(local.begin() + i * q, q, expected.begin() + to[i] * q);
  }
  auto wrote = reader->WriteBatch(*conn, writes);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  ASSERT_TRUE(wrote->Wait(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(owner_->Ask("alloc"), absl::StrCat("alloc ", Fnv(expected.data(), kUnit)));
  std::vector<TransferEntry> reads = {{*mine, kUnit, owner_->allocated, 0, kUnit},
                                      {*mine, 2 * kUnit, owner_->b, 0, q},
                                      {*mine, 3 * kUnit, owner_->allocated, q, q}};
  auto got = reader->ReadBatch(*conn, reads);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->Wait(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), local.begin() + kUnit));
  EXPECT_EQ(std::string(local.begin() + 2 * kUnit, local.begin() + 2 * kUnit + q),
            std::string(q, 'B'));
  EXPECT_TRUE(
      std::equal(expected.begin() + q, expected.begin() + 2 * q, local.begin() + 3 * kUnit));
  for (size_t i : {0, 2}) {
    EXPECT_EQ(got->path(i), messages ? TransferPath::kFabric : TransferPath::kSameHost) << i;
  }
  if (!messages) {
    reads.erase(reads.begin() + 1);
    ASSERT_EQ(kill(owner_->pid, SIGSTOP), 0);
    auto stopped = reader->ReadBatch(*conn, reads);
    const absl::Status landed =
        stopped.ok() ? stopped->Wait(absl::Now() + absl::Seconds(10)) : stopped.status();
    kill(owner_->pid, SIGCONT);
    EXPECT_TRUE(landed.ok()) << landed;
  }

  // Longer than the region, in the envelope and the plugin's bytes: refused, never served from
  // a mapping of the region alone.
  const std::string longer = Forge(owner_->allocated, [](DescriptorInfo& i, Payload& p) {
    i.length = 2 * kUnit, p.Set64(24, 2 * kUnit);
  });
  ASSERT_FALSE(longer.empty());
  std::fill(local.begin(), local.end(), 0);
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{0, 2 * kUnit}, {kUnit, kUnit}}) {
    EXPECT_TRUE(
        absl::IsInvalidArgument(Done(reader->Read(*conn, *mine, 0, longer, offset, length))));
    EXPECT_TRUE(
        absl::IsInvalidArgument(Done(reader->Write(*conn, *mine, 0, longer, offset, length))));
  }
  EXPECT_FALSE(HoldsCanary(local));
  // A registered region (B, between guard pages) relabelled as mappable host memory: the owner
  // maps nothing of it, and serves it within its bounds.
  const std::string mappable_b =
      Forge(owner_->b, [](DescriptorInfo&, Payload& p) { p.bytes[6] = 1 | 4; });
  ASSERT_FALSE(mappable_b.empty());
  ASSERT_TRUE(Done(reader->Read(*conn, *mine, 0, mappable_b, 0, kUnit)).ok());
  EXPECT_EQ(local[0], 'B');
  EXPECT_TRUE(absl::IsInvalidArgument(Done(reader->Read(*conn, *mine, 0, mappable_b, kUnit, 1))));

  // Deregistered while mapped here: the owner takes the mapping back within the peer timeout,
  // and the region is stale from then on.
  const absl::Time asked = absl::Now();
  ASSERT_EQ(owner_->Ask("dereg-alloc"), "ok");
  EXPECT_LT(absl::Now() - asked, absl::Seconds(5));
  EXPECT_TRUE(IsStale(Done(reader->Read(*conn, *mine, 0, owner_->allocated, 0, kUnit))));
  EXPECT_TRUE(IsStale(Done(reader->Write(*conn, *mine, 0, owner_->allocated, 0, kUnit))));
  // In a batch, its entries alone.
  auto after = reader->ReadBatch(*conn, {{*mine, 0, owner_->allocated, 0, q},
                                         {*mine, q, owner_->b, 0, q},
                                         {*mine, 2 * q, owner_->allocated, q, q}});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->Wait(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_TRUE(IsStale(after->entry(0))) << after->entry(0);
  EXPECT_TRUE(after->entry(1).ok()) << after->entry(1);
  EXPECT_TRUE(IsStale(after->entry(2))) << after->entry(2);
  ExpectOwnerUnharmed();
  EXPECT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
}

// A reader that names memory it does not have (its own mistake, or a lie about where the bytes
// should go): the owner on this host copies nothing elsewhere, the reader hears an error, and
// both go on. Over messages UCX itself would write into the reader's unmapped page.
TEST_P(TransportAttack, AReaderNamingMemoryItDoesNotHaveGetsAnErrorAndTheOwnerServesOn) {
  if (absl::EndsWith(GetParam(), "+messages")) GTEST_SKIP() << "the owner copies nothing here";
  auto reader = Reader(key_);
  ASSERT_NE(reader, nullptr);
  auto* gone = static_cast<unsigned char*>(
      mmap(nullptr, kUnit, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  auto region = reader->Register(gone, kUnit);
  ASSERT_TRUE(region.ok()) << region.status();
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_EQ(mprotect(gone, kUnit, PROT_NONE), 0);
  for (bool write : {false, true}) {
    absl::StatusOr<Request> r = write ? reader->Write(*conn, *region, 0, owner_->b, 0, kUnit)
                                      : reader->Read(*conn, *region, 0, owner_->b, 0, kUnit);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->path(), TransferPath::kSameHost);
    absl::Status s = Done(std::move(r));
    EXPECT_TRUE(absl::IsInternal(s)) << (write ? "write: " : "read: ") << s;
  }
  // A batch the owner copies in one call: the entries checked one by one (past B's end, by a
  // descriptor forged longer, is refused alone), the copy into memory the reader does not have
  // failing those it carried.
  const std::string longer = Forge(owner_->b, [](DescriptorInfo& i, Payload& p) {
    i.length = 2 * kUnit, p.Set64(24, 2 * kUnit);
  });
  std::vector<TransferEntry> entries = {{*region, 0, owner_->b, 0, 1024},
                                        {*region, 1024, longer, kUnit - 8, 1024},
                                        {*region, 2048, owner_->b, 2048, 1024}};
  for (bool write : {false, true}) {
    auto r = write ? reader->WriteBatch(*conn, entries) : reader->ReadBatch(*conn, entries);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->Wait(absl::Now() + absl::Seconds(20)).ok());
    for (size_t i = 0; i < entries.size(); ++i) {
      EXPECT_EQ(r->path(i), TransferPath::kSameHost) << i;
      EXPECT_TRUE(i == 1 ? absl::IsInvalidArgument(r->entry(i)) : absl::IsInternal(r->entry(i)))
          << (write ? "write " : "read ") << i << ": " << r->entry(i);
    }
  }
  ExpectOwnerUnharmed();
  ASSERT_EQ(mprotect(gone, kUnit, PROT_READ | PROT_WRITE), 0);
  auto r = reader->ReadBatch(*conn, entries);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->Wait(absl::Now() + absl::Seconds(20)).ok());
  EXPECT_TRUE(r->entry(0).ok() && r->entry(2).ok()) << r->entry(0) << r->entry(2);
  EXPECT_TRUE(absl::IsInvalidArgument(r->entry(1))) << r->entry(1);
  EXPECT_EQ(gone[0], 'B');
  EXPECT_EQ(gone[3071], 'B');
  ASSERT_TRUE(Done(reader->Read(*conn, *region, 0, owner_->b, 0, kUnit)).ok());
  EXPECT_EQ(gone[0], 'B');
  EXPECT_EQ(gone[kUnit - 1], 'B');
  ASSERT_TRUE(reader->Deregister(*region).ok());
  munmap(gone, kUnit);
}

// UCX spoken directly, without the key: UCX's software get and put aimed at the canary, and
// the transport's transfer messages with made-up tokens. The owner serves none of it.
TEST_P(TransportAttack, ARawUcxPeerWithoutTheKeyGetsNothing) {
  auto r = testing::Run({RAYACCEL_TRANSPORT_PEER, "raw", dir_ + "/owner.txt"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The last line: UCX logs to standard output too.
  EXPECT_TRUE(absl::EndsWith(r.out, "\nnothing\n") || r.out == "nothing\n") << r.out << r.err;
  ExpectOwnerUnharmed();
  auto reader = Reader(key_);
  std::vector<unsigned char> local(kUnit);
  auto mine = reader->Register(local.data(), local.size());
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
}

size_t OpenFiles() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

TEST_P(TransportAttack, WrongKeysAreRefusedAndAFloodLeaksNothing) {
  const std::string wrong = WriteKey(dir_, "wrong", 'w');
  {
    auto reader = Reader(wrong);
    auto refused = reader->Connect(owner_->address);
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(IsUnauthenticatedPeer(refused.status())) << refused.status();
    EXPECT_NE(refused.status().message().find("key"), std::string::npos) << refused.status();
  }
  // A warm-up flood, then the measured one: neither side keeps anything of a refused peer.
  auto flood = [&](int endpoints, int connects) {
    for (int e = 0; e < endpoints; ++e) {
      auto reader = Reader(wrong, absl::Seconds(5));
      for (int c = 0; c < connects; ++c) {
        absl::Status s = reader->Connect(owner_->address).status();
        EXPECT_TRUE(IsUnauthenticatedPeer(s)) << s;
      }
    }
  };
  flood(2, 5);
  absl::SleepFor(absl::Milliseconds(300));
  const size_t owner_files = owner_->OpenFiles(), own_files = OpenFiles();
  flood(10, 10);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_LE(owner_->OpenFiles(), owner_files + 2) << "the owner keeps files of refused peers";
  EXPECT_LE(OpenFiles(), own_files + 2) << "the reader keeps files of refused connects";
  // An explicit key in the options, the same bytes as the file: admitted.
  TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.key = std::string(32, 'k');
  auto good = Transport::Open(o);
  ASSERT_TRUE(good.ok()) << good.status();
  std::vector<unsigned char> local(kUnit);
  auto mine = (*good)->Register(local.data(), local.size());
  auto conn = (*good)->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_TRUE(Done((*good)->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
  ExpectOwnerUnharmed();
}

// An owner that stops without dying (SIGSTOP: a frozen process, a paused VM): every request to
// it fails PEER_LOST within the peer timeout (a READ of a region it published too: its memory
// is not read while it is stopped), and once it resumes it is not let back into the old
// connection.
TEST_P(TransportAttack, AStoppedOwnerIsLostWithinThePeerTimeoutAndNotReadmitted) {
  auto reader = Reader(key_, absl::Seconds(1));
  std::vector<unsigned char> local(kUnit);
  auto mine = reader->Register(local.data(), local.size());
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
  ASSERT_TRUE(testing::StopAndWait(owner_->pid));
  absl::Time stopped = absl::Now();
  absl::Status read = Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit), absl::Seconds(30));
  absl::Duration noticed = absl::Now() - stopped;
  EXPECT_TRUE(IsPeerLost(read)) << read;
  EXPECT_LT(noticed, absl::Seconds(3)) << "a 1 s peer timeout, noticed after " << noticed;
  EXPECT_TRUE(IsPeerLost(Done(reader->Write(*conn, *mine, 0, owner_->b, 0, kUnit))));
  ASSERT_EQ(kill(owner_->pid, SIGCONT), 0);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(IsPeerLost(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit))))
      << "the old connection stays lost";
  EXPECT_TRUE(reader->Close(*conn).ok());
  auto again = reader->Connect(owner_->address);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Done(reader->Read(*again, *mine, 0, owner_->b, 0, kUnit)).ok());
  ExpectOwnerUnharmed();
}

// A reader stopped or killed in the middle of its requests (on the owner's request ring, or by
// message) costs its own connection alone: the owner serves another reader meanwhile,
// deregisters the region the stopped one was using without waiting for it, and once the reader
// is gone, so are its ring, the ring's thread and every descriptor it held in the owner.
TEST_P(TransportAttack, AReaderStoppedOrKilledMidRequestCostsItsOwnConnectionAlone) {
  auto reader = Reader(key_);
  ASSERT_NE(reader, nullptr);
  std::vector<unsigned char> local(kUnit);
  auto mine = reader->Register(local.data(), local.size());
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
  const size_t threads = Threads(owner_->pid), files = owner_->OpenFiles();
  for (bool stopped : {false, true}) {
    SCOPED_TRACE(stopped ? "stopped, then killed" : "killed while running");
    testing::PipedChild child(RAYACCEL_TRANSPORT_PEER,
                              {"looping-reader", dir_ + "/owner.txt", key_});
    ASSERT_EQ(child.Ask("start"), "looping");
    if (ring_) EXPECT_EQ(Threads(owner_->pid), threads + 1) << "the reader's ring has a thread";
    if (stopped) {
      ASSERT_TRUE(testing::StopAndWait(child.pid()));
      for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok()) << i;
      }
      EXPECT_EQ(owner_->Ask("dereg-a"), "ok") << "A, which the stopped reader was using";
    }
    ASSERT_EQ(kill(child.pid(), SIGKILL), 0);
    for (absl::Time until = absl::Now() + absl::Seconds(30);
         (child.Alive() || Threads(owner_->pid) != threads || owner_->OpenFiles() != files) &&
         absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(Threads(owner_->pid), threads) << "the dead reader's ring thread is gone";
    EXPECT_EQ(owner_->OpenFiles(), files) << "and every descriptor it held";
    EXPECT_TRUE(Done(reader->Read(*conn, *mine, 0, owner_->b, 0, kUnit)).ok());
  }
  EXPECT_EQ(local[0], 'B');
  ExpectOwnerUnharmed();
}

// The owner's memfds of `length` bytes (its request rings, its table of published regions) but
// those of inodes in `skip`, mapped here as a reader on its host may map them: through /proc.
struct OwnersFile {
  char* data;
  size_t length;
  ino_t inode;
};
std::vector<OwnersFile> MapOwnersFiles(pid_t owner, uint64_t length,
                                       const std::set<ino_t>& skip = {}) {
  std::vector<OwnersFile> files;
  for (const auto& e : std::filesystem::directory_iterator(absl::StrCat("/proc/", owner, "/fd"))) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (ec || !absl::StartsWith(target, "/memfd:rayaccel-")) continue;
    const int fd = open(e.path().c_str(), O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == length &&
        skip.count(st.st_ino) == 0) {
      void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) files.push_back({static_cast<char*>(p), length, st.st_ino});
    }
    if (fd >= 0) close(fd);
  }
  return files;
}

// Writes what an owner could into its side of a ring and its table, until it is destroyed:
// answers claimed before they were made (or never), statuses of any value, garbage in the
// slots' data, its CPU and sleep flags at random, the table's words scribbled over.
class LyingOwner {
 public:
  LyingOwner(OwnersFile ring, OwnersFile table)
      : ring_(ring), table_(table), thread_([this] { Lie(); }) {}
  ~LyingOwner() {
    stop_ = true;
    thread_.join();
    munmap(ring_.data, ring_.length);
    munmap(table_.data, table_.length);
  }
  uint64_t rounds() const { return rounds_.load(); }

 private:
  void Lie() {
    std::mt19937_64 rng(7);
    auto any = [&rng]() -> uint32_t {
      switch (rng() % 4) {
        case 0:
          return 0;
        case 1:
          return 1;
        case 2:
          return ~0u;
        default:
          return static_cast<uint32_t>(rng());
      }
    };
    auto* h = reinterpret_cast<plugin::RingHeader*>(ring_.data);
    auto* slots = reinterpret_cast<plugin::RingSlot*>(ring_.data + sizeof(plugin::RingHeader));
    auto* table = reinterpret_cast<uint64_t*>(table_.data);
    while (!stop_.load()) {
      for (uint32_t i = 0; i < plugin::kRingSlots; ++i) {
        plugin::RingSlot& slot = slots[i];
        slot.done.store(rng() % 2 ? slot.posted.load() : any());
        __atomic_store_n(&slot.status, rng() % 2 ? static_cast<uint32_t>(rng() % 24) : any(),
                         __ATOMIC_RELAXED);
        const uint64_t word = rng();
        std::memcpy(slot.data + rng() % (plugin::kRingSlotData - 8), &word, 8);
      }
      for (std::atomic<uint32_t>* w : {&h->doorbell, &h->owner_sleeping, &h->owner_cpu,
                                       &h->answered, &h->readers_sleeping, &h->reader_cpu}) {
        w->store(any());
      }
      for (int i = 0; i < 64; ++i) {
        __atomic_store_n(&table[rng() % (table_.length / 8)], rng() % 2 ? rng() : rng() % (1 << 20),
                         __ATOMIC_RELAXED);
      }
      rounds_++;
      std::this_thread::yield();
    }
  }
  OwnersFile ring_, table_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rounds_{0};
  std::thread thread_;
};

// An owner that lies on its side of one reader's ring and in its table of published regions.
// A liar of the same user could do anything to its reader's memory through the kernel anyway;
// what the reader's own code takes from the owner's word is bounded by what it asked: never a
// byte past a transfer's range, never a crash or a call that does not return. The lies cost
// that connection alone (another on its own ring reads on meanwhile), a new one is served, and
// the closed connections' rings leave nothing behind in the owner.
TEST_P(TransportAttack, AnOwnerLyingInItsRingAndTableReachesNothingPastWhatTheReaderAsked) {
  if (!ring_) GTEST_SKIP() << "no ring: readers here are served by messages";
  auto reader = Reader(key_, absl::Seconds(5));
  ASSERT_NE(reader, nullptr);
  // Guard, inline READs' buffer, guard, larger READs' buffer, guard; and B as it is, to write.
  std::vector<unsigned char> local(5 * kUnit, kCanary), b(kUnit), kept(4 << 10);
  auto mine = reader->Register(local.data(), local.size());
  auto pristine = reader->Register(b.data(), b.size());
  auto keep = reader->Register(kept.data(), kept.size());
  ASSERT_TRUE(mine.ok() && pristine.ok() && keep.ok());
  auto keeper = reader->Connect(owner_->address);
  ASSERT_TRUE(keeper.ok()) << keeper.status();
  ASSERT_TRUE(Done(reader->Read(*keeper, *pristine, 0, owner_->b, 0, kUnit)).ok());
  const size_t threads = Threads(owner_->pid), files = owner_->OpenFiles();
  std::set<ino_t> keepers;
  for (const OwnersFile& f : MapOwnersFiles(owner_->pid, plugin::kRingBytes)) {
    keepers.insert(f.inode);
    munmap(f.data, f.length);
  }
  auto conn = reader->Connect(owner_->address);
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(Done(reader->Read(*conn, *mine, kUnit, owner_->b, 0, 8)).ok());
  auto rings = MapOwnersFiles(owner_->pid, plugin::kRingBytes, keepers);
  auto tables = MapOwnersFiles(owner_->pid, plugin::kPublishedRegionsBytes);
  ASSERT_EQ(rings.size(), 1u) << "the new connection's ring";
  ASSERT_EQ(tables.size(), 1u) << "the owner's table";

  int ok = 0, refused = 0;
  uint64_t rounds = 0;
  {
    LyingOwner liar(rings[0], tables[0]);
    std::mt19937 pick(11);
    // 300 transfers and 1000 rounds of lies (on two loaded cores the liar may wait its turn),
    // or what 10 s hold once 20 transfers ran: a ring the lies wedged times each one out.
    const absl::Time until = absl::Now() + absl::Seconds(10);
    for (int i = 0; (i < 300 || liar.rounds() < 1000) && (i < 20 || absl::Now() < until); ++i) {
      const int kind = static_cast<int>(pick() % 3);
      const uint64_t length = kind == 0 ? 1 + pick() % (8 << 10) : kUnit;
      std::memset(local.data() + kUnit, kCanary, kUnit);
      const absl::Time start = absl::Now();
      const absl::Duration limit = absl::Milliseconds(100);
      const absl::Status st =
          kind == 0   ? Done(reader->Read(*conn, *mine, kUnit, owner_->b, 0, length), limit)
          : kind == 1 ? Done(reader->Read(*conn, *mine, 3 * kUnit, owner_->b, 0, kUnit), limit)
                      : Done(reader->Write(*conn, *pristine, 0, owner_->b, 0, kUnit), limit);
      ASSERT_LT(absl::Now() - start, absl::Seconds(10)) << "a call that did not return: " << st;
      (st.ok() ? ok : refused)++;
      // What a reader says of an owner's answer: served, refused as a live owner refuses,
      // lost, or not yet; an owner's word of any other kind reads as its fault (INTERNAL).
      ASSERT_TRUE(st.ok() || absl::IsDeadlineExceeded(st) || absl::IsFailedPrecondition(st) ||
                  absl::IsInvalidArgument(st) || absl::IsInternal(st) || absl::IsUnavailable(st))
          << st;
      for (size_t at : {size_t{0}, 2 * kUnit, 4 * kUnit}) {
        ASSERT_TRUE(std::all_of(local.begin() + at, local.begin() + at + kUnit,
                                [](unsigned char c) { return c == kCanary; }))
            << "a guard changed, transfer " << i << " (" << st << ")";
      }
      if (kind == 0) {
        ASSERT_TRUE(std::all_of(local.begin() + kUnit + length, local.begin() + 2 * kUnit,
                                [](unsigned char c) { return c == kCanary; }))
            << "an inline READ of " << length << " bytes took more (" << st << ")";
      }
      if (i % 10 == 0) {  // another connection of this reader, on a ring of its own
        std::fill(kept.begin(), kept.end(), 0);
        ASSERT_TRUE(Done(reader->Read(*keeper, *keep, 0, owner_->b, 0, kept.size())).ok()) << i;
        ASSERT_TRUE(
            std::all_of(kept.begin(), kept.end(), [](unsigned char c) { return c == 'B'; }));
      }
    }
    rounds = liar.rounds();
  }
  EXPECT_GT(rounds, 0u);
  EXPECT_GT(refused, 0) << "the lies were heard (" << ok << " transfers passed)";

  // The connection the liar spoiled closes; a new one, on a new ring, is served whole.
  EXPECT_TRUE(reader->Close(*conn).ok());
  auto again = reader->Connect(owner_->address);
  ASSERT_TRUE(again.ok()) << again.status();
  std::fill(local.begin() + 3 * kUnit, local.begin() + 4 * kUnit, 0);
  EXPECT_TRUE(Done(reader->Read(*again, *mine, 3 * kUnit, owner_->b, 0, kUnit)).ok());
  EXPECT_TRUE(std::equal(b.begin(), b.end(), local.begin() + 3 * kUnit)) << "B read whole";
  EXPECT_TRUE(reader->Close(*again).ok());
  for (absl::Time until = absl::Now() + absl::Seconds(30);
       (Threads(owner_->pid) != threads || owner_->OpenFiles() != files) && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Threads(owner_->pid), threads) << "the closed connections' ring threads are gone";
  EXPECT_EQ(owner_->OpenFiles(), files) << "and their descriptors";
  ExpectOwnerUnharmed();
}

INSTANTIATE_TEST_SUITE_P(Ucx, TransportAttack,
                         ::testing::Values("all", "tcp", "tcp+no-ring", "tcp+messages"),
                         [](const auto& info) {
                           const std::string p = info.param;
                           return p == "all"           ? "AllTransports"
                                  : p == "tcp"         ? "Tcp"
                                  : p == "tcp+no-ring" ? "TcpNoRing"
                                                       : "TcpMessages";
                         });

// Keys from files: the checks a key file must pass, and the default key.
TEST(TransportKey, KeyFilesMustBePrivateAndOfAKeysSize) {
  std::string dir = MakeTempDir("transport-key");
  TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.key_file = WriteKey(dir, "open", 'o');
  chmod(o.key_file.c_str(), 0644);
  auto open = Transport::Open(o);
  EXPECT_TRUE(absl::IsPermissionDenied(open.status())) << open.status();
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos) << open.status();
  o.key_file = dir + "/short";
  { std::ofstream(o.key_file) << "too short"; }
  chmod(o.key_file.c_str(), 0600);
  EXPECT_TRUE(absl::IsInvalidArgument(Transport::Open(o).status()));
  o.key_file = dir + "/missing";
  EXPECT_FALSE(Transport::Open(o).ok());
  o.key_file.clear();
  o.key = "short";
  EXPECT_TRUE(absl::IsInvalidArgument(Transport::Open(o).status()));
  // The environment's key file, when the options name none.
  o.key.clear();
  ScopedEnv env("RAYACCEL_TRANSPORT_KEY_FILE", (dir + "/open").c_str());
  EXPECT_TRUE(absl::IsPermissionDenied(Transport::Open(o).status()));
}

}  // namespace
}  // namespace rayaccel
