// Capture and replay (docs/capture.md): `rayaccel capture` on a node, then `--replay` anywhere
// gives the same output for every local command, byte for byte, without the node's plugins,
// drivers or fixture files. Each in-tree plugin on its fixtures; broken bundles are refused.
#include <dirent.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/test_support.h"
#include "util/json.h"

namespace rayaccel {
namespace {

using testing::CommandResult;
using testing::Example;
using testing::Fixture;

struct Node {
  const char* name;
  std::vector<std::string> args;           // what selects and configures the plugins
  std::map<std::string, std::string> env;  // the capture's environment (fake vendor libraries)
  int devices;                             // at least this many
};

std::string Plugin(const std::string& name) {
  return std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-" + name + ".so";
}

std::vector<Node> Nodes() {
  const std::string nvml = std::string("cuda.nvml_library=") + RAYACCEL_FAKE_NVML;
  auto cuda = [&](const char* name, const std::string& fixture, int devices,
                  std::vector<std::string> more) {
    std::vector<std::string> args = {"--plugin", Plugin("cuda"), "--config", nvml};
    args.insert(args.end(), more.begin(), more.end());
    return Node{name, args, {{"FAKE_NVML_FIXTURE", Fixture("fake-nvml/" + fixture)}}, devices};
  };
  auto rocm = [&](const char* name, const std::string& capture, int devices) {
    return Node{name,
                {"--plugin", Plugin("rocm"), "--config",
                 "rocm.kfd_topology_dir=" + Fixture("rocm-kfd/" + capture)},
                {},
                devices};
  };
  auto tpu = [&](const char* name, const std::string& host, int devices) {
    return Node{name,
                {"--plugin", Plugin("tpu"), "--no-host-topology", "--config", "tpu.metadata=off",
                 "--config", "tpu.dev_root=" + Fixture("tpu/" + host + "/dev"), "--config",
                 "tpu.sysfs_root=" + Fixture("tpu/" + host + "/sys")},
                {},
                devices};
  };
  auto sim = [&](const char* name, const std::string& spec, int devices,
                 std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--plugin", "sim", "--config", "sim.spec=" + spec};
    args.insert(args.end(), more.begin(), more.end());
    return Node{name, args, {}, devices};
  };
  // `devices`: 2 or more lets `allocate --size 2` be compared too (pairs are captured on nodes
  // of up to 16 devices).
  return {
      sim("sim-dgx-h100", Example("dgx-h100.json"), 8),
      sim("sim-dgx2-on-its-hwloc", Fixture("specs/dgx2-v100.json"), 16,
          {"--hwloc-xml", Fixture("hwloc/nvidiaDGX2.xml")}),
      sim("sim-tpu-v4-host", Example("tpu-v4-host.json"), 4),
      sim("sim-nvl72", Example("nvl72.json"), 1),
      sim("sim-named-interconnect", Fixture("specs/named-interconnect.json"), 3),
      cuda("cuda-dgx-h100", "dgx-h100.json", 8, {"--no-host-topology"}),
      cuda("cuda-gb200-tray", "gb200-tray.json", 4, {"--no-host-topology"}),
      cuda("cuda-mig-a100", "mig-a100.json", 1, {"--no-host-topology"}),
      cuda("cuda-gpu-lost", "gpu-lost.json", 3, {"--no-host-topology"}),
      cuda("cuda-h200-recorded", "h200-vm.json", 1, {"--hwloc-xml", Fixture("hwloc/h200-vm.xml")}),
      rocm("rocm-mi300-cpx", "topo-mi300-cpx/topology", 1),
      rocm("rocm-mi210-xgmi-pcie", "topo-mi210-xgmi-pcie", 2),
      tpu("tpu-v5e-8", "v5e-8-host", 8),
      tpu("tpu-v4", "v4-host", 4),
      Node{"gaudi-hls2",
           {"--plugin", Plugin("gaudi"), "--no-host-topology", "--config",
            "gaudi.sysfs_root=" + Fixture("gaudi/hls2/sys")},
           {},
           8},
  };
}

CommandResult Cli(std::vector<std::string> args, const std::vector<std::string>& node,
                  const std::map<std::string, std::string>& env) {
  args.insert(args.begin(), RAYACCEL_CLI);
  args.insert(args.end(), node.begin(), node.end());
  std::map<std::string, std::string> all = env;
  all["RAYACCEL_PLUGIN_PATH"] = "";
  return testing::Run(args, all);
}

class RoundTrip : public ::testing::TestWithParam<Node> {};

TEST_P(RoundTrip, ReplayGivesTheSameAnswersWithoutThePlugins) {
  const Node& node = GetParam();
  const std::string bundle = testing::MakeTempDir("capture") + "/" + node.name + ".json";
  CommandResult captured = Cli({"capture", "--out", bundle}, node.args, node.env);
  ASSERT_EQ(captured.exit_code, 0) << captured.err;
  EXPECT_NE(captured.out.find("captured "), std::string::npos) << captured.out;
  // The node is what it should be: a fixture path gone wrong would compare nothing with nothing.
  size_t devices = 0;
  EXPECT_TRUE(absl::SimpleAtoi(
      captured.out.substr(captured.out.find(" and ") + 5,
                          captured.out.find(" devices") - captured.out.find(" and ") - 5),
      &devices))
      << captured.out;
  EXPECT_GE(devices, static_cast<size_t>(node.devices)) << captured.out;

  // The replay needs nothing of the node: no plugin path, no fixture, no fake vendor library.
  const std::vector<std::string> replay = {"--replay", bundle, "--plugin-path", "/nonexistent"};
  std::vector<std::vector<std::string>> commands = {
      {"discover", "--json"}, {"discover"},
      {"plugins", "--json"},  {"topo"},
      {"topo", "--json"},     {"resources", "--json"},
      {"ray-start-args"},     {"allocate", "--size", "1", "--json"}};
  if (node.devices >= 2) commands.push_back({"allocate", "--size", "2", "--json"});
  for (const std::vector<std::string>& command : commands) {
    SCOPED_TRACE(::testing::PrintToString(command));
    CommandResult live = Cli(command, node.args, node.env);
    CommandResult again = Cli(command, replay, {});
    EXPECT_EQ(again.exit_code, live.exit_code) << again.err;
    EXPECT_EQ(again.out, live.out);
  }
}

INSTANTIATE_TEST_SUITE_P(Nodes, RoundTrip, ::testing::ValuesIn(Nodes()),
                         [](const ::testing::TestParamInfo<Node>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Walks two JSON documents of the same shape; where strings differ, records old -> new.
// Fails on any other difference (a number, a shape, a key).
void Pair(const json::Value& a, const json::Value& b, const std::string& path,
          std::map<std::string, std::string>* mapping, std::vector<std::string>* paths) {
  ASSERT_EQ(a.type(), b.type()) << path;
  if (a.is_object()) {
    ASSERT_EQ(a.members().size(), b.members().size()) << path;
    for (size_t i = 0; i < a.members().size(); ++i) {
      ASSERT_EQ(a.members()[i].first, b.members()[i].first) << path;
      Pair(a.members()[i].second, b.members()[i].second, path + "." + a.members()[i].first, mapping,
           paths);
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.array().size(), b.array().size()) << path;
    for (size_t i = 0; i < a.array().size(); ++i) {
      Pair(a.array()[i], b.array()[i], absl::StrCat(path, "[", i, "]"), mapping, paths);
    }
  } else if (a.is_string() && a.string() != b.string()) {
    auto [it, added] = mapping->emplace(a.string(), b.string());
    EXPECT_EQ(it->second, b.string()) << path << ": one value, two stand-ins";
    EXPECT_EQ(a.string().size(), b.string().size()) << path << ": a stand-in keeps the shape";
    paths->push_back(path);
  } else if (!a.is_string()) {
    EXPECT_EQ(a.string(), b.string()) << path;  // a number's literal text
  }
}

// --anonymize: ids, serials, unique ids and UUIDs are replaced consistently; nothing else
// changes, the originals are nowhere in the file, and allocations still name the devices.
TEST(Capture, AnonymizedBundlesLineUpWithoutTheOriginalIds) {
  const std::string dir = testing::MakeTempDir("capture-anonymize");
  for (const Node& node : Nodes()) {
    const std::string name = node.name;
    if (name != "cuda-mig-a100" && name != "cuda-gb200-tray" && name != "sim-dgx2-on-its-hwloc" &&
        name != "rocm-mi210-xgmi-pcie" && name != "cuda-h200-recorded") {
      continue;
    }
    SCOPED_TRACE(name);
    const std::string plain = dir + "/" + name + ".json";
    const std::string anon = dir + "/" + name + "-anon.json";
    ASSERT_EQ(Cli({"capture", "--out", plain}, node.args, node.env).exit_code, 0);
    CommandResult captured = Cli({"capture", "--anonymize", "--out", anon}, node.args, node.env);
    ASSERT_EQ(captured.exit_code, 0) << captured.err;
    const std::vector<std::string> replay = {"--plugin-path", "/nonexistent"};
    CommandResult live = Cli({"discover", "--json", "--replay", plain}, replay, {});
    CommandResult scrubbed = Cli({"discover", "--json", "--replay", anon}, replay, {});
    ASSERT_EQ(scrubbed.exit_code, 0) << scrubbed.err;
    json::ParseError error;
    std::optional<json::Value> a = json::Parse(live.out, &error);
    std::optional<json::Value> b = json::Parse(scrubbed.out, &error);
    ASSERT_TRUE(a && b);
    std::map<std::string, std::string> mapping;
    std::vector<std::string> paths;
    Pair(*a, *b, "", &mapping, &paths);
    ASSERT_FALSE(mapping.empty());
    for (const std::string& path : paths) {
      const bool identifying = absl::EndsWith(path, ".id") || absl::EndsWith(path, ".parent_id") ||
                               absl::StrContains(path, "serial") ||
                               absl::StrContains(path, "unique_id") ||
                               absl::EndsWith(path, "ray.io/gpu-domain") ||
                               absl::EndsWith(path, "rayaccel.io/nvlink-domain") ||
                               absl::EndsWith(path, "rayaccel.io/xgmi-hive") ||
                               absl::EndsWith(path, "nvidia.com/gpu.clique");
      EXPECT_TRUE(identifying) << path << " changed";
    }
    std::set<std::string> stand_ins;
    const std::string text = ReadAll(anon);
    for (const auto& [original, stand_in] : mapping) {
      EXPECT_TRUE(stand_ins.insert(stand_in).second) << "two values share " << stand_in;
      if (original.size() >= 6) {
        EXPECT_EQ(text.find(original), std::string::npos) << original << " is still in the file";
      }
    }
    // hwloc's serials and addresses are gone from the XML too.
    if (name == "sim-dgx2-on-its-hwloc") {
      EXPECT_NE(ReadAll(plain).find("0321019030481"), std::string::npos);
      EXPECT_EQ(text.find("0321019030481"), std::string::npos);
    }
    if (name == "cuda-h200-recorded") {
      EXPECT_NE(ReadAll(plain).find("02:fc:00:00:00:01"), std::string::npos);
      EXPECT_EQ(text.find("02:fc:00:00:00:01"), std::string::npos);
    }
    // The allocation environment names the stand-ins (a MIG instance goes by its UUID).
    CommandResult lease = Cli({"allocate", "--size", "1", "--json", "--replay", anon}, replay, {});
    CommandResult lease_live =
        Cli({"allocate", "--size", "1", "--json", "--replay", plain}, replay, {});
    std::string expected = lease_live.out;
    for (const auto& [original, stand_in] : mapping) {
      for (size_t at = expected.find(original); at != std::string::npos;
           at = expected.find(original, at + stand_in.size())) {
        expected.replace(at, original.size(), stand_in);
      }
    }
    EXPECT_EQ(lease.out, expected);
    // Each capture draws its own stand-ins.
    ASSERT_EQ(Cli({"capture", "--anonymize", "--out", anon + "2"}, node.args, node.env).exit_code,
              0);
    EXPECT_NE(Cli({"discover", "--json", "--replay", anon + "2"}, replay, {}).out, scrubbed.out);
  }
}

// A bundle is someone else's file: anything malformed is refused with what is wrong (exit 2),
// never a crash; answers that no longer pass the registry's checks fail that plugin only.
TEST(Capture, BrokenBundlesAreRefusedWithTheReason) {
  const std::string dir = testing::MakeTempDir("capture-broken");
  const std::string good = dir + "/good.json";
  ASSERT_EQ(Cli({"capture", "--out", good},
                {"--plugin", "sim", "--config", "sim.spec=" + Example("tpu-v4-host.json")}, {})
                .exit_code,
            0);
  std::ifstream in(good);
  std::stringstream text;
  text << in.rdbuf();
  const std::string bundle = text.str();
  auto replay_of = [&](const std::string& name, const std::string& content) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << content;
    return Cli({"discover", "--json", "--replay", path}, {}, {});
  };
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = bundle;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
  };
  struct Case {
    std::string name, content, message;
  };
  for (const Case& c : std::vector<Case>{
           {"truncated", bundle.substr(0, bundle.size() / 2), "not a usable capture bundle: line"},
           {"empty", "", "not a usable capture bundle"},
           {"other-format", replace("\"rayaccel-capture\"", "\"something-else\""),
            "format is not \"rayaccel-capture\""},
           {"newer-version", replace("\"version\": 1", "\"version\": 7"),
            "version 7; this rayaccel reads version 1"},
           {"bad-state", replace("\"state\": \"active\"", "\"state\": \"happy\""),
            "bundle.plugins[0].state: expected active, degraded, failed or refused"},
           {"bad-base64", replace("\"report\": \"", "\"report\": \"!!!"),
            "bundle.plugins[0].report: expected base64"},
           {"no-plugins", replace("\"plugins\":", "\"plugins_\":"),
            "bundle.plugins: expected a value (missing)"}}) {
    SCOPED_TRACE(c.name);
    CommandResult broken = replay_of(c.name + ".json", c.content);
    EXPECT_EQ(broken.exit_code, 2);
    EXPECT_NE(broken.err.find(c.message), std::string::npos) << broken.err;
    EXPECT_TRUE(broken.out.empty());
  }
  // Properties pass the same checks as a live plugin's: a resource of Ray's own fails it.
  CommandResult r = replay_of("cpu-resource.json",
                              replace("\"resource_name\": \"TPU\"", "\"resource_name\": \"CPU\""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("is one of Ray's own resources"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"devices\": []"), std::string::npos) << r.out;
  // Well-formed, but the answer's bytes are corrupt: that plugin fails with the reason.
  const std::string corrupt = replace("\"report\": \"", "\"report\": \"AAAA");
  r = replay_of("corrupt-report.json", corrupt);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"status\": \"failed\""), std::string::npos) << r.out;
}

// Bundles captured by an earlier build, kept in the tree (they seed the bundle reader's fuzzing
// too): each replays on this checkout to the snapshot it recorded, and `diff` says so.
TEST(Capture, CommittedBundlesReplayToTheSnapshotTheyRecorded) {
  const std::string dir = std::string(RAYACCEL_SOURCE_DIR) + "/tests/fuzz/corpus/capture_bundle";
  std::vector<std::string> bundles;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
        bundles.push_back(dir + "/" + name);
      }
    }
    closedir(d);
  }
  ASSERT_GE(bundles.size(), 3u);
  for (const std::string& bundle : bundles) {
    SCOPED_TRACE(bundle);
    CommandResult r = Cli({"diff", bundle, "--replay", bundle}, {}, {});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.rfind("snapshot: the same\n", 0), 0u) << r.out;
  }
  // Two different nodes: what differs, and exit 1.
  CommandResult r =
      Cli({"diff", dir + "/tpu-v4-host.json", dir + "/named-interconnect.json"}, {}, {});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.out.find("  - devices[0].id: \"tpu-v4-16-w0-chip0\"\n  + devices[0].id: \"acme-0\"\n"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(Cli({"diff"}, {}, {}).exit_code, 2);
}

