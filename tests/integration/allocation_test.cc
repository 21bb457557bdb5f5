// Preferred allocation through the registry, on sim specs of real machine shapes. Each case
// says why its answer is the best one.
#include <set>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

using testing::Example;
using testing::Fixture;
using testing::SimPlugin;

using Set = std::vector<size_t>;

class Allocator {
 public:
  explicit Allocator(const std::string& spec,
                     AllocationObjective objective = AllocationObjective::kWholePartition) {
    RegistryOptions options;
    options.allocation_objective = objective;
    options.plugins = {SimPlugin()};
    options.use_environment = false;
    options.host_topology = false;  // the specs carry their own topology
    options.config["sim"]["spec"] = spec;
    auto registry = Registry::Create(options);
    EXPECT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
  }
  // `available` and `must`: snapshot positions, as decimal strings; the registry takes ids.
  Allocation Get(size_t size, std::vector<std::string> available = {},
                 std::vector<std::string> must = {}) {
    std::shared_ptr<const NodeSnapshot> snap = registry_->snapshot();
    for (std::vector<std::string>* list : {&available, &must}) {
      for (std::string& p : *list) p = snap->devices.at(std::stoul(p)).id;
    }
    absl::StatusOr<Allocation> a = registry_->PreferredAllocation(available, must, size);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Allocation();
  }
  Registry& registry() { return *registry_; }

 private:
  std::unique_ptr<Registry> registry_;
};

std::vector<std::string> Ids(std::initializer_list<int> positions) {
  std::vector<std::string> out;
  for (int p : positions) out.push_back(std::to_string(p));
  return out;
}

TEST(Allocation, Dgx1HybridCubeMesh) {
  Allocator dgx1(Example("dgx1-v100.json"));
  // Four GPUs: {0,1,2,3} and {4,5,6,7} are the only fully connected quads (nine NVLinks,
  // 225 GB/s inside the set); any other quad loses links.
  Set four = dgx1.Get(4).devices;
  EXPECT_TRUE(four == (Set{0, 1, 2, 3}) || four == (Set{4, 5, 6, 7}))
      << ::testing::PrintToString(four);
  // Two GPUs: the eight split best into four double-NVLink (NV2) pairs of one socket each,
  // 0-3, 1-2, 4-7, 5-6; the request gets the first. 2-3 alone would be stronger (NV2 and one
  // PCIe switch), but would leave 0 and 1 with a single link.
  Allocation two = dgx1.Get(2);
  EXPECT_EQ(two.devices, (Set{0, 3}));
  EXPECT_NE(two.reason.find("whole partition, exact over 8 devices"), std::string::npos)
      << two.reason;
  // Request first, the pair alone decides: 2-3 or 6-7.
  Allocator alone(Example("dgx1-v100.json"), AllocationObjective::kRequestFirst);
  Set strongest = alone.Get(2).devices;
  EXPECT_TRUE(strongest == (Set{2, 3}) || strongest == (Set{6, 7}))
      << ::testing::PrintToString(strongest);
  // One GPU with 0 taken, from {1,2,3}: taking 1 leaves 2-3 (NV2, same switch); taking 2
  // leaves 1-3 (NV1); taking 3 leaves 1-2 (NV2 across switches). So 1, in both objectives.
  EXPECT_EQ(dgx1.Get(1, Ids({1, 2, 3})).devices, (Set{1}));
  EXPECT_EQ(alone.Get(1, Ids({1, 2, 3})).devices, (Set{1}));
  // Must-include 5, two GPUs: 5's double links go to 1 and 6; 6 shares 5's socket, so {5, 6}.
  EXPECT_EQ(dgx1.Get(2, {}, Ids({5})).devices, (Set{5, 6}));
}

// NVIDIA's go-gpuallocator best-effort policy publishes its answers on three machines; every
// one of them is rayaccel's answer too. A sequence takes devices one request after another,
// as a device plugin does; the policy cases ask once from the given devices.
struct Request {
  size_t size;
  Set available;  // empty: whatever earlier requests left
  Set must;
  Set expected;  // empty: no answer
};

