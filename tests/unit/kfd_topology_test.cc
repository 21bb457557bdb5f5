// The KFD topology reader on trees captured from real AMD machines, and on hand-made trees
// for the failure modes (each written by the test itself, next to what it breaks).
#include "rocm/kfd_topology.h"

#include <sys/stat.h>

#include <fstream>
#include <set>

#include "common/sysfs.h"
#include "gtest/gtest.h"

namespace rayaccel::rocm {
namespace {

std::string Capture(const std::string& name) {
  return std::string(RAYACCEL_FIXTURES_DIR) + "/rocm-kfd/" + name;
}

AmdTopology Load(const std::string& dir, std::vector<std::string>* problems = nullptr) {
  std::vector<KfdNode> nodes;
  std::vector<std::string> local;
  std::vector<std::string>* p = problems != nullptr ? problems : &local;
  EXPECT_TRUE(ReadKfdNodes(dir, &nodes, p)) << (p->empty() ? "" : p->front());
  return BuildTopology(nodes, p);
}

size_t Count(const AmdTopology& t, bool schedulable) {
  return std::count_if(t.devices.begin(), t.devices.end(),
                       [&](const AmdDevice& d) { return d.schedulable == schedulable; });
}

// One strict number parser for every sysfs value: "simd_count  -5" is not 2^64 - 5.
TEST(KfdProperties, NumbersAreParsedStrictly) {
  std::string path = ::testing::TempDir() + "/kfd-properties";
  std::ofstream(path) << "cpu_cores_count 4\nsimd_count  -5\nmax_waves +3\narray_count 12abc\n"
                         "max_slots_scratch_cu 18446744073709551616\nlocation_id 49920\n";
  std::optional<plugin::Properties> props = plugin::ReadProperties(path);
  ASSERT_TRUE(props);
  EXPECT_EQ(props->Get("cpu_cores_count"), 4u);
  EXPECT_EQ(props->Get("location_id"), 49920u);
  for (const char* bad : {"simd_count", "max_waves", "array_count", "max_slots_scratch_cu"}) {
    EXPECT_FALSE(props->Has(bad)) << bad;
  }
  EXPECT_EQ(props->bad.size(), 4u);
  EXPECT_EQ(plugin::ParseUnsigned("0"), 0u);
  EXPECT_FALSE(plugin::ParseUnsigned(" 1"));
  EXPECT_FALSE(plugin::ParseUnsigned("1 "));
  EXPECT_FALSE(plugin::ParseUnsigned("-1"));
  EXPECT_EQ(plugin::ParseSigned("-1"), -1);
  EXPECT_FALSE(plugin::ParseSigned("+1"));
  EXPECT_EQ(plugin::ParseHexId("0x10de\n"), 0x10deu);
  EXPECT_FALSE(plugin::ParseHexId("0x 10de"));
}

TEST(KfdTopology, Mi210TwoXgmiHives) {
  std::vector<std::string> problems;
  AmdTopology t = Load(Capture("topo-mi210-xgmi-pcie"), &problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  ASSERT_EQ(t.devices.size(), 8u);  // CPU nodes 0 and 1 are not devices
  EXPECT_EQ(Count(t, false), 0u);   // no partitions
  const AmdDevice& d = t.devices[0];
  EXPECT_EQ(d.kfd_node, 2u);
  EXPECT_EQ(d.pci_device_id, 0x740fu);
  EXPECT_EQ(d.name, "AMD Instinct MI210");
  EXPECT_EQ(d.gfx_target, "gfx90a");
  EXPECT_EQ(d.pci_bus_id, "0000:63:00.0");  // location_id 25344 = bus 0x63
  EXPECT_EQ(d.numa_node, 0);                // io_link to CPU node 0
  EXPECT_EQ(t.devices[4].numa_node, 1);
  EXPECT_EQ(d.compute_units, 104u);  // 416 SIMDs / 4 per CU
  EXPECT_EQ(d.render_minor, 128u);
  EXPECT_EQ(d.id, "GPU-1901ead3a2ecd4a6");  // unique_id 1801979520617338022
  ASSERT_EQ(t.hives.size(), 2u);
  for (const auto& [hive, members] : t.hives) EXPECT_EQ(members.size(), 4u);
  EXPECT_EQ(t.hives.at(12609507387757274807ull), (std::vector<uint32_t>{0, 1, 2, 3}));
  // Inside a hive: xGMI at 50 GB/s, weight 15, one hop. Across: PCIe, weight 72, via CPUs.
  int xgmi = 0, pcie = 0;
  for (const AmdLink& l : t.links) {
    bool same_hive = (l.a < 4) == (l.b < 4);
    if (l.type == kIoLinkXgmi) {
      ++xgmi;
      EXPECT_TRUE(same_hive);
      EXPECT_EQ(l.max_bandwidth, 50000u);
      EXPECT_EQ(l.weight, 15u);
      EXPECT_EQ(l.hops, 1u);
    } else {
      ++pcie;
      EXPECT_EQ(l.type, kIoLinkPcie);
      EXPECT_FALSE(same_hive);
      EXPECT_EQ(l.weight, 72u);
      EXPECT_GE(l.hops, 2u);
    }
  }
  EXPECT_EQ(xgmi, 2 * 6);
  EXPECT_EQ(pcie, 16);
}

TEST(KfdTopology, Mi300xInCpxMode) {
  AmdTopology t = Load(Capture("topo-mi300-cpx/topology"));
  // 8 physical GPUs; the capture holds 63 of their 64 CPX partitions.
  EXPECT_EQ(Count(t, false), 8u);
  EXPECT_EQ(Count(t, true), 63u);
  std::set<std::string> parents;
  for (const AmdDevice& d : t.devices) {
    if (!d.schedulable) {
      EXPECT_GE(d.index, 65536u);
      EXPECT_TRUE(d.parent_id.empty());
      continue;
    }
    EXPECT_EQ(d.partition_profile, "CPX");
    EXPECT_EQ(d.num_xcc, 1u);
    parents.insert(d.parent_id);
  }
  EXPECT_EQ(parents.size(), 8u);
  // Partitions of one GPU share its PCI address; their HIP ordinals follow KFD node order.
  EXPECT_EQ(t.devices[0].pci_bus_id, "0000:05:00.0");
  EXPECT_EQ(t.devices[7].pci_bus_id, "0000:05:00.0");
  EXPECT_EQ(t.devices[0].parent_id, t.devices[7].parent_id);
  EXPECT_NE(t.devices[7].parent_id, t.devices[8].parent_id);
  EXPECT_EQ(t.devices[3].index, 3u);
  ASSERT_EQ(t.hives.size(), 1u);
  EXPECT_EQ(t.hives.begin()->second.size(), 63u);
  // The parent adds up its partitions.
  const AmdDevice& parent = t.devices[63];
  EXPECT_EQ(parent.id, t.devices[0].parent_id);
  EXPECT_EQ(parent.num_xcc, 8u);
  EXPECT_EQ(parent.compute_units, 8u * 38u);
}

TEST(KfdTopology, Mi308xInCpxModeAndAnOlderGpu) {
  AmdTopology mi308 = Load(Capture("topology-parsing-mi308/topology"));
  EXPECT_EQ(Count(mi308, false), 8u);
  EXPECT_EQ(Count(mi308, true), 32u);  // 4 XCDs each, one per partition
  EXPECT_EQ(mi308.devices[0].partition_profile, "CPX");
  EXPECT_EQ(mi308.devices[0].memory_bytes, 51539607552u);  // a quarter of 192 GiB
  EXPECT_EQ(mi308.devices[0].name, "AMD Instinct MI308X");
  // PCI domain 1 devices keep their domain.
  bool domain1 = false;
  for (const AmdDevice& d : mi308.devices) domain1 = domain1 || d.pci_bus_id.rfind("0001:", 0) == 0;
  EXPECT_TRUE(domain1);

  AmdTopology old = Load(Capture("topology-parsing/topology"));
  ASSERT_EQ(old.devices.size(), 2u);  // same PCI address, different unique ids: two GPUs
  EXPECT_TRUE(old.devices[0].parent_id.empty());
  EXPECT_NE(old.devices[0].id, old.devices[1].id);
  EXPECT_EQ(old.devices[0].memory_bytes, 17163091968u);  // from mem_banks
  EXPECT_EQ(old.devices[0].name, "AMD GPU 0x6860");
}

class HandMadeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string base = ::testing::TempDir();
    while (!base.empty() && base.back() == '/') base.pop_back();
    root_ = base + "/rayaccel-kfd-XXXXXX";
    ASSERT_NE(mkdtemp(root_.data()), nullptr);
    Write("nodes/0/properties", "cpu_cores_count 8\nsimd_count 0\n");
    Write("nodes/1/properties",
          "simd_count 416\nsimd_per_cu 4\ndevice_id 29711\nlocation_id 768\ndomain 0\n"
          "unique_id 77\nhive_id 0\ngfx_target_version 90010\ndrm_render_minor 128\n");
    Write("nodes/1/io_links/0/properties", "type 2\nnode_from 1\nnode_to 0\nweight 20\n");
    Write("nodes/2/properties",
          "simd_count 416\nsimd_per_cu 4\ndevice_id 29711\nlocation_id 1024\ndomain 0\n"
          "unique_id 78\nhive_id 0\ngfx_target_version 90010\ndrm_render_minor 129\n");
  }
  void Write(const std::string& relative, const std::string& text) {
    std::string path = root_ + "/" + relative;
    for (size_t slash = path.find('/', root_.size() + 1); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      mkdir(path.substr(0, slash).c_str(), 0755);
    }
    std::ofstream(path) << text;
  }
  std::string root_;
};

TEST_F(HandMadeTree, GarbageValueSkipsThatNodeOnly) {
  Write("nodes/2/properties", "simd_count lots\nlocation_id 1024\n");
  std::vector<std::string> problems;
  AmdTopology t = Load(root_, &problems);
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].kfd_node, 1u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "KFD node 2: unparsable properties (simd_count: \"lots\"); skipped");
}

