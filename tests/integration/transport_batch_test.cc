// Batched transfers end to end on real UCX: many READs or WRITEs on one connection as one
// request, each entry succeeding or failing on its own, prepared once and posted again; and a
// plugin built before batches (ABI 1.3), whose batches the host issues one transfer at a time.
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rayaccel/transport.h"
#include "support/test_support.h"
#include "support/transport_support.h"
#include "transport/transport_metrics.h"

namespace rayaccel {
namespace {

using ::rayaccel::testing::Pattern;
using ::rayaccel::testing::ScopedEnv;

std::unique_ptr<Transport> Open(const std::string& plugin) {
  TransportOptions o;
  o.plugin = plugin;
  o.search_path = {RAYACCEL_PLUGIN_DIR, RAYACCEL_TEST_PLUGIN_DIR};
  o.peer_timeout = absl::Seconds(10);
  return testing::OpenTransport(o);
}

// Refills a registered buffer in place (assigning a new vector would free the registered memory).
void Refill(std::vector<char>& v, char seed) {
  const std::vector<char> p = Pattern(v.size(), seed);
  std::copy(p.begin(), p.end(), v.begin());
}

absl::Status Finish(absl::StatusOr<BatchRequest>& r) {
  if (!r.ok()) return r.status();
  return r->Wait(absl::Now() + absl::Seconds(30));
}

// Entries of the sizes a model's tensors and a request's KV-cache blocks have, back to back in
// one buffer: 8 B to past the helper's chunk limit (64 KiB: larger entries go alone).
std::vector<uint64_t> Sizes() {
  std::vector<uint64_t> sizes;
  for (int i = 0; i < 700; ++i) sizes.push_back(8 + (i % 5) * 1000);  // many small ones
  for (int i = 0; i < 40; ++i) sizes.push_back(4096);
  sizes.push_back(64 << 10);
  sizes.push_back((64 << 10) + 1);  // the smallest that goes alone
  sizes.push_back(3 << 20);
  return sizes;
}

// The plugin under test (sim: batches in the plugin; acme-transport: ABI 1.3, none), over
// UCX_TLS=tcp and the default.
class TransportBatch : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    env_ = std::make_unique<ScopedEnv>("UCX_TLS", std::get<1>(GetParam()));
    owner_ = Open(std::get<0>(GetParam()));
    reader_ = Open(std::get<0>(GetParam()));
    ASSERT_NE(owner_, nullptr);
    ASSERT_NE(reader_, nullptr);
  }
  std::unique_ptr<ScopedEnv> env_;
  std::unique_ptr<Transport> owner_, reader_;
};

TEST_P(TransportBatch, EveryEntryOfABatchReadAndWriteLands) {
  const std::vector<uint64_t> sizes = Sizes();
  const uint64_t total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  std::vector<char> source = Pattern(total, 5), target(total, 0), local(total, 0);
  auto src = owner_->Register(source.data(), total);
  auto dst = owner_->Register(target.data(), total);
  auto mine = reader_->Register(local.data(), total);
  ASSERT_TRUE(src.ok() && dst.ok() && mine.ok());
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();

  // Reads land in reverse order of the owner's layout: each entry's own offsets count.
  std::vector<TransferEntry> reads, writes;
  uint64_t at = 0;
  for (uint64_t size : sizes) {
    reads.push_back({*mine, total - at - size, *owner_->Describe(*src), at, size});
    writes.push_back({*mine, at, *owner_->Describe(*dst), at, size});
    at += size;
  }
  auto r = reader_->ReadBatch(*conn, reads);
  ASSERT_TRUE(Finish(r).ok()) << r.status();
  EXPECT_EQ(r->size(), sizes.size());
  EXPECT_EQ(r->failed(), 0u);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(r->path(i), TransferPath::kFabric) << "entry " << i << ": host memory";
  }
  at = 0;
  for (uint64_t size : sizes) {
    ASSERT_EQ(0, std::memcmp(local.data() + total - at - size, source.data() + at, size))
        << "the entry at " << at << " of " << size << " bytes";
    at += size;
  }

  Refill(local, 9);
  auto w = reader_->WriteBatch(*conn, writes);
  ASSERT_TRUE(Finish(w).ok()) << w.status();
  EXPECT_EQ(target, local);

  // A notification after a batch arrives once every entry landed.
  Refill(local, 11);
  auto w2 = reader_->WriteBatch(*conn, writes);
  ASSERT_TRUE(w2.ok()) << w2.status();
  ASSERT_TRUE(testing::Done(reader_->Notify(*conn, "kv blocks in")).ok());
  auto got = owner_->TakeNotifications(1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(got.ok() && got->size() == 1) << got.status();
  EXPECT_EQ(target, local);
  EXPECT_TRUE(w2->Wait(absl::Now() + absl::Seconds(10)).ok());
}

