// The rayaccel binary as an operator runs it: real process, real plugins, real spec files.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "support/test_support.h"
#include "util/json.h"

namespace rayaccel {
namespace {

using testing::CommandResult;
using testing::Example;

CommandResult Cli(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), RAYACCEL_CLI);
  // Plugins are found next to the binary; make sure the caller's environment does not steer.
  env.emplace("RAYACCEL_PLUGIN_PATH", "");
  env.emplace("RAYACCEL_SIM_SPEC", "");
  return testing::Run(args, env);
}

json::Value ParseJson(const std::string& text) {
  json::ParseError error;
  std::optional<json::Value> v = json::Parse(text, &error);
  EXPECT_TRUE(v) << error.message << " at " << error.line << ":" << error.column << "\n" << text;
  return v ? *v : json::Value();
}

TEST(Cli, DiscoverJsonOnDgxH100) {
  CommandResult r = Cli({"discover", "--json", "--no-host-topology", "--plugin", "sim", "--config",
                         "sim.spec=" + Example("dgx-h100.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::Value doc = ParseJson(r.out);
  const json::Value& plugins = *doc.Find("plugins");
  ASSERT_EQ(plugins.array().size(), 1u);
  EXPECT_EQ(plugins.array()[0].Find("name")->string(), "sim");
  EXPECT_EQ(plugins.array()[0].Find("status")->string(), "active");
  EXPECT_EQ(plugins.array()[0].Find("message")->string(), "");
  const json::Value& devices = *doc.Find("devices");
  ASSERT_EQ(devices.array().size(), 8u);
  const json::Value& d0 = devices.array()[0];
  EXPECT_EQ(d0.Find("id")->string(), "GPU-5d1c8c3e-6b0e-4a51-9f0e-0000000a0000");
  EXPECT_EQ(d0.Find("plugin")->string(), "sim");
  EXPECT_EQ(d0.Find("resource")->string(), "GPU");
  EXPECT_EQ(d0.Find("name")->string(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d0.Find("accelerator_type")->string(), "H100");
  EXPECT_EQ(d0.Find("pci_bus_id")->string(), "0000:18:00.0");
  EXPECT_EQ(d0.Find("numa_node")->as_int64(), 0);
  EXPECT_EQ(d0.Find("memory_bytes")->as_uint64(), 85520809984u);
  EXPECT_EQ(d0.Find("health")->string(), "healthy");
  EXPECT_EQ(doc.Find("links")->array().size(), 28u);
  const json::Value& link = doc.Find("links")->array()[0];
  EXPECT_EQ(link.Find("type")->string(), "nvlink");
  EXPECT_EQ(link.Find("count")->as_int64(), 18);
  EXPECT_EQ(doc.Find("domains")->array().size(), 0u);
  const json::Value& ray = *doc.Find("ray");
  EXPECT_EQ(ray.Find("resources")->Find("GPU")->as_int64(), 8);
  EXPECT_EQ(ray.Find("resources")->Find("accelerator_type:H100")->as_int64(), 1);
  EXPECT_EQ(ray.Find("labels")->Find("ray.io/accelerator-type")->string(), "H100");
}

TEST(Cli, DiscoverTextIsATable) {
  CommandResult r =
      Cli({"discover", "--no-host-topology", "--config", "sim.spec=" + Example("dgx1-v100.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Tesla V100-SXM2-16GB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  0  3  NV2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  0  4  SYS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resources: {\"GPU\": 8, \"accelerator_type:V100\": 1}"), std::string::npos)
      << r.out;
}

TEST(Cli, ResourcesAndRayStartArgs) {
  std::string spec = "sim.spec=" + Example("dgx-h100.json");
  CommandResult r = Cli({"resources", "--json", "--config", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"GPU\": 8, \"accelerator_type:H100\": 1}\n");

  r = Cli({"ray-start-args", "--config", spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "--num-gpus=8 --resources='{\"accelerator_type:H100\": 1}' "
            "--labels='ray.io/accelerator-type=H100,rayaccel.io/gpu-count=8,"
            "rayaccel.io/gpu-type=H100,rayaccel.io/gpu-vendor=nvidia'\n");

  r = Cli({"ray-start-args", "--config=sim.spec=" + Example("tpu-v4-host.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--resources='{\"TPU\": 4, \"TPU-v4-16-head\": 1, "
                       "\"accelerator_type:TPU-V4\": 1, \"my-tpu-v4-16\": 1}'"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("--num-gpus"), std::string::npos);
}

// ray-start-args --env: what to start Ray with so that its own managers learn the devices
// counted here and no others.
TEST(Cli, RayStartEnvironmentLeavesOutSickDevices) {
  const std::string dir = testing::MakeTempDir("cli-env");
  std::ifstream in(Example("dgx-h100.json"));
  const std::string healthy((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CommandResult r =
      Cli({"ray-start-args", "--env", "--config", "sim.spec=" + Example("dgx-h100.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "CUDA_VISIBLE_DEVICES='0,1,2,3,4,5,6,7'\n");

  // GPU 3 unhealthy: Ray must not see it.
  std::string text = healthy;
  size_t at = 0;
  for (int i = 0; i <= 3; ++i) at = text.find("\"health\": \"healthy\"", at + 1);
  text.replace(at, 19, "\"health\": \"unhealthy\", \"health_reason\": \"XID 79\"");
  std::ofstream(dir + "/sick.json") << text;
  r = Cli({"ray-start-args", "--env", "--config", "sim.spec=" + dir + "/sick.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "CUDA_VISIBLE_DEVICES='0,1,2,4,5,6,7'\n");
  r = Cli({"ray-start-args", "--config", "sim.spec=" + dir + "/sick.json"});
  EXPECT_EQ(r.out.rfind("--num-gpus=7 ", 0), 0u) << r.out;

  // Every GPU sick: an empty list, or Ray would count them all.
  text = healthy;
  for (at = text.find("\"health\": \"healthy\""); at != std::string::npos;
       at = text.find("\"health\": \"healthy\"", at)) {
    text.replace(at, 19, "\"health\": \"unhealthy\"");
  }
  std::ofstream(dir + "/dead.json") << text;
  r = Cli({"ray-start-args", "--env", "--config", "sim.spec=" + dir + "/dead.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "CUDA_VISIBLE_DEVICES=''\n");

  // --env is ray-start-args' alone.
  r = Cli({"discover", "--env", "--config", "sim.spec=" + Example("dgx-h100.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--env goes with ray-start-args"), std::string::npos) << r.err;
}

// node.rack: the operator says which rack the node is in; it becomes rayaccel.io/rack.
TEST(Cli, ConfiguredRackIsALabel) {
  const std::string spec = "sim.spec=" + Example("dgx-h100.json");
  CommandResult r = Cli({"ray-start-args", "--config", spec, "--config", "node.rack=r12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rayaccel.io/rack=r12"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("not loaded"), std::string::npos) << r.err;
  r = Cli({"ray-start-args", "--config", spec}, {{"RAYACCEL_NODE_RACK", "r14"}});
  EXPECT_NE(r.out.find("rayaccel.io/rack=r14"), std::string::npos) << r.out;
  r = Cli({"ray-start-args", "--config", spec, "--config", "node.rack=not a label"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("rayaccel.io/rack"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("node.rack \"not a label\" is not a label value"), std::string::npos)
      << r.err;
  r = Cli({"resources", "--config", spec, "--config", "node.shelf=3"});
  EXPECT_NE(r.err.find("node.shelf: not a node setting"), std::string::npos) << r.err;
}

TEST(Cli, ZeroDevicesAndRefusedPluginsStillExitZero) {
  CommandResult r = Cli({"discover", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::Value doc = ParseJson(r.out);
  EXPECT_EQ(doc.Find("devices")->array().size(), 0u);
  EXPECT_TRUE(doc.Find("ray")->Find("resources")->members().empty());

  r = Cli({"plugins", "--plugin", "/nonexistent/librayaccel-x.so", "--plugin", "sim"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("refused"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sim     active"), std::string::npos) << r.out;
}

TEST(Cli, MalformedSpecIsReportedNotFatal) {
  std::string dir = testing::MakeTempDir("cli-spec");
  std::string spec = dir + "/broken.json";
  FILE* f = std::fopen(spec.c_str(), "w");
  std::fputs(
      "{\n  \"devices\": [\n    {\"uuid\": \"a\", \"name\": \"x\", \"memory_bytes\": \"8G\"}\n  "
      "]\n}\n",
      f);
  std::fclose(f);
  CommandResult r = Cli({"discover", "--json", "--plugin", "sim", "--config", "sim.spec=" + spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::Value doc = ParseJson(r.out);
  const json::Value& sim = doc.Find("plugins")->array()[0];
  EXPECT_EQ(sim.Find("status")->string(), "failed");
  EXPECT_EQ(sim.Find("message")->string(),
            "initialize failed: " + spec +
                ":3:48: devices[0].memory_bytes: expected number, found string");
}

TEST(Cli, EnvironmentAndConfigFile) {
  // The environment configures the sim plugin once it is asked for by name...
  CommandResult r = Cli({"resources", "--json", "--plugin", "sim"},
                        {{"RAYACCEL_SIM_SPEC", Example("dgx1-v100.json")}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"GPU\": 8, \"accelerator_type:V100\": 1}\n");
  // ...but alone it adds no simulated GPUs to a node (the plugin stays out, with a warning).
  r = Cli({"resources", "--json"}, {{"RAYACCEL_SIM_SPEC", Example("dgx1-v100.json")}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("GPU"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("simulated devices load only when asked for"), std::string::npos) << r.err;

  std::string dir = testing::MakeTempDir("cli-conf");
  std::string conf = dir + "/rayaccel.conf";
  FILE* f = std::fopen(conf.c_str(), "w");
  std::fprintf(f, "# test\nsim.spec = %s\n", Example("tpu-v4-host.json").c_str());
  std::fclose(f);
  r = Cli({"resources", "--json", "--config-file", conf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"TPU\": 4"), std::string::npos) << r.out;

  f = std::fopen(conf.c_str(), "w");
  std::fputs("sim.spec\n", f);
  std::fclose(f);
  r = Cli({"resources", "--config-file", conf});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(conf + ":1:"), std::string::npos) << r.err;
}

// --require is a readiness check: the output as usual, exit 4 and what is missing when the node
// gives Ray less (a broken driver shows an active plugin with 0 devices and exit 0 otherwise).
TEST(Cli, RequireFailsWhenTheHardwareIsMissing) {
  const std::string spec = "sim.spec=" + Example("dgx-h100.json");
  CommandResult r = Cli({"ray-start-args", "--config", spec, "--require", "GPU=8"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = Cli({"ray-start-args", "--config", spec, "--require", "GPU=16", "--require", "TPU=1"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.out.find("--num-gpus=8"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("required GPU=16, the node gives Ray 8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("required TPU=1, the node gives Ray 0"), std::string::npos) << r.err;
  r = Cli({"resources", "--plugin", "sim", "--require", "GPU=1"});  // no spec: 0 devices
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(Cli({"resources", "--require", "GPU"}).exit_code, 2);
  EXPECT_EQ(Cli({"allocate", "--size", "1", "--require", "GPU=1"}).exit_code, 2);
}

// KEY=VALUE, as the conformance suite takes it, configures the one plugin --plugin names (by
// name or by a librayaccel-NAME.so path); without one plugin it is a usage error.
TEST(Cli, ConfigKeyWithoutPluginNameGoesToTheOnePlugin) {
  for (const std::string& plugin :
       {std::string("sim"), std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"}) {
    CommandResult r = Cli({"resources", "--json", "--plugin", plugin, "--config",
                           "spec=" + Example("tpu-v4-host.json")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("\"TPU\": 4"), std::string::npos) << r.out;
  }
  CommandResult r = Cli({"resources", "--config", "spec=" + Example("tpu-v4-host.json")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("name the plugin (PLUGIN.KEY=VALUE), or choose one with --plugin"),
            std::string::npos)
      << r.err;
}

// Runs `script` in Python with `root` (the SVG file's parsed root, checked to be an SVG) and
// `ns` (the SVG namespace) defined; what it prints is the result's out.
CommandResult QuerySvg(const std::string& svg, const std::string& script) {
  return testing::Run({"/usr/bin/python3", "-c",
                       "import sys, xml.etree.ElementTree as ET\n"
                       "root = ET.parse(sys.argv[1]).getroot()\n"
                       "ns = '{http://www.w3.org/2000/svg}'\n"
                       "assert root.tag == ns + 'svg', root.tag\n" +
                           script,
                       svg});
}

// topo --svg: a well-formed SVG with every device (unhealthy ones marked), each pair's link,
// the legend counting link kinds, the NUMA nodes and the domains.
TEST(Cli, TopoDrawsThePicture) {
  const std::string dir = testing::MakeTempDir("topo-svg");
  const std::string spec = dir + "/spec.json", svg = dir + "/node.svg";
  // The DGX H100 with its first GPU marked unhealthy.
  std::ifstream in(Example("dgx-h100.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"health\": \"healthy\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"health\": \"unhealthy\", \"health_reason\": \"XID 79\"");
  std::ofstream(spec) << text;
  CommandResult r = Cli({"topo", "--svg", "--no-host-topology", "--config", "sim.spec=" + spec});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(svg) << r.out;
  CommandResult parsed = QuerySvg(
      svg,
      "groups = [g.get('class') for g in root.iter(ns + 'g')]\n"
      "texts = {t.get('class'): t.text for t in root.iter(ns + 'text') if t.get('class')}\n"
      "lines = [l for l in root.iter(ns + 'line') if l.get('class') == 'link']\n"
      "print(len(groups), groups.count('device unhealthy'), len(lines))\n"
      "print(texts.get('legend'))\n"
      "print(sorted(t.text for t in root.iter(ns + 'text') if t.get('class') == 'numa'))\n");
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err << r.out.substr(0, 400);
  EXPECT_EQ(parsed.out, "8 1 28\n28 x NV18, 450 GB/s\n['NUMA 0', 'NUMA 1']\n") << parsed.out;
  EXPECT_NE(r.out.find("GPU0: NVIDIA H100 80GB HBM3"), std::string::npos);
  EXPECT_NE(r.out.find("unhealthy: XID 79"), std::string::npos);
  std::system(("rm -rf " + dir).c_str());
}

// A 72-GPU rack: its 2556 NV18 chords would be a solid disc, so the fabric that joins every
// pair is drawn as one hub with a spoke to each GPU; the title and legend still count every
// pair, and the rack's domain is named by its size and ends.
TEST(Cli, TopoDrawsARackAsItsFabric) {
  const std::string dir = testing::MakeTempDir("topo-svg-rack");
  const std::string svg = dir + "/rack.svg";
  CommandResult r =
      Cli({"topo", "--svg", "--no-host-topology", "--config", "sim.spec=" + Example("nvl72.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ofstream(svg) << r.out;
  CommandResult parsed =
      QuerySvg(svg,
               "kinds = [l.get('class') for l in root.iter(ns + 'line')]\n"
               "fabric = [g for g in root.iter(ns + 'g') if g.get('class') == 'fabric']\n"
               "print(kinds.count('spoke'), kinds.count('link'), len(fabric))\n"
               "print(fabric[0].find(ns + 'title').text)\n"
               "print([t.text for t in root.iter(ns + 'text') if t.get('class') == 'legend'])\n");
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err << r.out.substr(0, 400);
  EXPECT_EQ(parsed.out,
            "72 0 1\nNV18, 900 GB/s between every pair of 72 devices\n"
            "['2556 x NV18, 900 GB/s']\n")
      << parsed.out;
  EXPECT_NE(r.out.find("72 devices, 2556 links"), std::string::npos);
  EXPECT_NE(r.out.find(": 72 devices: GPU0 ... GPU71"), std::string::npos);
  EXPECT_EQ(r.out.find("too many to draw"), std::string::npos);
  std::system(("rm -rf " + dir).c_str());
}

TEST(Cli, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"frobnicate"},
                                             {"discover", "--bogus"},
                                             {"discover", "--config", "noequals"},
                                             {"discover", "--plugin"},
                                             {"discover", "extra"},
                                             {"discover", "--log-level", "loud"},
                                             {"ray-start-args", "--json"},
                                             {"topo", "--dot", "--json"},
                                             {"discover", "--dot"},
                                             {"topo", "--svg", "--json"},
                                             {"resources", "--svg"},
                                             {"discover", "--config-file", "/nonexistent"},
                                             {"discover", "--config-file", "/tmp"}}) {
    CommandResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    const bool config_file = args.size() == 3 && args[1] == "--config-file";
    EXPECT_NE(r.err.find(config_file ? "rayaccel: config file " : "usage: rayaccel"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  CommandResult help = Cli({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("ray-start-args"), std::string::npos);
}

// Each usage error names the option and what its value must be, whichever way the value is
// given (`--flag value`, `--flag=value`, missing, empty).
TEST(Cli, UsageErrorsNameTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"discover", "--bogus"}, "rayaccel: unknown option --bogus\n"},
      {{"discover", "extra"}, "rayaccel: unexpected argument extra\n"},
      {{"allocate", "--size"}, "rayaccel: --size needs a whole number\n"},
      {{"allocate", "--size=x"}, "rayaccel: --size needs a whole number\n"},
      {{"allocate", "--size", "-3"}, "rayaccel: --size needs a whole number\n"},
      {{"allocate", "--size=", "--json"}, "rayaccel: --size needs a whole number\n"},
      {{"discover", "--plugin="}, "rayaccel: --plugin needs a name or path\n"},
      {{"serve", "--socket-mode", "0644x"}, "rayaccel: --socket-mode needs an octal mode"},
      {{"serve", "--listen="}, "rayaccel: --listen needs an address\n"},
      {{"allocate", "--size", "1", "--available-positions", "1,x"},
       "rayaccel: --available-positions: \"x\" is not a position\n"},
      {{"discover", "--isolation", "thread"}, "rayaccel: --isolation is process or none\n"},
      {{"discover", "--log-level=loud"}, "rayaccel: unknown log level \"loud\"\n"},
      {{"discover", "--require", "GPU"}, "rayaccel: --require needs RESOURCE=N"},
      {{"diff", "a.json", "b.json", "c.json"}, "rayaccel: unexpected argument c.json\n"},
  };
  for (const auto& [args, message] : cases) {
    CommandResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_EQ(r.err.rfind(message, 0), 0u) << ::testing::PrintToString(args) << "\n" << r.err;
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> transfer = {
      {{"transfer", "--serve", "--size"}, "--size needs a size such as 8, 4KiB or 64MiB"},
      {{"transfer", "--serve", "--size=2TiB"}, "--size needs a size such as 8, 4KiB or 64MiB"},
      {{"transfer", "--serve", "--op", "copy"}, "--op is read or write\n"},
      {{"transfer", "--serve", "--iters=0"}, "--iters needs a whole number\n"},
      {{"transfer", "--serve", "--memory", "disk"}, "--memory is host or device[:N]\n"},
      {{"transfer", "--serve", "--config", "noequals"}, "--config needs KEY=VALUE\n"},
      {{"transfer", "--connect="}, "--connect needs a token\n"},
      {{"transfer", "--serve", "--bogus"}, "unknown option --bogus\n"},
      {{"transfer", "--serve", "stray"}, "unexpected argument stray\n"},
      {{"transfer"}, "give --serve, or --connect TOKEN"},
  };
  for (const auto& [args, message] : transfer) {
    CommandResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("rayaccel transfer: " + message, 0), 0u)
        << ::testing::PrintToString(args) << "\n"
        << r.err;
  }
  // --help wins wherever it is, whatever else is wrong.
  CommandResult help = Cli({"allocate", "--size", "--help", "--bogus"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_EQ(help.out.rfind("usage: rayaccel <command> [options]", 0), 0u) << help.out;
  CommandResult transfer_help = Cli({"transfer", "--size", "-h"});
  EXPECT_EQ(transfer_help.exit_code, 0) << transfer_help.err;
  EXPECT_EQ(transfer_help.out.rfind("usage: rayaccel transfer --serve", 0), 0u)
      << transfer_help.out;
}

// --log-format json: every stderr line is one JSON object, even when the message carries
// quotes, control characters and bytes that are not UTF-8 (here, in a plugin path).
TEST(Cli, JsonLogLinesParseWhateverTheMessage) {
  CommandResult r = Cli({"discover", "--log-format", "json", "--log-level", "info",
                         "--no-host-topology", "--plugin", "/no/such \"plugin\"\t\xff.so"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  size_t lines = 0;
  bool saw_failure = false;
  for (absl::string_view line : absl::StrSplit(r.err, '\n', absl::SkipEmpty())) {
    json::ParseError error;
    std::optional<json::Value> v = json::Parse(std::string_view(line.data(), line.size()), &error);
    ASSERT_TRUE(v.has_value()) << line;
    ASSERT_NE(v->Find("level"), nullptr);
    ASSERT_NE(v->Find("ts"), nullptr);
    const std::string& msg = v->Find("msg")->string();
    // The byte that is not UTF-8 arrives as U+FFFD.
    saw_failure =
        saw_failure || msg.find("/no/such \"plugin\"\t\xEF\xBF\xBD.so") != std::string::npos;
    ++lines;
  }
  EXPECT_GT(lines, 0u);
  EXPECT_TRUE(saw_failure) << r.err;
  EXPECT_EQ(Cli({"discover", "--log-format", "xml"}).exit_code, 2);
}

// `rayaccel telemetry`: a row per sampled device, unknown fields "-", what the driver cannot
// say under Notes; --json with unknown fields left out; --agent refused.
TEST(Cli, TelemetryShowsEachDeviceAndWhatIsUnknown) {
  const std::string spec = "sim.spec=" + Example("dgx-h100.json");
  CommandResult r = Cli({"telemetry", "--plugin", "sim", "--config", spec, "--no-host-topology"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("DEVICE  PLUGIN  UTIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GPU7    sim"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sim: link_errors unknown: a sim spec has no link error counters"),
            std::string::npos)
      << r.out;
  r = Cli({"telemetry", "--plugin", "sim", "--config", spec, "--no-host-topology", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json::Value v = ParseJson(r.out);
  ASSERT_EQ(v.Find("devices")->array().size(), 8u);
  const json::Value& first = v.Find("devices")->array()[0];
  EXPECT_LE(first.Find("utilization_percent")->as_uint64().value_or(999), 100u);
  EXPECT_EQ(first.Find("link_errors"), nullptr);
  EXPECT_EQ(Cli({"telemetry", "--agent", "unix:/nonexistent"}).exit_code, 2);
}

}  // namespace
}  // namespace rayaccel