TEST_F(HandMadeTree, MissingFileMeansAVanishedNode) {
  Write("nodes/3/io_links/0/properties", "type 2\nnode_to 0\n");  // node 3 without properties
  std::vector<std::string> problems;
  AmdTopology t = Load(root_, &problems);
  EXPECT_EQ(t.devices.size(), 2u);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("KFD node 3: properties unreadable"), std::string::npos);
}

TEST_F(HandMadeTree, LinkToANodeThatDoesNotExist) {
  Write("nodes/2/io_links/0/properties", "type 11\nnode_from 2\nnode_to 9\nweight 15\n");
  Write("nodes/2/io_links/1/properties", "type 11\nnode_from 2\n");  // no node_to
  std::vector<std::string> problems;
  AmdTopology t = Load(root_, &problems);
  EXPECT_EQ(t.devices.size(), 2u);
  EXPECT_TRUE(t.links.empty());
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("unreadable or incomplete; link ignored"), std::string::npos);
  EXPECT_EQ(problems[1], "KFD node 2: link to node 9, which does not exist; ignored");
}

TEST_F(HandMadeTree, NoKfdAtAll) {
  std::vector<KfdNode> nodes;
  std::vector<std::string> problems;
  EXPECT_FALSE(ReadKfdNodes(root_ + "/missing", &nodes, &problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("is the amdgpu driver loaded?"), std::string::npos);
}

TEST(KfdTopology, GfxTargetNames) {
  EXPECT_EQ(GfxTarget(90010), "gfx90a");
  EXPECT_EQ(GfxTarget(90402), "gfx942");
  EXPECT_EQ(GfxTarget(110000), "gfx1100");
  EXPECT_EQ(GfxTarget(0), "");
}

}  // namespace
}  // namespace rayaccel::rocm
