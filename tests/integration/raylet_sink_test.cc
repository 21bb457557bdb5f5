// The sink served by a real gRPC server on a real Unix socket, spoken to by a real client.
#include "rpc/raylet_sink.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rpc/snapshot_proto.h"
#include "spdlog/spdlog.h"
#include "support/child_process.h"
#include "support/test_support.h"

namespace rayaccel::rpc {
namespace {

using testing::Lines;
using testing::Stop;
using testing::WaitForFile;

const std::string kNode(56, 'c');

class Recorder : public RayletSink::Listener {
 public:
  void OnNodeResources(const std::string& node_id, const std::map<std::string, double>& resources,
                       const std::map<std::string, std::string>& /*labels*/,
                       const v1::NodeSnapshot& snapshot) override {
    std::lock_guard<std::mutex> lock(mu);
    updates.push_back({node_id, snapshot.generation(), resources.at("GPU")});
  }
  struct Update {
    std::string node;
    uint64_t generation;
    double gpus;
  };
  std::mutex mu;
  std::vector<Update> updates;
};

v1::PublishRequest Hello(const std::string& node, const std::string& session) {
  v1::PublishRequest r;
  r.mutable_hello()->set_node_id(node);
  r.mutable_hello()->set_agent_session(session);
  return r;
}

v1::PublishRequest Snapshot(uint64_t generation, double gpus) {
  v1::PublishRequest r;
  r.mutable_snapshot()->set_generation(generation);
  (*r.mutable_snapshot()->mutable_resources_total())["GPU"] = gpus;
  (*r.mutable_snapshot()->mutable_labels())["ray.io/accelerator-type"] = "H100";
  return r;
}

class RayletSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // As a program's main does: the logger exists before gRPC's threads log through it.
    spdlog::default_logger();
    char dir[] = "/tmp/rayaccel-sink-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    address_ = "unix:" + dir_ + "/sink.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(&sink_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::RayletAcceleratorSink::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    unlink((dir_ + "/sink.sock").c_str());
    rmdir(dir_.c_str());
  }

  // Sends `requests` on one stream; returns the acks and the stream's final status.
  grpc::Status Exchange(const std::vector<v1::PublishRequest>& requests,
                        std::vector<v1::PublishAck>* acks) {
    grpc::ClientContext context;
    auto stream = stub_->Publish(&context);
    for (const auto& r : requests) {
      if (!stream->Write(r)) break;
      if (r.kind_case() == v1::PublishRequest::kSnapshot) {
        v1::PublishAck ack;
        if (!stream->Read(&ack)) break;
        acks->push_back(ack);
      }
    }
    stream->WritesDone();
    v1::PublishAck extra;
    while (stream->Read(&extra)) acks->push_back(extra);
    return stream->Finish();
  }

