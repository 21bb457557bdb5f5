// The TPU plugin (.so) on TPU-host-shaped /dev and /sys trees (tests/fixtures/tpu), through the
// CLI as a separate process (its environment is the GKE pod's) and through the registry, with
// a real HTTP metadata server on loopback that also answers slowly, wrongly or not at all.
//
// The expected Ray resources and labels are what Ray's own TPU accelerator manager
// (python/ray/_private/accelerators/tpu.py) derives from the same facts: TPU = chips;
// accelerator_type:TPU-<GENERATION> from the pod type alone; {slice name: 1} on every host;
// TPU-<pod type>-head on worker 0; ray.io/tpu-{slice-name,worker-id,topology,pod-type}.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rayaccel/registry.h"
#include "support/test_support.h"
#include "tpu/tpu_facts.h"

namespace rayaccel {
namespace {

using testing::Fixture;

std::string TpuPlugin() { return std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-tpu.so"; }

// `rayaccel COMMAND --plugin tpu` on a fixture host, with the pod's environment.
testing::CommandResult Cli(const std::string& command, const std::string& host,
                           const std::map<std::string, std::string>& env,
                           std::vector<std::string> extra = {"--config", "tpu.metadata=off"}) {
  std::vector<std::string> argv = {RAYACCEL_CLI,
                                   command,
                                   "--plugin",
                                   TpuPlugin(),
                                   "--no-host-topology",
                                   "--config",
                                   "tpu.dev_root=" + Fixture("tpu/" + host + "/dev"),
                                   "--config",
                                   "tpu.sysfs_root=" + Fixture("tpu/" + host + "/sys")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return testing::Run(argv, env);
}

std::map<std::string, std::string> Gke(const std::string& type, const std::string& topology,
                                       const std::string& worker, const std::string& name) {
  return {{"TPU_ACCELERATOR_TYPE", type},
          {"TPU_TOPOLOGY", topology},
          {"TPU_WORKER_ID", worker},
          {"TPU_NAME", name}};
}

TEST(TpuPlugin, RayStartArgsEqualRaysOwnForEachHost) {
  struct Case {
    const char* host;
    std::map<std::string, std::string> env;
    const char* args;
  };
  const Case cases[] = {
      // A v4-32 slice: 4 hosts of 4 chips (2x2x4); worker 0 carries the head resource.
      {"v4-host", Gke("v4-32", "2x2x4", "0", "my-v4-32"),
       R"(--resources='{"TPU": 4, "TPU-v4-32-head": 1, "accelerator_type:TPU-V4": 1, "my-v4-32": 1}' --labels='ray.io/accelerator-type=TPU-V4,ray.io/tpu-pod-type=v4-32,ray.io/tpu-slice-name=my-v4-32,ray.io/tpu-topology=2x2x4,ray.io/tpu-worker-id=0,rayaccel.io/tpu-count=4,rayaccel.io/tpu-slice=my-v4-32,rayaccel.io/tpu-type=TPU-V4,rayaccel.io/tpu-vendor=google')"},
      {"v4-host", Gke("v4-32", "2x2x4", "3", "my-v4-32"),
       R"(--resources='{"TPU": 4, "accelerator_type:TPU-V4": 1, "my-v4-32": 1}' --labels='ray.io/accelerator-type=TPU-V4,ray.io/tpu-pod-type=v4-32,ray.io/tpu-slice-name=my-v4-32,ray.io/tpu-topology=2x2x4,ray.io/tpu-worker-id=3,rayaccel.io/tpu-count=4,rayaccel.io/tpu-slice=my-v4-32,rayaccel.io/tpu-type=TPU-V4,rayaccel.io/tpu-vendor=google')"},
      // A single-host v5e-8 (Ray's "v5litepod"), chips behind vfio.
      {"v5e-8-host", Gke("v5litepod-8", "2x4", "0", "lite"),
       R"(--resources='{"TPU": 8, "TPU-v5litepod-8-head": 1, "accelerator_type:TPU-V5LITEPOD": 1, "lite": 1}' --labels='ray.io/accelerator-type=TPU-V5LITEPOD,ray.io/tpu-pod-type=v5litepod-8,ray.io/tpu-slice-name=lite,ray.io/tpu-topology=2x4,ray.io/tpu-worker-id=0,rayaccel.io/tpu-count=8,rayaccel.io/tpu-slice=lite,rayaccel.io/tpu-type=TPU-V5LITEPOD,rayaccel.io/tpu-vendor=google')"},
      // Worker 1 of a v6e-16 (4x4: 4 hosts of 4 chips).
      {"v6e-4-host", Gke("v6e-16", "4x4", "1", "trillium"),
       R"(--resources='{"TPU": 4, "accelerator_type:TPU-V6E": 1, "trillium": 1}' --labels='ray.io/accelerator-type=TPU-V6E,ray.io/tpu-pod-type=v6e-16,ray.io/tpu-slice-name=trillium,ray.io/tpu-topology=4x4,ray.io/tpu-worker-id=1,rayaccel.io/tpu-count=4,rayaccel.io/tpu-slice=trillium,rayaccel.io/tpu-type=TPU-V6E,rayaccel.io/tpu-vendor=google')"},
      // "tpu7x-8" is Ray's spelling for v7x-8.
      {"v4-host", Gke("tpu7x-8", "2x2x1", "0", "ironwood"),
       R"(--resources='{"TPU": 4, "TPU-v7x-8-head": 1, "accelerator_type:TPU-V7X": 1, "ironwood": 1}' --labels='ray.io/accelerator-type=TPU-V7X,ray.io/tpu-pod-type=v7x-8,ray.io/tpu-slice-name=ironwood,ray.io/tpu-topology=2x2x1,ray.io/tpu-worker-id=0,rayaccel.io/tpu-count=4,rayaccel.io/tpu-slice=ironwood,rayaccel.io/tpu-type=TPU-V7X,rayaccel.io/tpu-vendor=google')"},
      // No slice known (no GKE variables, no metadata): chips only, no type, as Ray.
      {"v4-host",
       {},
       R"(--resources='{"TPU": 4}' --labels='rayaccel.io/tpu-count=4,rayaccel.io/tpu-vendor=google')"},
      // A GB200 tray: NVIDIA's /dev/accel/ folder and a BlueField behind vfio are no TPUs.
      {"gb200-host", {}, ""},
  };
  for (const Case& c : cases) {
    testing::CommandResult r = Cli("ray-start-args", c.host, c.env);
    EXPECT_EQ(r.exit_code, 0) << c.host << ": " << r.err;
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out, c.args) << c.host << " with " << c.env.size() << " variables";
  }
  testing::CommandResult none =
      Cli("discover", "gb200-host", {}, {"--config", "tpu.metadata=off", "--log-level", "info"});
  EXPECT_NE(none.err.find("none of them a Google (0x1ae0) device"), std::string::npos) << none.err;
}

TEST(TpuPlugin, ChipsCarryTheirPciFunctionAndTheHostIsAGridOfIciLinks) {
  testing::CommandResult r = Cli("discover", "v5e-8-host", Gke("v5litepod-8", "2x4", "0", "lite"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0  TPU0    tpu     TPU-V5LITEPOD  TPU v5e  0000:10:00.0  0     16.0 GiB"),
            std::string::npos)
      << r.out;
  // 2x4: 2 links in each of 4 rows... 4 horizontal and 6 vertical.
  size_t ici = 0;
  for (size_t at = r.out.find(" ici "); at != std::string::npos; at = r.out.find(" ici ", at + 1)) {
    ++ici;
  }
  EXPECT_EQ(ici, 10u) << r.out;
  EXPECT_NE(r.out.find("tpu-slice  lite  0,1,2,3,4,5,6,7"), std::string::npos) << r.out;
  testing::CommandResult json = Cli("discover", "v4-host", Gke("v4-32", "2x2x4", "3", "s"),
                                    {"--config", "tpu.metadata=off", "--json"});
  EXPECT_NE(json.out.find("\"slice_hosts\""), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"2x2x4\""), std::string::npos) << json.out;
}

TEST(TpuPlugin, PartialHostsGetRaysVisibleChipsAndBounds) {
  RegistryOptions options;
  options.plugins = {TpuPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["tpu"]["dev_root"] = Fixture("tpu/v5e-8-host/dev");
  options.config["tpu"]["sysfs_root"] = Fixture("tpu/v5e-8-host/sys");
  options.config["tpu"]["metadata"] = "off";
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto snap = (*registry)->snapshot();
  ASSERT_EQ(snap->devices.size(), 8u);
  auto env = [&](std::vector<std::string> ids) {
    auto e = (*registry)->PrepareAllocation(ids);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *e : std::map<std::string, std::string>();
  };
  std::vector<std::string> all;
  for (const Device& d : snap->devices) all.push_back(d.id);
  EXPECT_EQ(env({all[3]}),
            (std::map<std::string, std::string>{{"TPU_VISIBLE_CHIPS", "3"},
                                                {"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"},
                                                {"TPU_HOST_BOUNDS", "1,1,1"}}));
  EXPECT_EQ(env({all[6], all[7]}),
            (std::map<std::string, std::string>{{"TPU_VISIBLE_CHIPS", "6,7"},
                                                {"TPU_CHIPS_PER_HOST_BOUNDS", "1,2,1"},
                                                {"TPU_HOST_BOUNDS", "1,1,1"}}));
  EXPECT_EQ(env({all[0], all[1], all[2], all[3]}),
            (std::map<std::string, std::string>{{"TPU_VISIBLE_CHIPS", "0,1,2,3"}}));
  EXPECT_TRUE(env(all).empty()) << "the whole host: Ray sets nothing";

  // Only 1, 2, 4 or 8 chips, with Ray's words.
  absl::StatusOr<Allocation> three = (*registry)->PreferredAllocation({}, {}, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_TRUE(three->devices.empty());
  EXPECT_NE(three->reason.find("not a supported chip configuration"), std::string::npos)
      << three->reason;
  // Partial hosts are contiguous sub-meshes of the 2x4 grid: a row pair, a 2x2 block.
  auto pick = [&](size_t n, std::vector<std::string> available) {
    absl::StatusOr<Allocation> a = (*registry)->PreferredAllocation(available, {}, n);
    EXPECT_TRUE(a.ok()) << a.status();
    std::set<uint32_t> chips;
    for (size_t i : a->devices) chips.insert(snap->devices[i].index);
    return chips;
  };
  EXPECT_EQ(pick(2, {all[1], all[2], all[3], all[5], all[6], all[7]}), (std::set<uint32_t>{6, 7}));
  EXPECT_EQ(pick(4, {all[1], all[2], all[3], all[4], all[5], all[7]}),
            (std::set<uint32_t>{2, 3, 4, 5}));
}

TEST(TpuPlugin, AChipWhoseNodeDisappearsTurnsUnhealthy) {
  std::string root = testing::MakeTempDir("tpu-vanish");
  std::filesystem::copy(
      Fixture("tpu/v4-host"), root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  RegistryOptions options;
  options.plugins = {TpuPlugin()};
  options.use_environment = false;
  options.host_topology = false;
  options.config["tpu"]["dev_root"] = root + "/dev";
  options.config["tpu"]["sysfs_root"] = root + "/sys";
  options.config["tpu"]["metadata"] = "off";
  auto registry = Registry::Create(options);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->snapshot()->ray.resources.at("TPU"), 4);
  ASSERT_EQ(unlink((root + "/dev/accel2").c_str()), 0);
  auto snap = (*registry)->Rescan();
  ASSERT_EQ(snap->devices.size(), 4u) << "the lost chip stays listed";
  EXPECT_EQ(snap->devices[2].index, 2u) << "in its place";
  EXPECT_EQ(snap->devices[2].health, Health::kUnhealthy);
  EXPECT_NE(snap->devices[2].health_reason.find("accel2 disappeared"), std::string::npos);
  EXPECT_EQ(snap->ray.resources.at("TPU"), 3);
}

// A GCE metadata server on loopback, answering each key from a table, or misbehaving.
class MetadataServer {
 public:
  enum class Mode { kAnswer, kSlow, kNotFound, kTruncated, kGarbage };
  explicit MetadataServer(Mode mode) : mode_(mode) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] { Serve(); });
  }
  ~MetadataServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const {
    return absl::StrCat("http://127.0.0.1:", port_, "/computeMetadata/v1/instance/attributes/");
  }
  int requests() const { return requests_; }
  std::atomic<bool> saw_flavor{true};

 private:
  void Serve() {
    const std::map<std::string, std::string> answers = {
        {"accelerator-type", "v4-16"},
        {"agent-worker-number", "1"},
        {"instance-id", "1234567890123"},
        {"tpu-env", "ACCELERATOR_TYPE: 'v4-16'\nTOPOLOGY: '2x2x2'\nWORKER_ID: '1'\n"}};
    while (!stop_) {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++requests_;
      std::string request;
      char buf[2048];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      if (request.find("Metadata-Flavor: Google") == std::string::npos) saw_flavor = false;
      std::string path = request.substr(4, request.find(' ', 4) - 4);
      std::string key = path.substr(path.rfind('/') + 1);
      std::string reply;
      auto it = answers.find(key);
      switch (mode_) {
        case Mode::kAnswer:
          reply =
              it == answers.end()
                  ? "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
                  : absl::StrCat("HTTP/1.1 200 OK\r\nMetadata-Flavor: Google\r\nContent-Length: ",
                                 it->second.size(), "\r\n\r\n", it->second);
          break;
        case Mode::kSlow:
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          reply = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nv4-16";
          break;
        case Mode::kNotFound:
          reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found";
          break;
        case Mode::kTruncated:
          reply = "HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\nv4-1";
          break;
        case Mode::kGarbage:
          reply = "\x16\x03\x01 not http at all";
          break;
      }
      send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      close(c);
    }
  }
  Mode mode_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

TEST(TpuPlugin, TheMetadataServerFillsWhatTheEnvironmentDoesNotSay) {
  MetadataServer server(MetadataServer::Mode::kAnswer);
  testing::CommandResult r =
      Cli("ray-start-args", "v4-host", {}, {"--config", "tpu.metadata_url=" + server.url()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "--resources='{\"1234567890123\": 1, \"TPU\": 4, \"accelerator_type:TPU-V4\": 1}' "
            "--labels='ray.io/accelerator-type=TPU-V4,ray.io/tpu-pod-type=v4-16,"
            "ray.io/tpu-slice-name=1234567890123,ray.io/tpu-topology=2x2x2,"
            "ray.io/tpu-worker-id=1,rayaccel.io/tpu-count=4,"
            "rayaccel.io/tpu-slice=1234567890123,rayaccel.io/tpu-type=TPU-V4,"
            "rayaccel.io/tpu-vendor=google'\n");
  EXPECT_TRUE(server.saw_flavor) << "every request carries Metadata-Flavor: Google";
  // The environment wins where it speaks: GKE's worker id and name, metadata for the rest.
  r = Cli("ray-start-args", "v4-host", {{"TPU_WORKER_ID", "0"}, {"TPU_NAME", "gke-slice"}},
          {"--config", "tpu.metadata_url=" + server.url()});
  EXPECT_NE(r.out.find("\"TPU-v4-16-head\": 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ray.io/tpu-slice-name=gke-slice"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ray.io/tpu-topology=2x2x2"), std::string::npos) << r.out;
}

TEST(TpuPlugin, ABrokenMetadataServerCostsAtMostItsTimeoutAndIsExplained) {
  struct Case {
    MetadataServer::Mode mode;
    const char* reason;
  };
  for (const Case& c : {Case{MetadataServer::Mode::kSlow, "no complete answer within"},
                        Case{MetadataServer::Mode::kNotFound, "HTTP 404"},
                        Case{MetadataServer::Mode::kTruncated, "answer cut short"},
                        Case{MetadataServer::Mode::kGarbage, "not an HTTP answer"}}) {
    MetadataServer server(c.mode);
    testing::CommandResult r = Cli("ray-start-args", "v4-host", {},
                                   {"--config", "tpu.metadata_url=" + server.url(), "--config",
                                    "tpu.metadata_timeout_ms=300", "--log-level", "info"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out,
              "--resources='{\"TPU\": 4}' --labels='rayaccel.io/tpu-count=4,"
              "rayaccel.io/tpu-vendor=google'\n")
        << "chips only, as Ray without a slice";
    EXPECT_NE(r.err.find(c.reason), std::string::npos) << r.err;
    // A server that gives no proper answer is asked once per process; one that answers 404
    // is asked each key once.
    EXPECT_LE(server.requests(), c.mode == MetadataServer::Mode::kNotFound ? 4 : 1);
  }
  // Nothing listening at all, and a host with no chips never asks.
  testing::CommandResult closed =
      Cli("resources", "v4-host", {},
          {"--config", "tpu.metadata_url=http://127.0.0.1:1/x/", "--log-level", "info"});
  EXPECT_EQ(closed.exit_code, 0);
  EXPECT_NE(closed.err.find("Connection refused"), std::string::npos) << closed.err;
  MetadataServer unused(MetadataServer::Mode::kAnswer);
  Cli("resources", "gb200-host", {}, {"--config", "tpu.metadata_url=" + unused.url()});
  EXPECT_EQ(unused.requests(), 0);
}

TEST(TpuPlugin, InconsistentSlicesAreReportedAndBadTypesIgnored) {
  testing::CommandResult r = Cli("ray-start-args", "v4-host",
                                 {{"TPU_ACCELERATOR_TYPE", "v4-32"},
                                  {"TPU_TOPOLOGY", "2x2x2"},
                                  {"TPU_WORKER_ID", "7"},
                                  {"TPU_WORKER_HOSTNAMES", "a,b"}},
                                 {"--config", "tpu.metadata=off", "--log-level", "warn"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("topology 2x2x2 has 8 chips, but v4-32 has 16"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("worker id 7 in a v4-32 slice of 4 host(s)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 TPU_WORKER_HOSTNAMES for a v4-32 slice of 4 host(s)"), std::string::npos)
      << r.err;
  r = Cli("ray-start-args", "v4-host", {{"TPU_ACCELERATOR_TYPE", "V4-16"}},
          {"--config", "tpu.metadata=off", "--log-level", "warn"});
  EXPECT_NE(r.err.find("'V4-16' is not a TPU pod type"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("accelerator_type"), std::string::npos) << r.out;
  // A generation newer than this plugin: Ray takes any pod type of the right shape.
  r = Cli("ray-start-args", "v4-host", Gke("v8x-16", "", "0", "next"),
          {"--config", "tpu.metadata=off", "--log-level", "warn"});
  EXPECT_NE(r.out.find("\"TPU-v8x-16-head\": 1, \"accelerator_type:TPU-V8X\": 1"),
            std::string::npos)
      << r.out;
  // A name without a worker id: Ray adds neither the slice nor the head resource.
  r = Cli("ray-start-args", "v4-host", {{"TPU_ACCELERATOR_TYPE", "v4-16"}, {"TPU_NAME", "s"}},
          {"--config", "tpu.metadata=off"});
  EXPECT_EQ(r.out.find("\"s\": 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ray.io/tpu-slice-name=s"), std::string::npos) << r.out;
}

TEST(TpuPlugin, ReachesTierTwo) {
  testing::CommandResult r = testing::Run(
      {RAYACCEL_CONFORMANCE, TpuPlugin(), "--config", "dev_root=" + Fixture("tpu/v5e-8-host/dev"),
       "--config", "sysfs_root=" + Fixture("tpu/v5e-8-host/sys"), "--config", "metadata=off",
       "--tier", "2", "--timeout", "60"},
      Gke("v5litepod-8", "2x4", "0", "lite"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("Tier reached: 2 (schedulable)"), std::string::npos) << r.out;
}

// Ray's own test cases for its pod arithmetic (tests/accelerators/test_tpu.py).
TEST(TpuFacts, PodArithmeticMatchesRays) {
  using namespace tpu;
  EXPECT_EQ(NormalizePodType("tpu7x-16").value_or(""), "v7x-16");
  EXPECT_EQ(NormalizePodType("v5litepod-8").value_or(""), "v5litepod-8");
  EXPECT_FALSE(NormalizePodType("V4-16").has_value()) << "Ray's match is case-sensitive";
  EXPECT_FALSE(NormalizePodType("v4").has_value());
  EXPECT_EQ(NormalizePodType("v9-8").value_or(""), "v9-8") << "any generation, as Ray";
  EXPECT_EQ(PodChips("v9-8"), 4u) << "Ray's default: 2 cores per chip";
  EXPECT_EQ(PodHosts("v4-16"), 2u);
  EXPECT_EQ(PodHosts("v6e-16"), 4u);
  EXPECT_EQ(PodHosts("v6e-8"), 1u);
  EXPECT_EQ(PodHosts("v7x-16"), 2u);
  EXPECT_EQ(PodChips("v7x-16"), 8u);
  EXPECT_EQ(ChipsPerHost("v5litepod-8"), 8u);
  EXPECT_EQ(ChipsPerHost("v5litepod-16"), 4u);
  EXPECT_EQ(RayAcceleratorType("v5litepod-8"), "TPU-V5LITEPOD");
  EXPECT_TRUE(IsValidTopology("v4", "2x2x2"));
  EXPECT_TRUE(IsValidTopology("v4", "12x12x16"));
  EXPECT_FALSE(IsValidTopology("v4", "16x16x16"));
  EXPECT_TRUE(IsValidTopology("v5p", "16x16x24"));
  EXPECT_TRUE(IsValidTopology("v6e", "2x4"));
  EXPECT_FALSE(IsValidTopology("v6e", "2x2x2"));
  EXPECT_EQ(TopologyChips("2x2x4"), 16u);
  EXPECT_EQ(TopologyChips("2x"), 0u);
}

}  // namespace
}  // namespace rayaccel