TEST_P(TransportBatch, EachEntryFailsOnItsOwnAndTheOthersLand) {
  std::vector<char> a = Pattern(1 << 20, 1), b = Pattern(1 << 20, 2), local(4 << 20, 0);
  auto ra = owner_->Register(a.data(), a.size());
  auto rb = owner_->Register(b.data(), b.size());
  auto mine = reader_->Register(local.data(), local.size());
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  const std::string da = *owner_->Describe(*ra), db = *owner_->Describe(*rb);
  // A forged descriptor claiming b is 4 MiB: the reader's checks pass, the owner's do not.
  const std::string big = testing::Forge(db, [](DescriptorInfo& info, testing::Payload& p) {
    info.length = 4 << 20;
    p.Set64(24, 4 << 20);
  });
  ASSERT_TRUE(owner_->Deregister(*ra).ok());
  std::vector<TransferEntry> entries = {
      {*mine, 0, db, 0, 4096},                    // lands
      {*mine, 4096, da, 0, 4096},                 // a deregistered region: stale
      {*mine, 8192, big, 2 << 20, 4096},          // past the owner's region: refused
      {*mine, 12288, db, 8192, 4096},             // lands
      {*mine, 1 << 20, big, 3 << 20, 200 << 10},  // refused, alone (not in a chunk)
      {*mine, 2 << 20, db, 0, 1 << 20},           // lands, alone
  };
  auto r = reader_->ReadBatch(*conn, entries);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::Status s = r->Wait(absl::Now() + absl::Seconds(30));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("3 of 6 entries failed"), std::string::npos) << s;
  EXPECT_EQ(r->failed(), 3u);
  EXPECT_TRUE(r->entry(0).ok()) << r->entry(0);
  EXPECT_TRUE(IsStale(r->entry(1))) << r->entry(1);
  EXPECT_TRUE(absl::IsInvalidArgument(r->entry(2))) << r->entry(2);
  EXPECT_NE(r->entry(2).message().find("entry 2"), std::string::npos) << r->entry(2);
  EXPECT_TRUE(r->entry(3).ok()) << r->entry(3);
  EXPECT_TRUE(absl::IsInvalidArgument(r->entry(4))) << r->entry(4);
  EXPECT_TRUE(r->entry(5).ok()) << r->entry(5);
  EXPECT_EQ(0, std::memcmp(local.data(), b.data(), 4096));
  EXPECT_EQ(0, std::memcmp(local.data() + 12288, b.data() + 8192, 4096));
  EXPECT_EQ(0, std::memcmp(local.data() + (2 << 20), b.data(), 1 << 20));
  EXPECT_EQ(local[4096], 0) << "a refused entry wrote nothing";

  // Writes: the refused entries store nothing in the owner's memory.
  std::vector<char> before = b;
  std::fill(local.begin(), local.end(), 'w');
  auto w = reader_->WriteBatch(*conn, {{*mine, 0, big, (1 << 20) - 8, 16}, {*mine, 0, db, 16, 16}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(w->Wait(absl::Now() + absl::Seconds(30)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(w->entry(0))) << w->entry(0);
  EXPECT_TRUE(w->entry(1).ok()) << w->entry(1);
  EXPECT_EQ(std::string(b.end() - 8, b.end()), std::string(before.end() - 8, before.end()));
  EXPECT_EQ(std::string(b.data() + 16, 16), std::string(16, 'w'));
}

TEST_P(TransportBatch, APreparedBatchPostsAgainAndSeesRegionsGo) {
  std::vector<char> source(64 << 10), local(64 << 10);
  auto src = owner_->Register(source.data(), source.size());
  auto mine = reader_->Register(local.data(), local.size());
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::vector<TransferEntry> entries;
  for (uint64_t i = 0; i < 64; ++i)
    entries.push_back({*mine, i * 1024, *owner_->Describe(*src), i * 1024, 1024});
  auto batch = reader_->PrepareBatch(TransferOp::kRead, *conn, entries);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->size(), 64u);
  for (char round = 1; round <= 3; ++round) {
    Refill(source, round);
    auto r = reader_->Post(*batch);
    ASSERT_TRUE(Finish(r).ok()) << r.status();
    EXPECT_EQ(local, source) << "round " << int{round};
  }
  // The owner's region goes: every entry is stale. The reader's goes: the post is refused.
  ASSERT_TRUE(owner_->Deregister(*src).ok());
  auto stale = reader_->Post(*batch);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_TRUE(IsStale(Finish(stale)));
  EXPECT_EQ(stale->failed(), 64u);
  ASSERT_TRUE(reader_->Deregister(*mine).ok());
  absl::Status gone = reader_->Post(*batch).status();
  EXPECT_TRUE(absl::IsInvalidArgument(gone)) << gone;
  EXPECT_NE(gone.message().find("entry 0: no local region"), std::string::npos) << gone;
  // Another transport's batch is not this one's to post.
  EXPECT_TRUE(absl::IsInvalidArgument(owner_->Post(*batch).status()));
}

TEST_P(TransportBatch, MalformedBatchesAreRefusedNamingTheEntry) {
  std::vector<char> source(4096), local(4096);
  auto src = owner_->Register(source.data(), source.size());
  auto mine = reader_->Register(local.data(), local.size());
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  const std::string d = *owner_->Describe(*src);
  auto refused = [&](std::vector<TransferEntry> entries, const std::string& says) {
    absl::Status s = reader_->ReadBatch(*conn, entries).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s) || absl::IsDataLoss(s)) << s;
    EXPECT_NE(s.message().find(says), std::string::npos) << s;
  };
  refused({}, "a batch of no transfers");
  refused({{*mine, 0, d, 0, 16}, {*mine, 0, d, 0, 0}}, "entry 1: a transfer of 0 bytes");
  refused({{*mine, 0, d, 0, 16}, {*mine, 0, "garbage", 0, 16}}, "entry 1:");
  refused({{*mine, 0, d, 4000, 200}}, "entry 0: bytes [4000, +200) lie outside the remote");
  refused({{*mine, 4000, d, 0, 200}}, "entry 0: bytes [4000, +200) lie outside local region");
  refused({{*mine + 7, 0, d, 0, 16}}, "entry 0: no local region");
  EXPECT_TRUE(
      absl::IsInvalidArgument(reader_->ReadBatch(*conn + 9, {{*mine, 0, d, 0, 16}}).status()));
  // After all that, the connection still serves.
  auto r = reader_->ReadBatch(*conn, {{*mine, 0, d, 0, 4096}});
  EXPECT_TRUE(Finish(r).ok()) << r.status();
  // The memory goes only once no transport holds it.
  EXPECT_TRUE(owner_->Deregister(*src).ok());
  EXPECT_TRUE(reader_->Deregister(*mine).ok());
}