  Recorder recorder_;
  RayletSink sink_{&recorder_};
  std::string dir_, address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::RayletAcceleratorSink::Stub> stub_;
};

TEST_F(RayletSinkTest, AppliesInOrderAndAcknowledgesStaleOnes) {
  std::vector<v1::PublishAck> acks;
  grpc::Status st = Exchange(
      {Hello(kNode, "s1"), Snapshot(1, 8), Snapshot(2, 7), Snapshot(1, 8), Snapshot(3, 6)}, &acks);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(acks.size(), 4u);
  EXPECT_EQ(acks[0].applied_generation(), 1u);
  EXPECT_EQ(acks[1].applied_generation(), 2u);
  EXPECT_TRUE(acks[2].stale());
  EXPECT_EQ(acks[2].applied_generation(), 2u);
  EXPECT_EQ(acks[3].applied_generation(), 3u);
  std::lock_guard<std::mutex> lock(recorder_.mu);
  ASSERT_EQ(recorder_.updates.size(), 3u);  // the stale one reached no one
  EXPECT_EQ(recorder_.updates.back().node, kNode);
  EXPECT_EQ(recorder_.updates.back().gpus, 6);
}

TEST_F(RayletSinkTest, ARestartedAgentIsApplied) {
  std::vector<v1::PublishAck> acks;
  ASSERT_TRUE(Exchange({Hello(kNode, "s1"), Snapshot(9, 8)}, &acks).ok());
  ASSERT_TRUE(Exchange({Hello(kNode, "s2"), Snapshot(1, 4)}, &acks).ok());
  EXPECT_EQ(sink_.state().Current(kNode)->generation(), 1u);
  EXPECT_EQ(sink_.state().Current(kNode)->resources_total().at("GPU"), 4);
}

TEST_F(RayletSinkTest, RefusesBadPeersAndKeepsState) {
  std::vector<v1::PublishAck> acks;
  ASSERT_TRUE(Exchange({Hello(kNode, "s1"), Snapshot(1, 8)}, &acks).ok());

  struct Case {
    const char* what;
    std::vector<v1::PublishRequest> requests;
  } cases[] = {
      {"snapshot before hello", {Snapshot(5, 1)}},
      {"bad node id", {Hello("node-1", "s1"), Snapshot(5, 1)}},
      {"no session", {Hello(kNode, ""), Snapshot(5, 1)}},
      // A session that would forge a log line, and one of 4 KiB: refused before they are
      // logged or kept.
      {"session with a newline", {Hello(kNode, "s1\n[error] forged"), Snapshot(5, 1)}},
      {"oversized session", {Hello(kNode, std::string(4096, 'a')), Snapshot(5, 1)}},
      {"fractional total", {Hello(kNode, "s1"), Snapshot(5, 0.5)}},
      {"second hello", {Hello(kNode, "s1"), Hello(kNode, "s1")}},
  };
  for (const Case& c : cases) {
    std::vector<v1::PublishAck> ignored;
    grpc::Status st = Exchange(c.requests, &ignored);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
  }
  EXPECT_EQ(sink_.state().Current(kNode)->generation(), 1u);
  EXPECT_EQ(sink_.state().Current(kNode)->resources_total().at("GPU"), 8);
  EXPECT_EQ(sink_.state().node_count(), 1u);
}

// A snapshot of two GPUs, "GPU-a" and "GPU-b", and a telemetry sample of them.
v1::PublishRequest TwoGpus(uint64_t generation) {
  NodeSnapshot snap;
  snap.generation = generation;
  for (const char* id : {"GPU-a", "GPU-b"}) {
    Device d;
    d.id = id;
    d.plugin = "sim";
    d.resource = "GPU";
    d.index = static_cast<uint32_t>(snap.devices.size());
    d.name = "H100";
    d.health = Health::kHealthy;
    snap.devices.push_back(d);
  }
  snap.ray.resources["GPU"] = 2;
  v1::PublishRequest r;
  *r.mutable_snapshot() = ToProto(snap);
  return r;
}
v1::PublishRequest Sample(int64_t unix_ms, uint32_t utilization_a, const char* also = "GPU-b") {
  v1::PublishRequest r;
  v1::Telemetry* t = r.mutable_telemetry();
  t->set_unix_ms(unix_ms);
  v1::DeviceSample* a = t->add_devices();
  a->set_device_id("GPU-a");
  a->set_plugin("sim");
  a->set_known(RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY | RAYACCEL_SAMPLE_POWER);
  a->set_utilization_percent(utilization_a);
  a->set_memory_used_bytes(10);
  a->set_memory_total_bytes(80);
  a->set_power_mw(300000);
  v1::DeviceSample* b = t->add_devices();
  b->set_device_id(also);
  b->set_plugin("sim");
  b->set_index(1);
  b->set_known(RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY);
  b->set_utilization_percent(20);
  b->set_memory_used_bytes(30);
  b->set_memory_total_bytes(80);
  t->add_plugins()->set_plugin("sim");
  return r;
}

// Telemetry on the stream, after a snapshot: kept per node (the last 60), summed for the
// cluster page, never acknowledged; a sample of a device the snapshot lacks is dropped; the
// sink says in every ack that it takes telemetry.
TEST_F(RayletSinkTest, KeepsEachNodesTelemetry) {
  std::vector<v1::PublishAck> acks;
  ASSERT_TRUE(
      Exchange({Hello(kNode, "s1"), TwoGpus(1), Sample(1000, 60), Sample(2000, 80, "GPU-gone")},
               &acks)
          .ok());
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_TRUE(acks[0].takes_telemetry());
  std::vector<Telemetry> kept = sink_.state().TelemetryOf(kNode);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].devices.size(), 2u);
  EXPECT_EQ(kept[1].devices.size(), 1u);  // GPU-gone dropped
  std::vector<SinkState::Load> load = sink_.state().LoadOf(kNode);
  ASSERT_EQ(load.size(), 2u);
  EXPECT_EQ(load[0].unix_ms, 1000);
  EXPECT_EQ(load[0].utilization_percent, 40);  // (60 + 20) / 2
  EXPECT_EQ(load[0].memory_used_bytes, 40u);
  EXPECT_EQ(load[0].memory_total_bytes, 160u);
  EXPECT_EQ(load[0].power_mw, 300000u);
  EXPECT_EQ(load[1].utilization_percent, 80);

  std::vector<v1::PublishRequest> many = {Hello(kNode, "s1"), TwoGpus(2)};
  for (int i = 0; i < 70; ++i) many.push_back(Sample(3000 + i, 10));
  ASSERT_TRUE(Exchange(many, &acks).ok());
  EXPECT_EQ(sink_.state().TelemetryOf(kNode).size(), SinkState::kTelemetryKept);
  EXPECT_TRUE(sink_.state().TelemetryOf("f" + kNode.substr(1)).empty());
}

