// The registry and the CLI with hwloc's view of a real machine (exported XML topologies).
#include <cstdlib>

#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"
#include "util/json.h"

namespace rayaccel {
namespace {

using testing::Fixture;
using testing::SimPlugin;

std::shared_ptr<const NodeSnapshot> Snapshot(const std::string& spec, const std::string& xml) {
  RegistryOptions options;
  options.plugins = {SimPlugin()};
  options.use_environment = false;
  options.config["sim"]["spec"] = Fixture("specs/" + spec);
  options.hwloc_xml = Fixture("hwloc/" + xml);
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return (*registry)->snapshot();
}

int Count(const NodeSnapshot& s, const std::string& source, LinkType type) {
  return static_cast<int>(std::count_if(s.links.begin(), s.links.end(), [&](const Link& l) {
    return l.source == source && l.type == type;
  }));
}

TEST(Topology, Dgx2DevicesAreEnrichedFromHwloc) {
  std::shared_ptr<const NodeSnapshot> s = Snapshot("dgx2-v100.json", "nvidiaDGX2.xml");
  ASSERT_EQ(s->devices.size(), 16u);
  EXPECT_EQ(s->host_topology, "hwloc, XML " + Fixture("hwloc/nvidiaDGX2.xml"));
  EXPECT_EQ(s->devices[0].numa_node, 0);  // the spec left it out; hwloc knows
  EXPECT_EQ(s->devices[0].cpuset, "0-1");
  EXPECT_EQ(s->devices[15].numa_node, 1);
  EXPECT_EQ(s->devices[15].cpuset, "24-25");
  EXPECT_EQ(Count(*s, "hwloc", LinkType::kPcie), 16 * 15 / 2);
  EXPECT_EQ(Count(*s, "hwloc", LinkType::kNvlink), 2 * 28);
}

TEST(Topology, HwlocIsLoadedOnlyWhenAPciDeviceNeedsIt) {
  RegistryOptions options;
  options.plugins = {SimPlugin()};
  options.use_environment = false;
  options.hwloc_xml = "/nonexistent/topology.xml";  // would fail loudly if loaded
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ((*registry)->snapshot()->host_topology, "not needed: no PCI devices");

  options.config["sim"]["spec"] = Fixture("specs/dgx2-v100.json");
  registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok());
  std::shared_ptr<const NodeSnapshot> s = (*registry)->snapshot();
  EXPECT_EQ(s->host_topology.rfind("unavailable: cannot read XML topology /nonexistent/", 0), 0u)
      << s->host_topology;
  EXPECT_EQ(s->devices.size(), 16u);  // an unusable host topology costs nothing else
  EXPECT_EQ(s->devices[0].numa_node, -1);
}

TEST(Topology, UnknownBusIdKeepsPluginData) {
  std::shared_ptr<const NodeSnapshot> s = Snapshot("power8-p100.json", "power8gpudistances.xml");
  ASSERT_EQ(s->devices.size(), 5u);
  const Device& ghost = s->devices[4];
  EXPECT_EQ(ghost.numa_node, 0);  // from the plugin
  EXPECT_TRUE(ghost.cpuset.empty());
  EXPECT_NE(ghost.topology_note.find("0004:01:00.0 is not in the host topology"),
            std::string::npos);
  EXPECT_EQ(s->devices[2].numa_node, 1);
  EXPECT_EQ(Count(*s, "hwloc", LinkType::kNvlink), 2);
}

TEST(Topology, PluginLinksWinButBothAreKept) {
  // The spec says GPUs 1 and 2 are PIX; hwloc's tree says PHB. Both are kept with their
  // source; `topo` shows the plugin's.
  std::shared_ptr<const NodeSnapshot> s =
      Snapshot("xeon-3gpu.json", "32em64t-2n8c2t-pci-wholeio.xml");
  std::vector<std::string> seen;
  for (const Link& l : s->links) {
    if (l.a == 1 && l.b == 2) seen.push_back(l.source + ":" + PciePathName(l.pcie_path));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"plugin:sim:PIX", "hwloc:PHB"}));
  EXPECT_EQ(s->devices[2].nearest_nics, (std::vector<std::string>{"ib0", "mlx5_0"}));

  testing::CommandResult r =
      testing::Run({RAYACCEL_CLI, "topo", "--config", "sim.spec=" + Fixture("specs/xeon-3gpu.json"),
                    "--hwloc-xml", Fixture("hwloc/32em64t-2n8c2t-pci-wholeio.xml")},
                   {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU1  SYS   X     PIX   8-15,24-31    1              "
                       "eth0,eth1,ib0,mlx5_0"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("PIX    = Connection traversing at most a single PCIe switch"),
            std::string::npos);
}