void ExpectSequence(const std::string& spec, const std::vector<Request>& requests) {
  Allocator a(spec);
  std::set<size_t> taken;
  size_t all = a.registry().snapshot()->devices.size();
  for (const Request& r : requests) {
    std::vector<std::string> available;
    for (size_t p = 0; p < all; ++p) {
      if (taken.count(p) == 0) available.push_back(std::to_string(p));
    }
    SCOPED_TRACE(::testing::PrintToString(available) + " size " + std::to_string(r.size));
    if (available.empty()) {  // nothing left: no answer, as the policy gives
      EXPECT_TRUE(r.expected.empty());
      continue;
    }
    Allocation got = a.Get(r.size, available);
    EXPECT_EQ(got.devices, r.expected) << got.reason;
    taken.insert(got.devices.begin(), got.devices.end());
  }
}

TEST(Allocation, AgreesWithGoGpuallocatorSequences) {
  const std::string go = Fixture("specs/go-gpuallocator/");
  const std::string volta = Example("dgx1-v100.json");
  for (size_t one = 0; one < 8; ++one) {
    std::vector<Request> ones;
    for (size_t i = 0; i < 8; ++i) ones.push_back({1, {}, {}, {i}});
    ones.push_back({1, {}, {}, {}});
    ExpectSequence(go + "dgx1-p100.json", ones);
    ExpectSequence(volta, ones);
  }
  ExpectSequence(go + "dgx1-p100.json", {{2, {}, {}, {0, 2}},
                                         {2, {}, {}, {1, 3}},
                                         {2, {}, {}, {4, 6}},
                                         {2, {}, {}, {5, 7}},
                                         {1, {}, {}, {}}});
  ExpectSequence(go + "dgx1-p100.json",
                 {{4, {}, {}, {0, 1, 2, 3}}, {4, {}, {}, {4, 5, 6, 7}}, {1, {}, {}, {}}});
  ExpectSequence(go + "dgx1-p100.json", {{8, {}, {}, {0, 1, 2, 3, 4, 5, 6, 7}}, {1, {}, {}, {}}});
  ExpectSequence(volta, {{2, {}, {}, {0, 3}},
                         {2, {}, {}, {1, 2}},
                         {2, {}, {}, {4, 7}},
                         {2, {}, {}, {5, 6}},
                         {1, {}, {}, {}}});
  ExpectSequence(volta, {{4, {}, {}, {0, 1, 2, 3}}, {4, {}, {}, {4, 5, 6, 7}}, {1, {}, {}, {}}});
  ExpectSequence(volta, {{8, {}, {}, {0, 1, 2, 3, 4, 5, 6, 7}}, {1, {}, {}, {}}});
  ExpectSequence(
      go + "rtx8000-4gpu.json",
      {{1, {}, {}, {0}}, {1, {}, {}, {1}}, {1, {}, {}, {2}}, {1, {}, {}, {3}}, {1, {}, {}, {}}});
  ExpectSequence(go + "rtx8000-4gpu.json",
                 {{2, {}, {}, {0, 3}}, {2, {}, {}, {1, 2}}, {1, {}, {}, {}}});
  ExpectSequence(go + "rtx8000-4gpu.json", {{4, {}, {}, {0, 1, 2, 3}}, {1, {}, {}, {}}});
  // Fourteen GPUs in pairs: the four-link pair is the best set of the best split.
  ExpectSequence(go + "14gpu-pairs.json", {{2, {}, {}, {12, 13}}});
}