// Telemetry that lies is refused with the stream, the node's snapshot and samples kept.
TEST_F(RayletSinkTest, RefusesTelemetryThatLies) {
  std::vector<v1::PublishAck> acks;
  ASSERT_TRUE(Exchange({Hello(kNode, "s1"), TwoGpus(1), Sample(1000, 50)}, &acks).ok());
  auto lie = [](const std::function<void(v1::DeviceSample*)>& edit) {
    v1::PublishRequest r = Sample(2000, 50);
    edit(r.mutable_telemetry()->mutable_devices(0));
    return r;
  };
  v1::PublishRequest too_many = Sample(2000, 50);
  for (int i = 0; i < kMaxTelemetryDevices; ++i) {
    too_many.mutable_telemetry()->add_devices()->set_device_id("GPU-a");
  }
  v1::PublishRequest bad_plugin = Sample(2000, 50);
  bad_plugin.mutable_telemetry()->mutable_plugins(0)->set_error("x\x1b[2Jforged");
  const std::vector<v1::PublishRequest> lies = {
      lie([](v1::DeviceSample* d) { d->set_utilization_percent(150); }),
      lie([](v1::DeviceSample* d) { d->set_memory_used_bytes(81); }),
      lie([](v1::DeviceSample* d) { d->set_known(1u << 12); }),
      lie([](v1::DeviceSample* d) { d->set_device_id(std::string(300, 'a')); }),
      lie([](v1::DeviceSample* d) { d->set_device_id("GPU-a\n[error] forged"); }),
      lie([](v1::DeviceSample* d) { d->set_device_id(""); }),
      too_many,
      bad_plugin,
  };
  for (const v1::PublishRequest& r : lies) {
    std::vector<v1::PublishAck> ignored;
    EXPECT_EQ(Exchange({Hello(kNode, "s1"), TwoGpus(1), r}, &ignored).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << r.ShortDebugString().substr(0, 200);
  }
  EXPECT_EQ(sink_.state().TelemetryOf(kNode).size(), 1u);
  EXPECT_EQ(sink_.state().Current(kNode)->generation(), 1u);
  // Telemetry before any snapshot of this agent's is ignored, not stored under another's.
  ASSERT_TRUE(Exchange({Hello(kNode, "s2"), Sample(3000, 50)}, &acks).ok());
  EXPECT_EQ(sink_.state().TelemetryOf(kNode).size(), 1u);
}

// An agent started before Ray does not know its node id: a sink that is one node's (a
// raylet's) names it in the answer to the hello; a sink of many nodes refuses such a hello, and
// a node's sink refuses an agent that names another node.
TEST(RayletSink, NamesItsNodeToAnAgentThatAsks) {
  spdlog::default_logger();
  const std::string dir = testing::MakeTempDir("sink-names");
  const std::string address = "unix:" + dir + "/sink.sock";
  Recorder recorder;
  RayletSink own(&recorder, nullptr, kNode);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(&own);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::RayletAcceleratorSink::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    auto stream = stub->Publish(&context);
    ASSERT_TRUE(stream->Write(Hello("", "s1")));
    v1::PublishAck named;
    ASSERT_TRUE(stream->Read(&named));
    EXPECT_EQ(named.node_id(), kNode);
    ASSERT_TRUE(stream->Write(Snapshot(1, 8)));
    v1::PublishAck ack;
    ASSERT_TRUE(stream->Read(&ack));
    EXPECT_EQ(ack.applied_generation(), 1u);
    EXPECT_TRUE(ack.node_id().empty());
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_EQ(own.state().Current(kNode)->resources_total().at("GPU"), 8);
  {
    grpc::ClientContext context;
    auto stream = stub->Publish(&context);
    ASSERT_TRUE(stream->Write(Hello(std::string(56, 'e'), "s2")));
    stream->WritesDone();
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("this sink is node " + kNode), std::string::npos)
        << st.error_message();
  }
  server->Shutdown();
  std::system(("rm -rf " + dir).c_str());
}