TEST(Topology, CliMatrixJsonAndDotOnDgx2) {
  std::vector<std::string> base = {RAYACCEL_CLI, "topo", "--config",
                                   "sim.spec=" + Fixture("specs/dgx2-v100.json")};
  // HWLOC_XMLFILE, hwloc's own variable, selects the topology too.
  std::map<std::string, std::string> env = {{"RAYACCEL_PLUGIN_PATH", ""},
                                            {"HWLOC_XMLFILE", Fixture("hwloc/nvidiaDGX2.xml")}};
  testing::CommandResult r = testing::Run(base, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0   X     NV    NV"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HWLOC_XMLFILE"), std::string::npos);

  std::vector<std::string> json_args = base;
  json_args.push_back("--json");
  r = testing::Run(json_args, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::ParseError error;
  std::optional<json::Value> doc = json::Parse(r.out, &error);
  ASSERT_TRUE(doc) << error.message;
  const json::Value& matrix = *doc->Find("matrix");
  ASSERT_EQ(matrix.array().size(), 16u);
  EXPECT_EQ(matrix.array()[0].array()[0].string(), "X");
  EXPECT_EQ(matrix.array()[0].array()[1].string(), "NV");
  EXPECT_EQ(matrix.array()[0].array()[8].string(), "SYS");
  EXPECT_EQ(doc->Find("devices")->array()[8].Find("cpuset")->string(), "24-25");

  std::vector<std::string> dot_args = base;
  dot_args.push_back("--dot");
  r = testing::Run(dot_args, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("graph rayaccel {", 0), 0u);
  EXPECT_NE(r.out.find("d0 -- d1 [label=\"NV\\n150 GB/s\""), std::string::npos)
      << r.out.substr(0, 400);
  EXPECT_NE(r.out.find("d0 -- d8 [label=\"SYS\", style=dashed"), std::string::npos);
}

TEST(Topology, MixedFamiliesShareOneMatrix) {
  // A GPU plugin and a TPU spec side by side: one matrix, labels per family.
  testing::CommandResult r = testing::Run(
      {RAYACCEL_CLI, "topo", "--no-host-topology", "--plugin", testing::TestPlugin("testgpu"),
       "--plugin", "sim", "--config", "sim.spec=" + testing::Example("tpu-v4-host.json")},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU0  X     NV12  -     -     -     -"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TPU0  -     -     X     ICI   ICI   -"), std::string::npos) << r.out;
}

