// The agent's device-loss policy (serve --on-device-loss) over a real registry (the sim plugin,
// its spec rewritten as a node's devices fail) and real gRPC: what the watch takes for a lost
// device, and the DrainNode calls it makes to a server of Ray's AutoscalerStateService on a
// Unix socket (the Ray test, tests/ray/test_device_loss.py, drains through Ray's own GCS; this
// one answers what Ray's cannot be made to: refusals, and checks what arrives on the wire).
#include "rpc/device_loss.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "ray/rpc/drain_node.grpc.pb.h"
#include "ray/rpc/node_info.grpc.pb.h"
#include "support/test_support.h"

namespace rayaccel::rpc {
namespace {

namespace autoscaler = ::ray::rpc::autoscaler;

const std::string kNode(56, 'e');

using testing::Eventually;

// Ray's AutoscalerStateService, DrainNode alone: records each request and its authorization,
// and accepts after `refusals` refusals.
class Gcs final : public autoscaler::AutoscalerStateService::Service {
 public:
  struct Call {
    autoscaler::DrainNodeRequest request;
    std::string authorization;
  };
  int refusals = 0;

  grpc::Status DrainNode(grpc::ServerContext* context, const autoscaler::DrainNodeRequest* request,
                         autoscaler::DrainNodeReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    Call call{*request, ""};
    auto auth = context->client_metadata().find("authorization");
    if (auth != context->client_metadata().end()) {
      call.authorization = std::string(auth->second.data(), auth->second.size());
    }
    calls_.push_back(call);
    if (static_cast<int>(calls_.size()) <= refusals) {
      reply->set_is_accepted(false);
      reply->set_rejection_reason_message("node is busy\x1b[2J");
    } else {
      reply->set_is_accepted(true);
    }
    return grpc::Status::OK;
  }
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
};

class DeviceLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/rayaccel-loss-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    spec_ = dir_ + "/spec.json";
    testing::CopyFile(std::string(RAYACCEL_EXAMPLES_DIR) + "/dgx-h100.json", spec_);
    RegistryOptions options;
    options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"};
    options.use_environment = false;
    options.host_topology = false;
    options.config["sim"]["spec"] = spec_;
    auto registry = Registry::Create(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = std::move(*registry);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    unlink(spec_.c_str());
    unlink((dir_ + "/gcs.sock").c_str());
    rmdir(dir_.c_str());
  }

  std::string StartGcs(int refusals) {
    gcs_.refusals = refusals;
    const std::string target = "unix:" + dir_ + "/gcs.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target, grpc::InsecureServerCredentials());
    builder.RegisterService(&gcs_);
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    return target;
  }

  // Rewrites the sim spec with `edit` applied, and rescans.
  void EditSpec(const std::function<void(nlohmann::json*)>& edit) {
    nlohmann::json spec = nlohmann::json::parse(std::ifstream(spec_));
    edit(&spec);
    std::ofstream(spec_, std::ios::trunc) << spec.dump(2);
    registry_->Rescan();
  }
  void MarkUnhealthy(size_t position) {
    EditSpec([&](nlohmann::json* spec) { (*spec)["devices"][position]["health"] = "unhealthy"; });
  }
  std::string IdAt(size_t position) const { return registry_->snapshot()->devices[position].id; }

  DeviceLossOptions Drain(const std::string& target) {
    DeviceLossOptions options;
    options.policy = OnDeviceLoss::kDrain;
    options.gcs.address = target;
    options.gcs.token = "s3cret";
    options.node_id = []() -> absl::StatusOr<std::string> { return kNode; };
    options.min_retry = std::chrono::milliseconds(10);
    options.max_retry = std::chrono::milliseconds(40);
    return options;
  }