TEST_F(RayletSinkTest, ASinkOfManyNodesRefusesAHelloWithoutANodeId) {
  std::vector<v1::PublishAck> acks;
  grpc::Status st = Exchange({Hello("", "s1"), Snapshot(1, 8)}, &acks);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("the agent must name its node (--node-id)"), std::string::npos)
      << st.error_message();
  EXPECT_TRUE(acks.empty());
}

TEST_F(RayletSinkTest, GarbageBytesOnTheSocketHarmNothing) {
  for (const std::string& junk : testing::GarbageForGrpc()) {
    ASSERT_TRUE(testing::SendRawBytes(dir_ + "/sink.sock", junk));
  }
  std::vector<v1::PublishAck> acks;
  grpc::Status st = Exchange({Hello(kNode, "s1"), Snapshot(1, 8)}, &acks);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].applied_generation(), 1u);
}

// Starts the CLI with `args`, its stdout appended to `out_file`; returns the child's pid.
pid_t SpawnCli(const std::vector<std::string>& args, const std::string& out_file) {
  return testing::Spawn(RAYACCEL_CLI, args, out_file);
}

// `rayaccel sink` as its own process: it serves on a 0660 socket, prints each applied update
// as a JSON line, and stops cleanly on SIGTERM.
TEST(SinkCommand, PrintsAppliedUpdatesAndStopsOnSigterm) {
  char dir[] = "/tmp/rayaccel-sinkcmd-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/sink.sock";
  const std::string out_file = std::string(dir) + "/out.jsonl";
  pid_t child = SpawnCli({"sink", "--listen", "unix:" + socket, "--json"}, out_file);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(WaitForFile(socket)) << "the sink never listened";
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  auto stub = v1::RayletAcceleratorSink::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    auto stream = stub->Publish(&context);
    ASSERT_TRUE(stream->Write(Hello(kNode, "s1")));
    for (uint64_t g : {1u, 2u}) {
      ASSERT_TRUE(stream->Write(Snapshot(g, 8 - g)));
      v1::PublishAck ack;
      ASSERT_TRUE(stream->Read(&ack));
      EXPECT_EQ(ack.applied_generation(), g);
    }
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_EQ(Stop(child), 0);
  EXPECT_NE(stat(socket.c_str(), &st), 0) << "the socket was left behind";

  std::vector<std::string> lines = Lines(out_file);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "{\"node_id\": \"" + kNode +
                          "\", \"generation\": 2, \"resources_total\": {\"GPU\": 6}, "
                          "\"labels\": {\"ray.io/accelerator-type\": \"H100\"}}");
  unlink(out_file.c_str());
  rmdir(dir);
}