// Nothing from the environment but an allow-list, and no host name unless asked for.
TEST(Capture, TheManifestKeepsSecretsOut) {
  const std::string dir = testing::MakeTempDir("capture-manifest");
  const std::vector<std::string> node = {"--plugin", "sim", "--config",
                                         "sim.spec=" + Example("tpu-v4-host.json")};
  const std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", "0,1"},
                                                  {"RAYACCEL_AGENT_TOKEN", "s3cret"},
                                                  {"AWS_SECRET_ACCESS_KEY", "s3cret"},
                                                  {"HOME_SWEET_HOME", "s3cret"}};
  ASSERT_EQ(Cli({"capture", "--out", dir + "/a.json"}, node, env).exit_code, 0);
  std::ifstream in(dir + "/a.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"CUDA_VISIBLE_DEVICES\": \"0,1\""), std::string::npos);
  EXPECT_EQ(text.str().find("s3cret"), std::string::npos);
  EXPECT_NE(text.str().find("\"hostname\": \"\""), std::string::npos);
  ASSERT_EQ(Cli({"capture", "--include-hostname", "--out", dir + "/b.json"}, node, env).exit_code,
            0);
  std::ifstream in_b(dir + "/b.json");
  std::stringstream text_b;
  text_b << in_b.rdbuf();
  EXPECT_EQ(text_b.str().find("\"hostname\": \"\""), std::string::npos);

  // hwloc's export names the host too: dropped unless asked for.
  const std::vector<std::string> pci = {"--plugin",    "sim",
                                        "--config",    "sim.spec=" + Example("dgx1-v100.json"),
                                        "--hwloc-xml", Fixture("hwloc/h200-vm.xml")};
  for (bool include : {false, true}) {
    const std::string file = dir + (include ? "/with-host.json" : "/without-host.json");
    std::vector<std::string> args = {"capture", "--out", file};
    if (include) args.push_back("--include-hostname");
    ASSERT_EQ(Cli(args, pci, {}).exit_code, 0);
    std::ifstream bundle(file);
    std::stringstream xml;
    xml << bundle.rdbuf();
    EXPECT_EQ(xml.str().find("HostName") != std::string::npos, include);
    EXPECT_EQ(Cli({"diff", file, "--replay", file}, {}, {}).exit_code, 0);
  }
}

}  // namespace
}  // namespace rayaccel