TEST_P(TransportBatch, AClosedConnectionFailsTheBatchAsALostPeer) {
  std::vector<char> source(1 << 20), local(1 << 20);
  auto src = owner_->Register(source.data(), source.size());
  auto mine = reader_->Register(local.data(), local.size());
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE(reader_->Close(*conn).ok());
  absl::Status s = reader_->ReadBatch(*conn, {{*mine, 0, *owner_->Describe(*src), 0, 64}}).status();
  EXPECT_TRUE(IsPeerLost(s)) << s;
  // The owner closes: a batch in flight or after ends as a lost peer, entry by entry.
  auto again = reader_->Connect(owner_->address());
  ASSERT_TRUE(again.ok()) << again.status();
  const std::string d = *owner_->Describe(*src);
  owner_.reset();
  std::vector<TransferEntry> entries;
  for (uint64_t i = 0; i < 300; ++i) entries.push_back({*mine, i * 64, d, i * 64, 64});
  auto r = reader_->ReadBatch(*again, entries);
  if (r.ok()) {
    absl::Status lost = Finish(r);
    EXPECT_TRUE(IsPeerLost(lost)) << lost;
    EXPECT_EQ(r->failed(), 300u);
  } else {
    EXPECT_TRUE(IsPeerLost(r.status())) << r.status();
  }
}

