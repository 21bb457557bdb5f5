// HostTopology on real machines' hwloc exports. Expected NUMA nodes and CPU sets are what
// hwloc's own tools print for the same files, e.g.
//   hwloc-calc --if xml --input nvidiaDGX2.xml pci=0000:34:00.0 -I NUMAnode --po   -> 0
//   hwloc-calc --if xml --input nvidiaDGX2.xml pci=0000:34:00.0 -I pu --po         -> 0,1
// and PCIe levels follow the trees `lstopo-no-graphics --if xml --input FILE` draws.
#include "topology/host_topology.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "topology/hwloc_cache.h"

namespace rayaccel {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(RAYACCEL_FIXTURES_DIR) + "/hwloc/" + name;
}

std::unique_ptr<HostTopology> Load(const std::string& name) {
  absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::Load(Fixture(name));
  EXPECT_TRUE(host.ok()) << host.status();
  return host.ok() ? *std::move(host) : nullptr;
}

// "0-1,8-9" -> {0,1,8,9}: to compare with hwloc-calc's "-I pu --po" lists.
std::set<int> Cpus(const std::string& list) {
  std::set<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> range = absl::StrSplit(part, '-');
    int lo = 0, hi = 0;
    EXPECT_TRUE(absl::SimpleAtoi(range[0], &lo)) << list;
    hi = lo;
    if (range.size() == 2) EXPECT_TRUE(absl::SimpleAtoi(range[1], &hi)) << list;
    for (int i = lo; i <= hi; ++i) out.insert(i);
  }
  return out;
}

struct Expected {
  const char* bus;
  int numa;
  std::set<int> cpus;  // hwloc-calc pci=BUS -I pu --po
};

void ExpectPlacements(const std::string& file, const std::vector<Expected>& cases) {
  std::unique_ptr<HostTopology> host = Load(file);
  ASSERT_NE(host, nullptr);
  for (const Expected& e : cases) {
    HostTopology::Placement p = host->Locate(e.bus);
    EXPECT_TRUE(p.found) << file << " " << e.bus;
    EXPECT_EQ(p.numa_node, e.numa) << file << " " << e.bus;
    EXPECT_EQ(Cpus(p.cpuset), e.cpus) << file << " " << e.bus << ": " << p.cpuset;
  }
}

TEST(HostTopology, NumaAndCpusAgreeWithHwlocCalc) {
  ExpectPlacements("nvidiaDGX2.xml", {{"0000:34:00.0", 0, {0, 1}},
                                      {"0000:5e:00.0", 0, {0, 1}},
                                      {"0000:b7:00.0", 1, {24, 25}},
                                      {"0000:e7:00.0", 1, {24, 25}}});
  ExpectPlacements("power8gpudistances.xml",
                   {{"0002:01:00.0", 0, {0, 1, 8, 9, 16, 17, 24, 25}},
                    {"000b:01:00.0", 1, {80, 81, 88, 89, 96, 97, 104, 105}}});
  ExpectPlacements("24em64t-2n6c2t-pci.xml",
                   {{"0000:06:00.0", 0, {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}},
                    {"0000:14:00.0", 1, {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}}});
  ExpectPlacements(
      "32em64t-2n8c2t-pci-wholeio.xml",
      {{"0000:03:00.0", 0, {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}},
       {"0000:84:00.0", 1, {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}}});
}