  std::string dir_, spec_;
  std::unique_ptr<Registry> registry_;
  Gcs gcs_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(DeviceLossTest, AnUnhealthyDeviceDrainsTheNodeOnceWithRaysFields) {
  DeviceLossWatch watch(registry_.get(), Drain(StartGcs(0)));
  EXPECT_TRUE(watch.state().lost.empty());
  const std::string lost = IdAt(3);
  MarkUnhealthy(3);
  ASSERT_TRUE(Eventually([&] { return watch.state().drained; }));
  MarkUnhealthy(5);  // a second loss after the drain: reported, Ray not asked again
  ASSERT_TRUE(Eventually([&] { return watch.state().lost.size() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  const std::vector<Gcs::Call> calls = gcs_.calls();
  ASSERT_EQ(calls.size(), 1u);
  const autoscaler::DrainNodeRequest& r = calls[0].request;
  EXPECT_EQ(r.node_id(), absl::HexStringToBytes(kNode));
  EXPECT_EQ(r.node_id().size(), 28u);
  EXPECT_EQ(r.reason(), autoscaler::DRAIN_NODE_REASON_PREEMPTION);
  EXPECT_EQ(r.deadline_timestamp_ms(), 0);
  EXPECT_NE(r.reason_message().find(lost), std::string::npos) << r.reason_message();
  EXPECT_EQ(calls[0].authorization, "Bearer s3cret");
  const DeviceLossState state = watch.state();
  EXPECT_EQ(state.lost[0].id, lost);
  EXPECT_EQ(state.drain_attempts, 1u);
  EXPECT_EQ(state.node_id, kNode);
  EXPECT_TRUE(state.drain_error.empty());
}

TEST_F(DeviceLossTest, ARefusalIsRetriedAndItsWordsKeptSafe) {
  DeviceLossWatch watch(registry_.get(), Drain(StartGcs(2)));
  MarkUnhealthy(0);
  ASSERT_TRUE(Eventually([&] { return watch.state().drain_attempts >= 1; }));
  ASSERT_TRUE(Eventually([&] { return watch.state().drained; }));
  EXPECT_EQ(gcs_.calls().size(), 3u);
  EXPECT_EQ(watch.state().drain_attempts, 3u);
}

TEST_F(DeviceLossTest, RefusedWordsAreEscaped) {
  const std::string target = StartGcs(1000);
  absl::Status st = DrainNode(GcsOptions{target, "", std::chrono::milliseconds(5000)}, kNode, "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("node is busy"), std::string::npos) << st;
  EXPECT_EQ(st.message().find('\x1b'), std::string::npos) << st;
}

TEST_F(DeviceLossTest, NoGcsIsAnErrorNamingItAndNothingElseBreaks) {
  const std::string nowhere = "unix:" + dir_ + "/nobody.sock";
  absl::Status st = DrainNode(GcsOptions{nowhere, "", std::chrono::milliseconds(500)}, kNode, "x");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(nowhere), std::string::npos) << st;
  EXPECT_EQ(
      DrainNode(GcsOptions{nowhere, "", std::chrono::milliseconds(500)}, "not-hex", "x").code(),
      absl::StatusCode::kInvalidArgument);

  DeviceLossWatch watch(registry_.get(), Drain(nowhere));
  MarkUnhealthy(1);
  ASSERT_TRUE(Eventually([&] { return watch.state().drain_attempts >= 2; }));
  EXPECT_FALSE(watch.state().drained);
  EXPECT_NE(watch.state().drain_error.find(nowhere), std::string::npos);
}

TEST_F(DeviceLossTest, AnUnknownNodeIdWaitsAndIsNeverSent) {
  DeviceLossOptions options = Drain(StartGcs(0));
  options.node_id = []() -> absl::StatusOr<std::string> {
    return absl::NotFoundError("no live Ray node on this host");
  };
  DeviceLossWatch watch(registry_.get(), options);
  MarkUnhealthy(2);
  ASSERT_TRUE(Eventually([&] { return watch.state().drain_attempts >= 2; }));
  EXPECT_TRUE(gcs_.calls().empty());
  EXPECT_NE(watch.state().drain_error.find("node id"), std::string::npos);
}

TEST_F(DeviceLossTest, AVanishedDeviceIsLostAFailedPluginHidesNothing) {
  DeviceLossOptions report;  // the default: no drain thread, no calls
  DeviceLossWatch watch(registry_.get(), report);
  const std::string last = IdAt(7);
  EditSpec([](nlohmann::json* spec) {  // the last device and its links
    nlohmann::json& devices = (*spec)["devices"];
    const size_t last = devices.size() - 1;
    devices.erase(last);
    nlohmann::json links = nlohmann::json::array();
    for (const nlohmann::json& link : (*spec)["links"]) {
      if (link["a"] != last && link["b"] != last) links.push_back(link);
    }
    (*spec)["links"] = links;
  });
  ASSERT_TRUE(Eventually([&] { return watch.state().lost.size() == 1; }));
  EXPECT_EQ(watch.state().lost[0].id, last);
  EXPECT_EQ(watch.state().lost[0].reason, "no longer discovered");

  // The plugin fails (its spec unreadable): its devices are not in the snapshot, but none of
  // them is taken for lost.
  std::ofstream(spec_, std::ios::trunc) << "{not json";
  registry_->Rescan();
  ASSERT_TRUE(registry_->snapshot()->devices.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(watch.state().lost.size(), 1u);
  EXPECT_FALSE(watch.state().drain_requested);
}

TEST_F(DeviceLossTest, ADeviceUnhealthyAtStartWasNotGivenAndIsNotLost) {
  MarkUnhealthy(4);
  DeviceLossWatch watch(registry_.get(), Drain(StartGcs(0)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(watch.state().lost.empty());
  EXPECT_TRUE(gcs_.calls().empty());
}

// Ray's NodeInfoGcsService, GetAllNodeInfo alone, answering with `nodes` as a GCS (or
// something posing as one) would: what FindNodeOnThisHost takes from it and what it leaves.
class NodeInfo final : public ::ray::rpc::NodeInfoGcsService::Service {
 public:
  std::vector<::ray::rpc::GcsNodeInfo> nodes;
  grpc::Status GetAllNodeInfo(grpc::ServerContext*, const ::ray::rpc::GetAllNodeInfoRequest*,
                              ::ray::rpc::GetAllNodeInfoReply* reply) override {
    for (const auto& n : nodes) *reply->add_node_info_list() = n;
    return grpc::Status::OK;
  }
};

::ray::rpc::GcsNodeInfo Node(const std::string& id_bytes, const std::string& address, bool alive,
                             std::map<std::string, std::string> labels = {}) {
  ::ray::rpc::GcsNodeInfo n;
  n.set_node_id(id_bytes);
  n.set_node_manager_address(address);
  n.set_state(alive ? ::ray::rpc::GcsNodeInfo::ALIVE : ::ray::rpc::GcsNodeInfo::DEAD);
  for (const auto& [k, v] : labels) (*n.mutable_labels())[k] = v;
  return n;
}

// The node on this host is the live one at one of its addresses (loopback here) with every
// label rayaccel gave Ray; a malformed id, a dead node or another host's is never taken, and
// two that match are an error naming --node-id rather than a guess.
TEST_F(DeviceLossTest, FindsItsNodeInRaysGcsAndNeverGuesses) {
  char dir[] = "/tmp/rayaccel-gcs-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string target = std::string("unix:") + dir + "/gcs.sock";
  NodeInfo gcs;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(target, grpc::InsecureServerCredentials());
  builder.RegisterService(&gcs);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::map<std::string, std::string> ours = {{"rayaccel.io/gpu-count", "8"}};
  const GcsOptions options{target, "", std::chrono::milliseconds(5000)};

  EXPECT_EQ(FindNodeOnThisHost(options, ours).status().code(), absl::StatusCode::kNotFound);
  gcs.nodes = {Node(std::string(27, 'x'), "127.0.0.1", true, ours),    // a short id
               Node(std::string(28, 'd'), "127.0.0.1", false, ours),   // dead
               Node(std::string(28, 'o'), "192.0.2.254", true, ours),  // another host
               Node(std::string(28, 'h'), "127.0.0.1", true),          // the head, unlabelled
               Node(std::string(28, 'g'), "127.0.0.1", true, ours)};   // ours
  absl::StatusOr<std::string> found = FindNodeOnThisHost(options, ours);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, absl::BytesToHexString(std::string(28, 'g')));

  gcs.nodes.push_back(Node(std::string(28, 'k'), "127.0.0.1", true, ours));
  absl::Status twice = FindNodeOnThisHost(options, ours).status();
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(twice.message().find("--node-id"), std::string::npos) << twice;
  server->Shutdown(std::chrono::system_clock::now());
  unlink((std::string(dir) + "/gcs.sock").c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace rayaccel::rpc