TEST(Topology, AllocateCommand) {
  testing::CommandResult r = testing::Run(
      {RAYACCEL_CLI, "allocate", "--size", "2", "--available-positions", "0,1,4,5,6", "--json",
       "--no-host-topology", "--config", "sim.spec=" + testing::Example("dgx-h100.json")},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::ParseError error;
  std::optional<json::Value> doc = json::Parse(r.out, &error);
  ASSERT_TRUE(doc) << error.message;
  EXPECT_EQ(doc->Find("devices")->array().size(), 2u);
  EXPECT_EQ(doc->Find("devices")->array()[0].as_int64(), 0);
  EXPECT_EQ(doc->Find("devices")->array()[1].as_int64(), 1);
  // --available takes ids; a number is not a position there.
  r = testing::Run(
      {RAYACCEL_CLI, "allocate", "--size", "1", "--available", "0", "--no-host-topology",
       "--config", "sim.spec=" + testing::Example("dgx-h100.json")},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no device \"0\""), std::string::npos) << r.err;
  r = testing::Run(
      {RAYACCEL_CLI, "allocate", "--size", "1", "--available-positions", "8", "--no-host-topology",
       "--config", "sim.spec=" + testing::Example("dgx-h100.json")},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no device at position 8"), std::string::npos) << r.err;

  r = testing::Run({RAYACCEL_CLI, "allocate", "--size", "3", "--no-host-topology", "--config",
                    "sim.spec=" + testing::Example("tpu-v4-host.json")},
                   {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_EQ(r.exit_code, 3) << r.err;  // nothing to allocate: a code of its own for scripts
  EXPECT_NE(r.out.find("No allocation: "), std::string::npos) << r.out;

  r = testing::Run({RAYACCEL_CLI, "allocate", "--no-host-topology"},
                   {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_EQ(r.exit_code, 2);  // --size is required

  // The two objectives on the DGX-1: the best split's first pair, or the strongest pair.
  const std::string dgx1 = "sim.spec=" + testing::Example("dgx1-v100.json");
  r = testing::Run(
      {RAYACCEL_CLI, "allocate", "--size", "2", "--no-host-topology", "--config", dgx1},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_NE(r.out.find("whole partition, exact over 8 devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA_VISIBLE_DEVICES=0,3\n"), std::string::npos) << r.out;
  r = testing::Run({RAYACCEL_CLI, "allocate", "--size", "2", "--objective", "request",
                    "--no-host-topology", "--config", dgx1},
                   {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_NE(r.out.find("CUDA_VISIBLE_DEVICES=2,3\n"), std::string::npos) << r.out;
  EXPECT_EQ(
      testing::Run({RAYACCEL_CLI, "allocate", "--size", "2", "--objective", "best"}).exit_code, 2);
}

// What a worker will be given, named as it will be given: a device's label and the
// environment carry the plugin's index, not the device's position in the snapshot.
TEST(Topology, AllocateShowsWhatTheWorkerGets) {
  const std::vector<std::string> node = {"--no-host-topology",
                                         "--plugin",
                                         testing::TestPlugin("testgpu"),
                                         "--plugin",
                                         "sim",
                                         "--config",
                                         "sim.spec=" + testing::Example("tpu-v4-host.json")};
  std::vector<std::string> args = {RAYACCEL_CLI, "allocate", "--size", "2", "--resource", "TPU"};
  args.insert(args.end(), node.begin(), node.end());
  testing::CommandResult r = testing::Run(args, {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The GPUs come first, so the TPU chips sit at positions 2 and 3 with indexes 0 and 1.
  EXPECT_NE(r.out.find("\n2         TPU0    0      "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("A worker given these devices gets:\n  TPU_VISIBLE_CHIPS=0,1\n"),
            std::string::npos)
      << r.out;

  args.push_back("--json");
  r = testing::Run(args, {{"RAYACCEL_PLUGIN_PATH", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::ParseError error;
  std::optional<json::Value> doc = json::Parse(r.out, &error);
  ASSERT_TRUE(doc) << error.message;
  EXPECT_EQ(doc->Find("devices")->array()[0].as_int64(), 2);
  EXPECT_EQ(doc->Find("indexes")->array()[0].as_int64(), 0);
  EXPECT_EQ(doc->Find("env")->Find("TPU_VISIBLE_CHIPS")->string(), "0,1");

  // topo labels by index too, and names the plugin where two plugins offer one resource.
  args = {RAYACCEL_CLI, "topo"};
  args.insert(args.end(), node.begin(), node.end());
  r = testing::Run(args, {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_NE(r.out.find("\nTPU0  "), std::string::npos) << r.out;
  r = testing::Run(
      {RAYACCEL_CLI, "topo", "--no-host-topology", "--plugin", testing::TestPlugin("testgpu"),
       "--plugin", "sim", "--config", "sim.spec=" + testing::Example("dgx1-v100.json")},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_NE(r.out.find("\ntestgpu:GPU0  X "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nsim:GPU0  "), std::string::npos) << r.out;
}

// A plugin names its own interconnect (ABI 1.2 rayaccel_link.type_name): topo shows the name
// and the stated bandwidth, in the matrix, the legend, --dot and JSON, also when isolated.
TEST(Topology, APluginNamesItsOwnInterconnect) {
  const std::string spec = "sim.spec=" + testing::Fixture("specs/named-interconnect.json");
  for (const char* isolation : {"none", "process"}) {
    SCOPED_TRACE(isolation);
    testing::CommandResult r = testing::Run({RAYACCEL_CLI, "topo", "--no-host-topology", "--plugin",
                                             "sim", "--config", spec, "--isolation", isolation},
                                            {{"RAYACCEL_PLUGIN_PATH", ""}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("NPU0  X      UB4   OTHER"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("UB     = An interconnect named by plugin:sim"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("UB4    = 392 GB/s (2 pairs)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("OTHER  = 12.5 GB/s (1 pair)"), std::string::npos) << r.out;
  }
  testing::CommandResult dot = testing::Run(
      {RAYACCEL_CLI, "topo", "--dot", "--no-host-topology", "--plugin", "sim", "--config", spec},
      {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_NE(dot.out.find("d0 -- d1 [label=\"UB4\\n392 GB/s\""), std::string::npos) << dot.out;
  testing::CommandResult json =
      testing::Run({RAYACCEL_CLI, "discover", "--json", "--no-host-topology", "--plugin", "sim",
                    "--config", spec},
                   {{"RAYACCEL_PLUGIN_PATH", ""}});
  EXPECT_NE(json.out.find("\"type\": \"other\",\n      \"type_name\": \"UB\""), std::string::npos)
      << json.out;
}

}  // namespace
}  // namespace rayaccel