TEST(Allocation, AgreesWithGoGpuallocatorPolicyCases) {
  Allocator volta(Example("dgx1-v100.json"));
  const std::vector<Request> cases = {
      {2, {0, 2, 4, 5}, {}, {4, 5}},               // single NVLink, same switch
      {2, {0, 4, 5, 6}, {}, {5, 6}},               // single NVLink, same socket
      {2, {0, 3, 1}, {}, {0, 3}},                  // dual NVLink, same socket
      {2, {0, 1, 4}, {}, {0, 4}},                  // dual NVLink across sockets
      {1, {0, 1, 2, 3, 4, 5, 6, 7}, {4}, {4}},     // must-include, size 1
      {2, {0, 1, 2, 3, 4, 5, 6, 7}, {4}, {4, 7}},  // must-include, size 2
      {4, {0, 1, 2, 3, 4, 5, 6, 7}, {4}, {4, 5, 6, 7}},
      {4, {1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}, {}},  // a must-include is not available
      {4, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 4, 6}, {0, 2, 4, 6}},
      {4, {0, 1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 4, 5, 6}, {}},  // more must-includes than size
      {1, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6}, {}},
  };
  for (const Request& r : cases) {
    std::vector<std::string> available, must;
    for (size_t p : r.available) available.push_back(std::to_string(p));
    for (size_t p : r.must) must.push_back(std::to_string(p));
    Allocation got = volta.Get(r.size, available, must);
    EXPECT_EQ(got.devices, r.expected) << ::testing::PrintToString(r.available) << " must "
                                       << ::testing::PrintToString(r.must) << ": " << got.reason;
  }
}

TEST(Allocation, WorkstationWithTwoNvlinkPairsAcrossSockets) {
  Allocator ws(Fixture("specs/workstation-4gpu.json"));
  // The NVLink bridge 0-1 on socket 0 (2-3 on socket 1 ties; lowest positions win ties).
  EXPECT_EQ(ws.Get(2).devices, (Set{0, 1}));
  EXPECT_EQ(ws.Get(2, {}, Ids({3})).devices, (Set{2, 3}));
  // With 0 busy, one GPU: every split into single GPUs scores the same, so the lowest position
  // wins: 1, which also keeps 2-3 whole.
  EXPECT_EQ(ws.Get(1, Ids({1, 2, 3})).devices, (Set{1}));
  // Only 0 and 2 free: the only possible pair, even across sockets.
  EXPECT_EQ(ws.Get(2, Ids({0, 2})).devices, (Set{0, 2}));
}

TEST(Allocation, Mi210TwoXgmiHives) {
  Allocator mi(Fixture("specs/mi210-2hives.json"));
  // Four: a whole hive (six xGMI links inside), never two from each.
  Set four = mi.Get(4).devices;
  EXPECT_TRUE(four == (Set{0, 1, 2, 3}) || four == (Set{4, 5, 6, 7}));
  // Two from {0,1,2,4,5}: a pair fits in either hive; taking 4-5 (all that is left of hive B)
  // keeps hive A's three free GPUs together for the next request.
  Allocation two = mi.Get(2, Ids({0, 1, 2, 4, 5}));
  EXPECT_EQ(two.devices, (Set{4, 5}));
  EXPECT_NE(two.reason.find("kept inside xgmi domain hive-0x77c2"), std::string::npos)
      << two.reason;
  // Must-include 1: the pair stays in hive A.
  Set with_one = mi.Get(2, {}, Ids({1})).devices;
  EXPECT_EQ(with_one.size(), 2u);
  EXPECT_LT(with_one[0], 4u);
  EXPECT_LT(with_one[1], 4u);
  // Six cannot fit in a hive: one whole hive plus two of the other, never 3+3.
  Set six = mi.Get(6).devices;
  size_t in_a = std::count_if(six.begin(), six.end(), [](size_t p) { return p < 4; });
  EXPECT_TRUE(in_a == 4 || in_a == 2) << ::testing::PrintToString(six);
}

TEST(Allocation, DgxH100AllToAllFallsBackToLocality) {
  Allocator h100(Example("dgx-h100.json"));
  // Every pair is NV18, so NUMA locality decides: four GPUs of one socket.
  Set four = h100.Get(4).devices;
  EXPECT_TRUE(four == (Set{0, 1, 2, 3}) || four == (Set{4, 5, 6, 7}));
  // Two from {0,1,4,5,6}: same-socket pairs tie; taking 0-1 keeps socket 1's three together.
  EXPECT_EQ(h100.Get(2, Ids({0, 1, 4, 5, 6})).devices, (Set{0, 1}));
}