// The README walkthrough as a test: `rayaccel serve` and `rayaccel sink` as two processes.
// The sink is killed and restarted; the agent, never restarted, brings the new one up to date.
// Then the agent is restarted (a new session) and the sink takes its snapshot whole.
TEST(AgentAndSink, PublishSurvivesRestartsOfEitherSide) {
  char dir[] = "/tmp/rayaccel-agent-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/sink.sock";
  const std::string out = std::string(dir) + "/sink.jsonl";
  const std::vector<std::string> sink_args = {"sink", "--listen", "unix:" + socket, "--json"};
  const std::vector<std::string> serve_args = {
      "serve",
      "--listen",
      std::string(dir) + "/agent.sock",
      "--raylet",
      "unix:" + socket,
      "--node-id",
      kNode,
      "--plugin",
      std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so",
      "--config",
      std::string("sim.spec=") + RAYACCEL_EXAMPLES_DIR + "/dgx-h100.json",
      "--rescan-interval",
      "0"};
  auto published = [&](size_t n) {
    for (int i = 0; i < 2000 && Lines(out).size() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Lines(out).size() >= n;
  };

  pid_t sink = SpawnCli(sink_args, out);
  ASSERT_TRUE(WaitForFile(socket));
  pid_t agent = SpawnCli(serve_args, "/dev/null");
  ASSERT_TRUE(published(1)) << "first publish never arrived";
  EXPECT_NE(Lines(out)[0].find("\"generation\": 1, \"resources_total\": {\"GPU\": 8"),
            std::string::npos)
      << Lines(out)[0];

  EXPECT_EQ(Stop(sink), 0);
  sink = SpawnCli(sink_args, out);
  ASSERT_TRUE(published(2)) << "the agent did not republish to the restarted sink";
  EXPECT_NE(Lines(out)[1].find("\"generation\": 1,"), std::string::npos) << Lines(out)[1];

  EXPECT_EQ(Stop(agent), 0);
  agent = SpawnCli(serve_args, "/dev/null");
  ASSERT_TRUE(published(3)) << "the restarted agent's snapshot was not applied";

  EXPECT_EQ(Stop(agent), 0);
  EXPECT_EQ(Stop(sink), 0);
  unlink(out.c_str());
  rmdir(dir);
}

// The agent may start before Ray: without --node-id it publishes as the node its sink names.
TEST(AgentAndSink, TheAgentLearnsItsNodeIdFromTheSink) {
  const std::string dir = testing::MakeTempDir("node-from-sink");
  const std::string socket = dir + "/sink.sock";
  const std::string out = dir + "/sink.jsonl";
  pid_t sink = SpawnCli({"sink", "--listen", "unix:" + socket, "--node-id", kNode, "--json"}, out);
  ASSERT_TRUE(WaitForFile(socket));
  pid_t agent =
      SpawnCli({"serve", "--listen", dir + "/agent.sock", "--raylet", "unix:" + socket, "--plugin",
                std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so", "--config",
                std::string("sim.spec=") + RAYACCEL_EXAMPLES_DIR + "/dgx-h100.json"},
               "/dev/null");
  for (int i = 0; i < 2000 && Lines(out).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(Lines(out).empty()) << "nothing was published";
  EXPECT_EQ(Lines(out)[0].rfind("{\"node_id\": \"" + kNode + "\"", 0), 0u) << Lines(out)[0];
  EXPECT_EQ(Stop(agent), 0);
  EXPECT_EQ(Stop(sink), 0);
  testing::CommandResult bad = testing::Run(
      {RAYACCEL_CLI, "sink", "--listen", "unix:" + dir + "/other.sock", "--node-id", "xyz"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--node-id: "), std::string::npos) << bad.err;
  std::system(("rm -rf " + dir).c_str());
}

// A health change in a plugin reaches the sink with no rescan asked for: the CUDA plugin on the
// fake NVML reports XID 79 on one of four GPUs, and the sink ends with GPU: 3.
TEST(AgentAndSink, AHealthChangeReachesTheSink) {
  char dir[] = "/tmp/rayaccel-health-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/sink.sock";
  const std::string out = std::string(dir) + "/sink.jsonl";
  setenv("FAKE_NVML_FIXTURE", RAYACCEL_FIXTURES_DIR "/fake-nvml/xid-79.json", 1);
  pid_t sink = SpawnCli({"sink", "--listen", "unix:" + socket, "--json"}, out);
  ASSERT_TRUE(WaitForFile(socket));
  pid_t agent =
      SpawnCli({"serve", "--listen", std::string(dir) + "/agent.sock", "--raylet", "unix:" + socket,
                "--node-id", kNode, "--plugin",
                std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-cuda.so", "--config",
                std::string("cuda.nvml_library=") + RAYACCEL_FAKE_NVML, "--rescan-interval", "0"},
               "/dev/null");
  bool degraded = false;
  for (int i = 0; i < 2000 && !degraded; ++i) {
    std::vector<std::string> lines = Lines(out);
    degraded = !lines.empty() && lines.back().find("\"GPU\": 3") != std::string::npos;
    if (!degraded) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(Stop(agent), 0);
  EXPECT_EQ(Stop(sink), 0);
  unsetenv("FAKE_NVML_FIXTURE");
  std::vector<std::string> lines = Lines(out);
  ASSERT_TRUE(degraded) << (lines.empty() ? "nothing published" : lines.back());
  EXPECT_EQ(lines.back().find("\"generation\": 1,"), std::string::npos) << lines.back();
  unlink(out.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace rayaccel::rpc