TEST_P(TransportBatch, StatsCountEachEntryAndEachRequest) {
  const std::string plugin = std::get<0>(GetParam());
  std::vector<char> a(1 << 20), b(1 << 20), local(2 << 20);
  auto ra = owner_->Register(a.data(), a.size());
  auto rb = owner_->Register(b.data(), b.size());
  auto mine = reader_->Register(local.data(), local.size());
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  const std::string da = *owner_->Describe(*ra), db = *owner_->Describe(*rb);
  ASSERT_TRUE(owner_->Deregister(*ra).ok());
  auto r = reader_->ReadBatch(*conn, {{*mine, 0, db, 0, 4096},
                                      {*mine, 4096, db, 0, 100},
                                      {*mine, 8192, da, 0, 4096},
                                      {*mine, 1 << 20, db, 0, 1 << 20}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(Finish(r).ok());
  ASSERT_TRUE(testing::Done(reader_->Write(*conn, *mine, 0, db, 0, 512)).ok());
  ASSERT_TRUE(testing::Done(reader_->Notify(*conn, "n")).ok());

  TransportStats s = reader_->Stats();
  const auto read = static_cast<int>(TransferOp::kRead),
             write = static_cast<int>(TransferOp::kWrite);
  const auto fabric = static_cast<int>(TransferPath::kFabric);
  EXPECT_EQ(s.transfers[read][fabric].completed, 3u);
  EXPECT_EQ(s.transfers[read][fabric].bytes, 4096u + 100 + (1 << 20));
  EXPECT_EQ(s.transfers[read][fabric].failed, 1u);
  EXPECT_EQ(s.transfers[write][fabric].completed, 1u);
  EXPECT_EQ(s.transfers[write][fabric].bytes, 512u);
  EXPECT_EQ(s.latency[read].count, 1u) << "a batch is one request";
  EXPECT_EQ(s.latency[write].count, 1u);
  EXPECT_EQ(s.latency[read].counts.size(), s.latency[read].bounds.size() + 1);
  EXPECT_EQ(s.connections, 1u);
  EXPECT_EQ(s.connections_opened, 1u);
  EXPECT_EQ(s.regions, 1u);
  EXPECT_EQ(s.registered_bytes, 2u << 20);
  EXPECT_EQ(s.notifications_sent, 1u);
  EXPECT_EQ(s.peers_lost, 0u);
  EXPECT_EQ(owner_->Stats().regions, 1u);

  const std::string text = transport::MetricsText(s, plugin);
  const std::string labels = absl::StrCat("{op=\"read\",path=\"fabric\",plugin=\"", plugin, "\"}");
  EXPECT_NE(text.find("rayaccel_transport_transfers_total" + labels + " 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rayaccel_transport_transfer_errors_total" + labels + " 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(absl::StrCat(
          "rayaccel_transport_request_duration_seconds_bucket{le=\"+Inf\",op=\"read\",plugin=\"",
          plugin, "\"} 1\n")),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE rayaccel_transport_request_duration_seconds histogram\n"),
            std::string::npos);
  EXPECT_NE(text.find(absl::StrCat("rayaccel_transport_registered_bytes{plugin=\"", plugin,
                                   "\"} 2097152\n")),
            std::string::npos)
      << text;

  // The owner goes: the connection's next transfers fail as a lost peer, counted once.
  owner_.reset();
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(testing::Done(reader_->Read(*conn, *mine, 0, db, 0, 64), absl::Seconds(15)).ok());
  }
  EXPECT_EQ(reader_->Stats().peers_lost, 1u);
}

INSTANTIATE_TEST_SUITE_P(Ucx, TransportBatch,
                         ::testing::Combine(::testing::Values("sim", "acme-transport"),
                                            ::testing::Values("all", "tcp")),
                         [](const auto& info) {
                           std::string name =
                               absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace rayaccel