TEST(HostTopology, PciePathLevels) {
  std::unique_ptr<HostTopology> dgx2 = Load("nvidiaDGX2.xml");
  // 34 and 36 hang off two downstream ports of one PLX switch.
  EXPECT_EQ(dgx2->PathBetween("0000:34:00.0", "0000:36:00.0"), PciePath::kPix);
  // 34 and 39: two levels of PLX switches below a common upstream bridge.
  EXPECT_EQ(dgx2->PathBetween("0000:34:00.0", "0000:39:00.0"), PciePath::kPxb);
  // 34 and 57: different host bridges of the same package and NUMA node.
  EXPECT_EQ(dgx2->PathBetween("0000:34:00.0", "0000:57:00.0"), PciePath::kNode);
  // 34 and b7: the other socket.
  EXPECT_EQ(dgx2->PathBetween("0000:34:00.0", "0000:b7:00.0"), PciePath::kSys);
  EXPECT_EQ(dgx2->PathBetween("0000:36:00.0", "0000:34:00.0"), PciePath::kPix);  // symmetric

  std::unique_ptr<HostTopology> p8 = Load("power8gpudistances.xml");
  EXPECT_EQ(p8->PathBetween("0002:01:00.0", "0003:01:00.0"), PciePath::kNode);
  EXPECT_EQ(p8->PathBetween("0002:01:00.0", "000a:01:00.0"), PciePath::kSys);

  std::unique_ptr<HostTopology> xeon = Load("24em64t-2n6c2t-pci.xml");
  // 14:00.0 and 11:00.0 sit behind two root ports of one host bridge.
  EXPECT_EQ(xeon->PathBetween("0000:14:00.0", "0000:11:00.0"), PciePath::kPhb);
  EXPECT_EQ(xeon->PathBetween("0000:06:00.0", "0000:14:00.0"), PciePath::kSys);
  // Unequal depths: a GPU behind a root port and a SATA controller on the host bridge itself
  // (hwloc's own common-ancestor helper walks past the root on such pairs).
  EXPECT_EQ(xeon->PathBetween("0000:06:00.0", "0000:00:1f.2"), PciePath::kPhb);
  EXPECT_EQ(xeon->PathBetween("0000:00:1f.2", "0000:14:00.0"), PciePath::kSys);
  std::unique_ptr<HostTopology> wholeio = Load("32em64t-2n8c2t-pci-wholeio.xml");
  for (const char* a : {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1",
                        "0000:04:00.0", "0000:00:1f.2", "0000:81:00.0"}) {
    for (const char* b : {"0000:03:00.0", "0000:84:00.0", "0000:00:1f.2", "0000:05:03.0"}) {
      (void)wholeio->PathBetween(a, b);  // every pair answers without crashing
    }
  }
  EXPECT_EQ(wholeio->PathBetween("0000:84:00.0", "0000:84:00.1"), PciePath::kPix);
  EXPECT_EQ(xeon->PathBetween("0000:06:00.0", "0000:99:00.0"), PciePath::kUnknown);
}

TEST(HostTopology, NearestNics) {
  std::unique_ptr<HostTopology> xeon = Load("24em64t-2n6c2t-pci.xml");
  // No NIC behind the GPU's own root port: the host bridge's NICs are nearest.
  EXPECT_EQ(xeon->Locate("0000:06:00.0").nearest_nics,
            (std::vector<std::string>{"eth0", "eth1", "eth2", "ib0", "mlx4_0"}));
  // The other socket has no NIC at all.
  EXPECT_TRUE(xeon->Locate("0000:14:00.0").nearest_nics.empty());

  std::unique_ptr<HostTopology> wholeio = Load("32em64t-2n8c2t-pci-wholeio.xml");
  // 84:00.0 shares its bridge with the InfiniBand HCA: only that one is nearest.
  EXPECT_EQ(wholeio->Locate("0000:84:00.0").nearest_nics,
            (std::vector<std::string>{"ib0", "mlx5_0"}));
  EXPECT_EQ(wholeio->Locate("0000:83:00.0").nearest_nics,
            (std::vector<std::string>{"eth0", "eth1", "ib0", "mlx5_0"}));
}

TEST(HostTopology, NvlinkBandwidthMatrix) {
  // POWER8 with P100s: GPU pairs linked directly at 40 GB/s (hwloc's NVLinkBandwidth).
  std::vector<HostTopology::Nvlink> p8 = Load("power8gpudistances.xml")->NvlinkBandwidth();
  ASSERT_EQ(p8.size(), 2u);
  EXPECT_EQ(p8[0].bus_a, "0002:01:00.0");
  EXPECT_EQ(p8[0].bus_b, "0003:01:00.0");
  EXPECT_EQ(p8[0].bandwidth_mbps, 40000u);
  EXPECT_EQ(p8[1].bus_a, "000a:01:00.0");
  EXPECT_EQ(p8[1].bus_b, "000b:01:00.0");

  // DGX-2: each GPU reaches its baseboard's six NVSwitches at 25 GB/s each, so every pair on
  // a baseboard is linked at 150 GB/s through the fabric. hwloc sums the links to one switch
  // into one value, so the link count is unknown. The export has no switch-to-switch links.
  std::vector<HostTopology::Nvlink> dgx2 = Load("nvidiaDGX2.xml")->NvlinkBandwidth();
  EXPECT_EQ(dgx2.size(), 2u * 28u);
  for (const HostTopology::Nvlink& l : dgx2) {
    EXPECT_EQ(l.count, 0u);
    EXPECT_EQ(l.bandwidth_mbps, 150000u);
  }
}

