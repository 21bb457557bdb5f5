// What both transport helpers do alike with their peers (plugins/common/transport_peers.h):
// the owner's bounds check above all, since every range a reader names passes through it.
#include "transport_peers.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace rayaccel::plugin::peers {
namespace {

struct FakeRegion {
  uint64_t length = 0;
};

TEST(RegionTable, ARangeInsideALiveRegionPassesAndEveryOtherIsRefused) {
  RegionTable<FakeRegion> table;
  FakeRegion a{4096}, b{1};
  const uint64_t ida = table.Add(&a), idb = table.Add(&b);
  EXPECT_EQ(ida, 1u);  // ids count up from 1: 0 never names a region
  EXPECT_EQ(idb, 2u);
  FakeRegion* out = nullptr;
  EXPECT_EQ(table.Check(ida, 0, 4096, &out), RAYACCEL_STATUS_OK);
  EXPECT_EQ(out, &a);
  EXPECT_EQ(table.Check(ida, 4095, 1, &out), RAYACCEL_STATUS_OK);
  EXPECT_EQ(table.Check(idb, 0, 1, &out), RAYACCEL_STATUS_OK);
  EXPECT_EQ(out, &b);
  out = nullptr;
  // Past the end, empty, and the sums a forger would pick to wrap around.
  EXPECT_EQ(table.Check(ida, 4096, 1, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(ida, 1, 4096, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(ida, 0, 0, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(ida, 0, UINT64_MAX, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(ida, UINT64_MAX, 2, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(ida, 4000, UINT64_MAX - 3999, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  // Ids never given out.
  EXPECT_EQ(table.Check(0, 0, 1, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(3, 0, 1, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(table.Check(UINT64_MAX, 0, 1, &out), RAYACCEL_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
}

TEST(RegionTable, ARemovedRegionIsStaleForGoodAndItsIdIsNotReused) {
  RegionTable<FakeRegion> table;
  FakeRegion a{64}, b{64};
  const uint64_t ida = table.Add(&a);
  EXPECT_EQ(table.Remove(ida), &a);
  EXPECT_EQ(table.Remove(ida), nullptr);
  FakeRegion* out = nullptr;
  EXPECT_EQ(table.Check(ida, 0, 1, &out), RAYACCEL_STATUS_STALE);
  EXPECT_EQ(table.Find(ida, &out), RAYACCEL_STATUS_STALE);
  const uint64_t idb = table.Add(&b);
  EXPECT_NE(idb, ida);
  EXPECT_EQ(table.Check(ida, 0, 1, &out), RAYACCEL_STATUS_STALE);
  EXPECT_EQ(table.Find(idb, &out), RAYACCEL_STATUS_OK);
  EXPECT_EQ(out, &b);
  auto all = table.TakeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all.begin()->second, &b);
  EXPECT_EQ(table.Check(idb, 0, 1, &out), RAYACCEL_STATUS_STALE);
}

TEST(Admission, AnOwnerTakesHellosUpToItsReadersAndSixtyFourHandshakes) {
  EXPECT_TRUE(MayAdmit(0, 0, 1024));
  EXPECT_TRUE(MayAdmit(1023, 63, 1024));
  EXPECT_FALSE(MayAdmit(1024, 0, 1024));
  EXPECT_FALSE(MayAdmit(100, kMaxHandshakes, 1024));
  EXPECT_FALSE(MayAdmit(0, 0, 0));
}

TEST(Refusal, TooManyIsResourceExhaustedAndAnythingElseAWrongKey) {
  EXPECT_EQ(RefusalStatus(kTooMany), RAYACCEL_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_EQ(RefusalStatus(kWrongKey), RAYACCEL_STATUS_UNAUTHENTICATED);
  EXPECT_EQ(RefusalStatus(0), RAYACCEL_STATUS_UNAUTHENTICATED);
  EXPECT_EQ(RefusalStatus(UINT32_MAX), RAYACCEL_STATUS_UNAUTHENTICATED);
  EXPECT_NE(RefusalText(kTooMany), RefusalText(kWrongKey));
}

TEST(Heartbeat, FourPerPeerTimeoutWithinTenMillisecondsAndASecond) {
  using std::chrono::milliseconds;
  EXPECT_EQ(HeartbeatInterval(milliseconds(2000)), milliseconds(500));
  EXPECT_EQ(HeartbeatInterval(milliseconds(10000)), milliseconds(1000));
  EXPECT_EQ(HeartbeatInterval(milliseconds(20)), milliseconds(10));
  EXPECT_EQ(HeartbeatInterval(milliseconds(0)), milliseconds(10));
}

TEST(EventCount, TheFirstIsLoggedAndAFloodIsCountedNotLogged) {
  EventCount e;
  EXPECT_TRUE(e.Count());
  int logged = 0;
  for (int i = 0; i < 10000; ++i) logged += e.Count() ? 1 : 0;
  EXPECT_EQ(logged, 0);
  EXPECT_EQ(e.count(), 10001u);
  EXPECT_NE(RefusedLine("a hello not signed", 3).find("3 refused so far"), std::string::npos);
  EXPECT_NE(MalformedLine("id 9", 2).find("id 9"), std::string::npos);
}

TEST(NotificationQueue, AFullQueueDropsNewOnesAndSaysTheFirstDropOnce) {
  NotificationQueue q;
  bool first = true;
  for (size_t i = 0; i < NotificationQueue::kMax; ++i) {
    const std::string m = std::to_string(i);
    ASSERT_TRUE(q.Push(m.data(), m.size(), &first));
    ASSERT_FALSE(first);
  }
  EXPECT_FALSE(q.Push("x", 1, &first));
  EXPECT_TRUE(first);
  EXPECT_FALSE(q.Push("y", 1, &first));
  EXPECT_FALSE(first);
  EXPECT_EQ(q.dropped(), 2u);
  auto all = q.TakeAll();
  ASSERT_EQ(all.size(), NotificationQueue::kMax);
  EXPECT_EQ(all.front(), "0");  // in order, the oldest kept
  EXPECT_TRUE(q.TakeAll().empty());
  EXPECT_TRUE(q.Push("z", 1, &first));  // room again
}

}  // namespace
}  // namespace rayaccel::plugin::peers
