// The agent's publisher against a real sink on a real Unix socket, with a real registry over
// the sim plugin: first publish, a rescan reaching the sink, a sink restart.
#include "rpc/publisher.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "rpc/raylet_sink.h"
#include "spdlog/spdlog.h"
#include "support/test_support.h"

namespace rayaccel::rpc {
namespace {

const std::string kNode(56, 'd');

using testing::Eventually;

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::default_logger();
    char dir[] = "/tmp/rayaccel-pub-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    RegistryOptions options;
    options.plugins = {std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"};
    options.use_environment = false;
    options.host_topology = false;
    spec_ = dir_ + "/spec.json";
    testing::CopyFile(std::string(RAYACCEL_EXAMPLES_DIR) + "/dgx-h100.json", spec_);
    options.config["sim"]["spec"] = spec_;
    auto registry = Registry::Create(options);
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = std::move(*registry);
  }
  void TearDown() override {
    StopSink();
    unlink(spec_.c_str());
    rmdir(dir_.c_str());
  }

  // A rescan that finds a change, so a new generation.
  uint64_t Change() {
    testing::ChangeSimSpec(spec_);
    return registry_->Rescan()->generation;
  }

  std::string socket() const { return dir_ + "/sink.sock"; }

  void StartSink() {
    sink_ = std::make_unique<RayletSink>(nullptr);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket(), grpc::InsecureServerCredentials());
    builder.RegisterService(sink_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void StopSink() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
    sink_.reset();
    unlink(socket().c_str());
  }
  uint64_t SinkGeneration() const {
    auto current = sink_->state().Current(kNode);
    return current ? current->generation() : 0;
  }
  std::unique_ptr<Publisher> StartPublisher() {
    PublisherOptions options;
    options.target = "unix:" + socket();
    options.node_id = kNode;
    options.min_backoff = std::chrono::milliseconds(20);
    options.max_backoff = std::chrono::milliseconds(200);
    return std::make_unique<Publisher>(options, registry_.get());
  }

  std::string dir_;
  std::string spec_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<RayletSink> sink_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(PublisherTest, FirstPublishAndEachRescanReachTheSink) {
  StartSink();
  auto publisher = StartPublisher();
  uint64_t first = registry_->snapshot()->generation;
  ASSERT_TRUE(Eventually([&] { return SinkGeneration() == first; }));
  EXPECT_EQ(sink_->state().Current(kNode)->resources_total().at("GPU"), 8);

  uint64_t next = Change();
  ASSERT_GT(next, first);
  ASSERT_TRUE(Eventually([&] { return SinkGeneration() == next; }));
  EXPECT_TRUE(Eventually([&] { return publisher->acked_generation() == next; }));
}

TEST_F(PublisherTest, ARestartedSinkGetsTheCurrentStateWithoutRestartingTheAgent) {
  StartSink();
  auto publisher = StartPublisher();
  ASSERT_TRUE(Eventually([&] { return SinkGeneration() == registry_->snapshot()->generation; }));

  // Nothing changes while it is away: the agent still notices and republishes.
  uint64_t current = registry_->snapshot()->generation;
  StopSink();
  StartSink();
  ASSERT_TRUE(Eventually([&] { return SinkGeneration() == current; }));

  // A change while it is away: discovery does not wait, and the newest reaches the new sink.
  StopSink();
  uint64_t while_away = Change();
  StartSink();
  ASSERT_TRUE(Eventually([&] { return SinkGeneration() == while_away; }));
}

TEST_F(PublisherTest, StartsBeforeTheSinkAndStopsPromptly) {
  auto publisher = StartPublisher();  // nothing listening yet: it backs off and retries
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  StartSink();
  ASSERT_TRUE(Eventually([&] { return SinkGeneration() == registry_->snapshot()->generation; }));
  publisher.reset();  // joins; a hang here fails the test by timeout
}

}  // namespace
}  // namespace rayaccel::rpc