TEST(HostTopology, UnknownBusIdAndBadFiles) {
  std::unique_ptr<HostTopology> dgx2 = Load("nvidiaDGX2.xml");
  EXPECT_FALSE(dgx2->Locate("0000:ff:1f.7").found);
  EXPECT_FALSE(dgx2->Locate("garbage").found);
  EXPECT_FALSE(HostTopology::Load("/nonexistent/topo.xml").ok());
  EXPECT_EQ(dgx2->source(), "XML " + Fixture("nvidiaDGX2.xml"));
}

TEST(HostTopology, HonoursHwlocXmlFile) {
  setenv("HWLOC_XMLFILE", Fixture("power8gpudistances.xml").c_str(), 1);
  absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::Load();
  unsetenv("HWLOC_XMLFILE");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE((*host)->Locate("000a:01:00.0").found);
  EXPECT_NE((*host)->source().find("HWLOC_XMLFILE"), std::string::npos);
}

TEST(HostTopology, ThisMachineLoads) {
  // Whatever this host is, hwloc can describe it; a bus id that is not there is not found.
  absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::Load();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_FALSE((*host)->Locate("00ff:ff:1f.7").found);
}

// This machine's view is kept as XML between processes, in a folder private to the user: the
// second load reads it back (a planted change shows), a file or folder others may touch is
// not read, and RAYACCEL_HWLOC_CACHE=0 keeps nothing.
class HwlocCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rayaccel-hwloc-cache-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("RAYACCEL_CACHE_DIR", dir_.c_str(), 1);
    unsetenv("RAYACCEL_HWLOC_CACHE");
    unsetenv("HWLOC_XMLFILE");
  }
  void TearDown() override {
    unsetenv("RAYACCEL_CACHE_DIR");
    unsetenv("RAYACCEL_HWLOC_CACHE");
    std::filesystem::remove_all(dir_);
  }
  // The cache files in the folder.
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      out.push_back(e.path().string());
    }
    return out;
  }
  static std::string Exported() {
    absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::Load();
    EXPECT_TRUE(host.ok()) << host.status();
    if (!host.ok()) return "";
    EXPECT_EQ((*host)->source(), "this machine");
    absl::StatusOr<std::string> xml = (*host)->ExportXml();
    return xml.ok() ? *xml : "";
  }
  std::string dir_;
};

TEST_F(HwlocCache, TheSecondLoadReadsTheFirstsXml) {
  const std::string live = Exported();
  std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 1u);
  struct stat st {};
  ASSERT_EQ(stat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Exported(), live);

  // A planted change is what the next load sees: it came from the file.
  std::string planted = live;
  const size_t at = planted.find("<object type=\"Machine\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = planted.find('>', at);
  planted.insert(end + 1, "\n    <info name=\"RayaccelPlanted\" value=\"1\"/>");
  // Written as the cache writes (its header sums the XML); the same bytes without the header,
  // or with a sum that does not match them, are not read.
  {
    std::ofstream f(files[0], std::ios::trunc);
    f << planted;
  }
  EXPECT_EQ(Exported().find("RayaccelPlanted"), std::string::npos);
  hwloc_cache::Write(files[0], planted);
  {
    std::ifstream in(files[0]);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes[bytes.find("RayaccelPlanted")] = 'r';  // the sum no longer matches
    std::ofstream(files[0], std::ios::trunc) << bytes;
  }
  EXPECT_EQ(Exported().find("ayaccelPlanted"), std::string::npos);
  hwloc_cache::Write(files[0], planted);
  EXPECT_NE(Exported().find("RayaccelPlanted"), std::string::npos);

  // A file others may read is not read, and is replaced by this machine's view.
  chmod(files[0].c_str(), 0644);
  EXPECT_EQ(Exported().find("RayaccelPlanted"), std::string::npos);
  ASSERT_EQ(stat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Garbage is discovered over and replaced.
  {
    std::ofstream f(files[0], std::ios::trunc);
    f << "not xml";
  }
  EXPECT_EQ(Exported(), live);
  EXPECT_EQ(Files().size(), 1u);
}

// A link where the cache file should be (to a file of planted XML) is not followed.
TEST_F(HwlocCache, ALinkInTheFilesPlaceIsNotFollowed) {
  const std::string live = Exported();
  std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 1u);
  std::string planted = live;
  const size_t at = planted.find("<object type=\"Machine\"");
  ASSERT_NE(at, std::string::npos);
  planted.insert(planted.find('>', at) + 1, "\n    <info name=\"RayaccelPlanted\" value=\"1\"/>");
  const std::string elsewhere = dir_ + ".planted";
  {
    std::ofstream f(elsewhere);
    f << planted;
  }
  chmod(elsewhere.c_str(), 0600);
  ASSERT_EQ(unlink(files[0].c_str()), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), files[0].c_str()), 0);
  EXPECT_EQ(Exported().find("RayaccelPlanted"), std::string::npos);
  unlink(elsewhere.c_str());
}