TEST(Allocation, Nvl72DomainStaysWholeAndLocal) {
  Allocator nvl(Example("nvl72.json"));
  Allocation eight = nvl.Get(8);
  ASSERT_EQ(eight.devices.size(), 8u);
  std::set<int> numa;
  std::shared_ptr<const NodeSnapshot> snap = nvl.registry().snapshot();
  for (size_t p : eight.devices) numa.insert(snap->devices[p].numa_node);
  EXPECT_EQ(numa.size(), 1u);                                       // all on one NUMA node
  EXPECT_NE(eight.reason.find("local search"), std::string::npos);  // too many for exact
}

TEST(Allocation, ImpossibleRequestsSayWhy) {
  Allocator dgx1(Example("dgx1-v100.json"));
  EXPECT_NE(dgx1.Get(2, Ids({0, 1}), Ids({3})).reason.find("must-include device"),
            std::string::npos);
  EXPECT_NE(dgx1.Get(3, Ids({0, 1})).reason.find("only 2 GPU devices available, 3 requested"),
            std::string::npos);
  EXPECT_NE(dgx1.Get(1, {}, Ids({0, 1})).reason.find("more than the size"), std::string::npos);
  EXPECT_NE(dgx1.Get(0).reason.find("at least 1"), std::string::npos);
  EXPECT_TRUE(dgx1.Get(9).devices.empty());
  // Unknown devices are errors, not empty answers.
  EXPECT_FALSE(dgx1.registry().PreferredAllocation({"GPU-nope"}, {}, 1).ok());

  // The plugin's quantity rule: TPU takes 1, 2, 4 or 8 chips.
  Allocator tpu(Example("tpu-v4-host.json"));
  Allocation three = tpu.Get(3);
  EXPECT_TRUE(three.devices.empty());
  EXPECT_NE(three.reason.find("must be one of 1, 2, 4, 8"), std::string::npos) << three.reason;
  EXPECT_EQ(tpu.Get(2).devices.size(), 2u);
}

TEST(Allocation, TiesGoToTheLowestPositionWhateverTheOrderGiven) {
  Allocator h100(Example("dgx-h100.json"));
  EXPECT_EQ(h100.Get(1, Ids({3, 1})).devices, (Set{1}));
  EXPECT_EQ(h100.Get(2, Ids({7, 6, 5, 4})).devices, (Set{4, 5}));
}

TEST(Allocation, OnlyThePluginGivingTheResourceToRayIsAllocated) {
  // testgpu and sim both call their devices GPU; testgpu comes first and owns GPU.
  RegistryOptions options;
  options.plugins = {testing::TestPlugin("testgpu"), SimPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["sim"]["spec"] = Example("dgx-h100.json");
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok());
  absl::StatusOr<Allocation> a = (*registry)->PreferredAllocation({}, {}, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->devices, (Set{0, 1}));  // testgpu's two, never a mix with sim's
  EXPECT_TRUE((*registry)->PreferredAllocation({}, {}, 3)->devices.empty());
  std::shared_ptr<const NodeSnapshot> snap = (*registry)->snapshot();
  absl::StatusOr<Allocation> sim =
      (*registry)->PreferredAllocation({snap->devices[2].id, snap->devices[3].id}, {}, 1);
  EXPECT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("is not given to Ray as GPU"), absl::string_view::npos);
}

TEST(Allocation, UnhealthyDevicesAreNotOffered) {
  std::string dir = testing::MakeTempDir("alloc-health");
  std::string spec = dir + "/spec.json";
  FILE* f = std::fopen(spec.c_str(), "w");
  std::fputs(R"({"devices": [{"uuid": "a", "name": "NVIDIA L4", "vendor": "nvidia"},
    {"uuid": "b", "name": "NVIDIA L4", "vendor": "nvidia", "health": "unhealthy"}]})",
             f);
  std::fclose(f);
  Allocator l4(spec);
  EXPECT_EQ(l4.Get(1).devices, (Set{0}));
  EXPECT_TRUE(l4.Get(2).devices.empty());
}

}  // namespace
}  // namespace rayaccel