TEST_F(HwlocCache, AFolderOthersMayEnterOrTheSwitchOffKeepsNothing) {
  chmod(dir_.c_str(), 0755);
  Exported();
  EXPECT_TRUE(Files().empty()) << "written into a folder others may read";
  chmod(dir_.c_str(), 0700);
  setenv("RAYACCEL_HWLOC_CACHE", "off", 1);
  Exported();
  EXPECT_TRUE(Files().empty()) << "written with the cache off";
}

// hwloc 2.9 asserts on this (hwloc_bitmap_sscanf: `count > 0'), aborting the process that
// reads it: a real machine's export with one bitmap attribute malformed.
std::string Reproducer() {
  std::ifstream in(Fixture("32em64t-2n8c2t-pci-wholeio.xml"));
  std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = xml.find("complete_cpuset=\"");
  EXPECT_NE(at, std::string::npos);
  size_t end = xml.find('"', at + 17);
  return xml.replace(at, end + 1 - at, "complete_cpuset=\",x00004000\"");
}

TEST_F(HwlocCache, AMalformedCacheFileIsNotUsed) {
  Exported();
  std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 1u);
  {
    std::ofstream out(files[0], std::ios::trunc);
    out << Reproducer();
  }
  chmod(files[0].c_str(), 0600);
  EXPECT_EQ(Exported().find(",x00004000"), std::string::npos);
}

TEST(HostTopology, MalformedXmlIsAnErrorNeverAnAbort) {
  absl::StatusOr<std::unique_ptr<HostTopology>> host =
      HostTopology::LoadXml(Reproducer(), "XML bundle.json");
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().message().rfind("hwloc aborted reading XML bundle.json (Aborted: ", 0),
            0u)
      << host.status();
  EXPECT_NE(host.status().message().find("hwloc_bitmap_sscanf: Assertion `count > 0' failed"),
            std::string::npos)
      << host.status();

  std::string path = ::testing::TempDir() + "/malformed-topology.xml";
  std::ofstream(path) << Reproducer();
  host = HostTopology::Load(path);
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find("XML " + path + " (Aborted"), std::string::npos)
      << host.status();
  setenv("HWLOC_XMLFILE", path.c_str(), 1);
  host = HostTopology::Load();
  unsetenv("HWLOC_XMLFILE");
  ASSERT_FALSE(host.ok());
  EXPECT_NE(host.status().message().find(path + " (HWLOC_XMLFILE) (Aborted"), std::string::npos)
      << host.status();
  unlink(path.c_str());

  // What hwloc refuses without aborting is refused as before, and a good file still loads.
  host = HostTopology::LoadXml("<topology>", "XML short.xml");
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().message().rfind("hwloc cannot read XML short.xml", 0), 0u)
      << host.status();
  EXPECT_TRUE(
      HostTopology::LoadXml(
          std::string(Reproducer()).replace(Reproducer().find(",x00004000"), 10, "0xffffffff"),
          "XML fixed.xml")
          .ok());
}

TEST(HostTopology, TruncatedAndBitFlippedXmlNeverAbort) {
  const std::string good = Reproducer().replace(Reproducer().find(",x00004000"), 10, "0xffffffff");
  std::mt19937 random(60);
  int loaded = 0, refused = 0;
  for (int i = 0; i < 120; ++i) {
    std::string xml = good;
    if (i % 2 == 0) {
      xml.resize(random() % good.size());
    } else {
      for (int flips = 1 + random() % 8; flips > 0; --flips) {
        xml[random() % xml.size()] ^= static_cast<char>(1 << (random() % 8));
      }
    }
    absl::StatusOr<std::unique_ptr<HostTopology>> host = HostTopology::LoadXml(xml, "XML x");
    if (host.ok()) {
      ++loaded;
      (void)(*host)->Locate("0000:02:00.0");  // what a loaded topology is asked
      (void)(*host)->PathBetween("0000:02:00.0", "0000:03:00.0");
    } else {
      ++refused;
      EXPECT_NE(host.status().message().find("XML x"), std::string::npos) << host.status();
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);
}

}  // namespace
}  // namespace rayaccel
