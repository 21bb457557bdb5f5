// The agent's AcceleratorRegistry: served by a real gRPC server on real sockets (Unix, TCP
// loopback, TLS) over a real registry with the sim plugin, and by `rayaccel serve` as a process.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rayaccel/v1/agent.grpc.pb.h"
#include "rpc/registry_service.h"
#include "spdlog/spdlog.h"
#include "support/child_process.h"
#include "support/test_support.h"

namespace rayaccel::rpc {
namespace {

using testing::Lines;
using testing::Stop;
using testing::WaitForFile;

const std::string kSimPlugin = testing::SimPlugin();
const std::string kDgxSpec = "sim.spec=" + testing::Example("dgx-h100.json");
const std::string kTlsDir = testing::Fixture("tls");

std::string TempDir() { return testing::MakeTempDir("agent"); }

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::unique_ptr<Registry> SimRegistry(const std::string& spec) {
  RegistryOptions options;
  options.plugins = {kSimPlugin};
  options.use_environment = false;
  options.host_topology = false;
  options.config["sim"]["spec"] = spec[0] == '/' ? spec : testing::Example(spec);
  auto registry = Registry::Create(options);
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

using Stub = v1::AcceleratorRegistry::Stub;

class AgentServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::default_logger(); }

  // Starts the service over a sim registry; `tweak` adjusts the server options first.
  void Start(ServerOptions options = {}, const std::string& spec = "dgx-h100.json",
             RegistryService::Options service_options = {}) {
    dir_ = TempDir();
    if (options.listen.empty()) options.listen = "unix:" + dir_ + "/agent.sock";
    // A copy of the spec, so that Change() can edit it.
    spec_ = dir_ + "/spec.json";
    testing::CopyFile(testing::Example(spec), spec_);
    registry_ = SimRegistry(spec_);
    service_ = std::make_unique<RegistryService>(registry_.get(), service_options);
    auto server = Server::Start(options, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    service_.reset();
    rmdir(dir_.c_str());
  }

  std::unique_ptr<Stub> Connect(const std::shared_ptr<grpc::ChannelCredentials>& credentials =
                                    grpc::InsecureChannelCredentials()) {
    return v1::AcceleratorRegistry::NewStub(grpc::CreateChannel(server_->target(), credentials));
  }

  // Edits the spec and rescans: a new generation (a rescan that changes nothing keeps the
  // generation). `unhealthy_id`: that device turns unhealthy; otherwise the first device's
  // driver version changes.
  std::shared_ptr<const NodeSnapshot> Change(const std::string& unhealthy_id = "") {
    if (unhealthy_id.empty()) {
      testing::ChangeSimSpec(spec_);
    } else {
      std::string text = ReadText(spec_);
      size_t at = text.find("\"uuid\": \"" + unhealthy_id + "\"");
      EXPECT_NE(at, std::string::npos) << unhealthy_id;
      const std::string healthy = "\"health\": \"healthy\"";
      at = text.find(healthy, at);
      EXPECT_NE(at, std::string::npos) << unhealthy_id;
      text.replace(at, healthy.size(), "\"health\": \"unhealthy\", \"health_reason\": \"XID 79\"");
      std::ofstream(spec_ + ".new") << text;
      EXPECT_EQ(rename((spec_ + ".new").c_str(), spec_.c_str()), 0);
    }
    const uint64_t before = registry_->snapshot()->generation;
    std::shared_ptr<const NodeSnapshot> after = registry_->Rescan();
    EXPECT_GT(after->generation, before);
    return after;
  }

  std::string dir_;
  std::string spec_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<RegistryService> service_;
  std::unique_ptr<Server> server_;
};

TEST_F(AgentServiceTest, GetSnapshotIsTheRegistrysOnA0660Socket) {
  Start();
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/agent.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  auto stub = Connect();
  grpc::ClientContext context;
  v1::NodeSnapshot snapshot;
  ASSERT_TRUE(stub->GetSnapshot(&context, {}, &snapshot).ok());
  EXPECT_EQ(snapshot.generation(), registry_->snapshot()->generation);
  EXPECT_EQ(snapshot.devices_size(), 8);
  EXPECT_EQ(snapshot.resources_total().at("GPU"), 8);
  EXPECT_EQ(snapshot.labels().at("ray.io/accelerator-type"), "H100");
}

TEST_F(AgentServiceTest, WatchersGetTheCurrentSnapshotAtOnceThenEachNewOne) {
  Start();
  auto stub = Connect();
  grpc::ClientContext context;
  auto reader = stub->WatchSnapshots(&context, {});
  v1::NodeSnapshot s;
  ASSERT_TRUE(reader->Read(&s));
  const uint64_t first = s.generation();
  EXPECT_EQ(first, registry_->snapshot()->generation);
  Change();
  ASSERT_TRUE(reader->Read(&s));
  EXPECT_EQ(s.generation(), first + 1);

  // A watcher that already holds the current generation waits for the next one.
  grpc::ClientContext later_context;
  v1::WatchSnapshotsRequest after;
  after.set_after_generation(first + 1);
  auto later = stub->WatchSnapshots(&later_context, after);
  Change();
  ASSERT_TRUE(later->Read(&s));
  EXPECT_EQ(s.generation(), first + 2);
  context.TryCancel();
  later_context.TryCancel();
}

// A watcher that stops reading holds up no one; when it reads again it gets strictly newer
// generations ending with the newest, having skipped those it was too slow for.
TEST_F(AgentServiceTest, ASlowWatcherSkipsToTheNewestAndHoldsUpNoOne) {
  Start({}, "nvl72.json");
  auto stub = Connect();
  // The slow watcher's connection buffers little, as a far or busy client's does: without
  // this, gRPC's window grows on loopback until 300 snapshots fit, when rescans are slow
  // (a sanitizer build), and nothing needs skipping.
  grpc::ChannelArguments small_window;
  small_window.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  small_window.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  auto slow_stub = v1::AcceleratorRegistry::NewStub(grpc::CreateCustomChannel(
      server_->target(), grpc::InsecureChannelCredentials(), small_window));
  grpc::ClientContext slow_context, fast_context;
  auto slow = slow_stub->WatchSnapshots(&slow_context, {});
  auto fast = stub->WatchSnapshots(&fast_context, {});
  v1::NodeSnapshot s;
  ASSERT_TRUE(slow->Read(&s));
  ASSERT_TRUE(fast->Read(&s));
  constexpr int kRescans = 300;
  uint64_t newest = 0;
  for (int i = 0; i < kRescans; ++i) newest = Change()->generation;
  // The fast watcher reaches the newest while the slow one has not read anything.
  while (s.generation() < newest) ASSERT_TRUE(fast->Read(&s));
  EXPECT_EQ(s.generation(), newest);

  int received = 0;
  uint64_t last = 0;
  while (last < newest) {
    ASSERT_TRUE(slow->Read(&s));
    EXPECT_GT(s.generation(), last);
    last = s.generation();
    ++received;
  }
  EXPECT_EQ(last, newest);
  EXPECT_LT(received, kRescans) << "nothing was skipped";
  slow_context.TryCancel();
  fast_context.TryCancel();
}

TEST_F(AgentServiceTest, ManyConcurrentWatchersEachGetEveryChange) {
  Start();
  constexpr int kWatchers = 100;
  const uint64_t first = registry_->snapshot()->generation;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  channels.reserve(4);
  for (int c = 0; c < 4; ++c) {
    channels.push_back(grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  }
  std::atomic<int> ready{0}, done{0};
  std::vector<std::thread> threads;
  threads.reserve(kWatchers);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  contexts.reserve(kWatchers);
  for (int w = 0; w < kWatchers; ++w) contexts.push_back(std::make_unique<grpc::ClientContext>());
  for (int w = 0; w < kWatchers; ++w) {
    threads.emplace_back([&, w] {
      auto stub = v1::AcceleratorRegistry::NewStub(channels[w % channels.size()]);
      auto reader = stub->WatchSnapshots(contexts[w].get(), {});
      v1::NodeSnapshot s;
      if (!reader->Read(&s) || s.generation() != first) return;
      ++ready;
      while (reader->Read(&s) && s.generation() < first + 2) {
      }
      if (s.generation() == first + 2) ++done;
    });
  }
  for (int i = 0; i < 1000 && ready < kWatchers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ready, kWatchers);
  EXPECT_EQ(service_->watcher_count(), static_cast<size_t>(kWatchers));
  Change();
  Change();
  for (int i = 0; i < 1000 && done < kWatchers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(done, kWatchers);
  for (auto& c : contexts) c->TryCancel();
  for (auto& t : threads) t.join();
  for (int i = 0; i < 500 && service_->watcher_count() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(service_->watcher_count(), 0u) << "cancelled watchers were not forgotten";
}

TEST_F(AgentServiceTest, WatchersBeyondTheLimitAreRefused) {
  RegistryService::Options limited;
  limited.max_watchers = 2;
  Start({}, "dgx-h100.json", limited);
  auto stub = Connect();
  grpc::ClientContext a, b, c;
  auto ra = stub->WatchSnapshots(&a, {});
  auto rb = stub->WatchSnapshots(&b, {});
  v1::NodeSnapshot s;
  ASSERT_TRUE(ra->Read(&s));
  ASSERT_TRUE(rb->Read(&s));
  auto rc = stub->WatchSnapshots(&c, {});
  EXPECT_FALSE(rc->Read(&s));
  EXPECT_EQ(rc->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  a.TryCancel();
  b.TryCancel();
}

// The standard gRPC health check (grpc.health.v1.Health/Check), without a token: what
// Kubernetes gRPC probes and grpc_health_probe ask.
TEST_F(AgentServiceTest, AnswersTheStandardHealthCheck) {
  Start();
  auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto check = [&](const std::string& service) {
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
    // HealthCheckRequest { string service = 1; }
    std::string bytes;
    if (!service.empty()) {
      bytes = std::string(1, '\x0a') + static_cast<char>(service.size()) + service;
    }
    grpc::Slice slice(bytes);
    request = grpc::ByteBuffer(&slice, 1);
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                   &response, [&](grpc::Status st) { done.set_value(st); });
    grpc::Status st = done.get_future().get();
    std::vector<grpc::Slice> slices;
    std::string out;
    if (st.ok() && response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices)
        out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return std::make_pair(st, out);
  };
  auto [status, body] = check("");
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(body, std::string("\x08\x01", 2));  // HealthCheckResponse { status: SERVING }
  EXPECT_EQ(check("no.such.Service").first.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AgentServiceTest, AllocationThroughTheService) {
  Start();
  auto stub = Connect();
  v1::PreferredAllocationRequest want;
  want.set_resource("GPU");
  want.set_count(4);
  v1::PreferredAllocationResponse chosen;
  {
    grpc::ClientContext context;
    grpc::Status st = stub->PreferredAllocation(&context, want, &chosen);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(chosen.device_ids_size(), 4) << chosen.reason();
  EXPECT_EQ(chosen.generation(), registry_->snapshot()->generation);

  v1::PrepareAllocationRequest prepare;
  prepare.set_generation(chosen.generation());
  *prepare.mutable_device_ids() = chosen.device_ids();
  v1::PrepareAllocationResponse env;
  {
    grpc::ClientContext context;
    grpc::Status st = stub->PrepareAllocation(&context, prepare, &env);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(env.env().count("CUDA_VISIBLE_DEVICES"), 1u);

  Change();  // the ids now come from an older snapshot, and still hold
  {
    grpc::ClientContext context;
    grpc::Status st = stub->PrepareAllocation(&context, prepare, &env);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  Change(chosen.device_ids(1));  // one of them turned unhealthy: the lease is stale
  grpc::ClientContext stale_context;
  EXPECT_EQ(stub->PrepareAllocation(&stale_context, prepare, &env).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  prepare.set_generation(0);
  prepare.add_device_ids("no-such-device");
  grpc::ClientContext unknown_context;
  EXPECT_FALSE(stub->PrepareAllocation(&unknown_context, prepare, &env).ok());
  want.set_count(0);
  grpc::ClientContext zero_context;
  EXPECT_EQ(stub->PreferredAllocation(&zero_context, want, &chosen).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(AgentServiceTest, PluginStatus) {
  Start();
  auto stub = Connect();
  v1::GetPluginStatusResponse all;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->GetPluginStatus(&context, {}, &all).ok());
  ASSERT_EQ(all.plugins_size(), 1);
  EXPECT_EQ(all.plugins(0).name(), "sim");
  EXPECT_EQ(all.plugins(0).device_count(), 8u);
  v1::GetPluginStatusRequest missing;
  missing.set_name("nope");
  grpc::ClientContext missing_context;
  EXPECT_EQ(stub->GetPluginStatus(&missing_context, missing, &all).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// GetTelemetry: the sim plugin's samples, one per device; callers within a second share one
// sample (the same unix_ms), so a flood of callers costs the plugins nothing more.
TEST_F(AgentServiceTest, TelemetryIsSampledAtMostOnceASecond) {
  Start();
  auto stub = Connect();
  v1::Telemetry first, again;
  grpc::ClientContext context, context_again;
  ASSERT_TRUE(stub->GetTelemetry(&context, {}, &first).ok());
  ASSERT_EQ(first.devices_size(), 8);
  ASSERT_EQ(first.plugins_size(), 1);
  EXPECT_EQ(first.plugins(0).plugin(), "sim");
  EXPECT_EQ(first.plugins(0).error(), "");
  const v1::DeviceSample& d = first.devices(0);
  EXPECT_EQ(d.plugin(), "sim");
  EXPECT_NE(d.known() & RAYACCEL_SAMPLE_MEMORY, 0u);
  EXPECT_GT(d.memory_total_bytes(), 0u);
  EXPECT_FALSE(d.device_id().empty());
  ASSERT_TRUE(stub->GetTelemetry(&context_again, {}, &again).ok());
  EXPECT_EQ(again.unix_ms(), first.unix_ms());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  grpc::ClientContext later_context;
  v1::Telemetry later;
  ASSERT_TRUE(stub->GetTelemetry(&later_context, {}, &later).ok());
  EXPECT_GT(later.unix_ms(), first.unix_ms());
}

TEST_F(AgentServiceTest, EveryCallNeedsTheToken) {
  const std::string dir = TempDir();
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << "s3cret-token\n";
  auto token = BearerToken::FromFile(token_file);
  ASSERT_TRUE(token.ok()) << token.status();
  RegistryService::Options guarded;
  guarded.token = &*token;
  Start({}, "dgx-h100.json", guarded);
  auto stub = Connect();
  for (const char* sent :
       {"", "Bearer wrong", "Bearer s3cret-tokenX", "s3cret-token", "Bearer s3cret-toke"}) {
    grpc::ClientContext context;
    if (*sent != '\0') context.AddMetadata("authorization", sent);
    v1::NodeSnapshot s;
    grpc::Status st = stub->GetSnapshot(&context, {}, &s);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << sent;
    EXPECT_EQ(st.error_message().find("s3cret"), std::string::npos);  // never echoed
    grpc::ClientContext watch_context;
    if (*sent != '\0') watch_context.AddMetadata("authorization", sent);
    auto reader = stub->WatchSnapshots(&watch_context, {});
    EXPECT_FALSE(reader->Read(&s));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED) << sent;
    grpc::ClientContext telemetry_context;
    if (*sent != '\0') telemetry_context.AddMetadata("authorization", sent);
    v1::Telemetry t;
    EXPECT_EQ(stub->GetTelemetry(&telemetry_context, {}, &t).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer s3cret-token");
  v1::NodeSnapshot s;
  EXPECT_TRUE(stub->GetSnapshot(&context, {}, &s).ok());
  EXPECT_EQ(service_->watcher_count(), 0u);
  unlink(token_file.c_str());
  rmdir(dir.c_str());
}

TEST_F(AgentServiceTest, OversizedMessagesAndGarbageBytesHarmNothing) {
  Start();
  auto stub = Connect();
  v1::PrepareAllocationRequest huge;
  huge.add_device_ids(std::string(5 << 20, 'x'));  // over the 4 MiB limit
  v1::PrepareAllocationResponse env;
  grpc::ClientContext huge_context;
  EXPECT_EQ(stub->PrepareAllocation(&huge_context, huge, &env).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  for (const std::string& junk : testing::GarbageForGrpc()) {
    ASSERT_TRUE(testing::SendRawBytes(dir_ + "/agent.sock", junk));
  }
  grpc::ClientContext context;
  v1::NodeSnapshot s;
  EXPECT_TRUE(stub->GetSnapshot(&context, {}, &s).ok());
  EXPECT_EQ(s.devices_size(), 8);
}

TEST_F(AgentServiceTest, TlsOnTcp) {
  ServerOptions tls;
  tls.listen = "tcp://127.0.0.1:0";
  tls.tls_cert_file = kTlsDir + "/server.pem";
  tls.tls_key_file = kTlsDir + "/server.key";
  Start(tls);
  ASSERT_EQ(server_->target().rfind("127.0.0.1:", 0), 0u) << server_->target();
  grpc::SslCredentialsOptions trust;
  trust.pem_root_certs = ReadText(kTlsDir + "/ca.pem");
  auto secure = Connect(grpc::SslCredentials(trust));
  grpc::ClientContext context;
  v1::NodeSnapshot s;
  grpc::Status st = secure->GetSnapshot(&context, {}, &s);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(s.devices_size(), 8);

  auto plain = Connect();  // no TLS: the handshake fails, nothing is served
  grpc::ClientContext plain_context;
  plain_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_FALSE(plain->GetSnapshot(&plain_context, {}, &s).ok());
}

// --tls-client-ca: only clients with a certificate that CA signed are served.
TEST_F(AgentServiceTest, MutualTlsRequiresAClientCertificate) {
  ServerOptions tls;
  tls.listen = "tcp://127.0.0.1:0";
  tls.tls_cert_file = kTlsDir + "/server.pem";
  tls.tls_key_file = kTlsDir + "/server.key";
  tls.tls_client_ca_file = kTlsDir + "/ca.pem";
  Start(tls);
  grpc::SslCredentialsOptions with_cert;
  with_cert.pem_root_certs = ReadText(kTlsDir + "/ca.pem");
  grpc::SslCredentialsOptions without_cert = with_cert;
  with_cert.pem_private_key = ReadText(kTlsDir + "/client.key");
  with_cert.pem_cert_chain = ReadText(kTlsDir + "/client.pem");
  v1::NodeSnapshot s;
  grpc::ClientContext context;
  grpc::Status st = Connect(grpc::SslCredentials(with_cert))->GetSnapshot(&context, {}, &s);
  ASSERT_TRUE(st.ok()) << st.error_message();
  grpc::ClientContext refused_context;
  refused_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_FALSE(
      Connect(grpc::SslCredentials(without_cert))->GetSnapshot(&refused_context, {}, &s).ok());
}

TEST(ServerOptionsTest, PlainTcpOffLoopbackNeedsTlsOrExplicitPermission) {
  ServerOptions o;
  o.listen = "tcp://0.0.0.0:0";
  EXPECT_FALSE(CheckServerOptions(o).ok());
  o.allow_insecure_tcp = true;
  EXPECT_TRUE(CheckServerOptions(o).ok());
  o.allow_insecure_tcp = false;
  o.tls_cert_file = "cert.pem";
  EXPECT_FALSE(CheckServerOptions(o).ok()) << "a certificate without a key";
  o.tls_key_file = "key.pem";
  EXPECT_TRUE(CheckServerOptions(o).ok());
  o.listen = "tcp://127.0.0.1:0";
  o.tls_cert_file = o.tls_key_file = "";
  EXPECT_TRUE(CheckServerOptions(o).ok());
}

TEST(ServerStartTest, AStaleSocketIsReplacedAnyOtherFileIsNot) {
  spdlog::default_logger();
  const std::string dir = TempDir();
  const std::string path = dir + "/agent.sock";
  {  // a socket left behind by a server that died
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);
  }
  std::unique_ptr<Registry> registry = SimRegistry("dgx-h100.json");
  RegistryService service(registry.get(), {});
  ServerOptions options;
  options.listen = "unix:" + path;
  auto server = Server::Start(options, {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  // A second server on the live socket is refused, and the first keeps it.
  RegistryService other(registry.get(), {});
  auto second = Server::Start(options, {&other});
  EXPECT_FALSE(second.ok());
  (*server)->Shutdown(std::chrono::system_clock::now());
  struct stat st {};
  EXPECT_NE(stat(path.c_str(), &st), 0) << "the socket was left behind";

  std::ofstream(path) << "not a socket";
  EXPECT_FALSE(Server::Start(options, {&service}).ok());
  EXPECT_EQ(ReadText(path), "not a socket");
  unlink(path.c_str());
  rmdir(dir.c_str());
}

// Whoever waits for the socket's path (a raylet, the CLI, a test) may connect the moment it
// appears: the server links it into place only once it listens, and leaves nothing else behind.
TEST(ServerStartTest, TheSocketAppearsOnlyOnceItAnswers) {
  spdlog::default_logger();
  const std::string dir = TempDir();
  const std::string path = dir + "/agent.sock";
  std::unique_ptr<Registry> registry = SimRegistry("dgx-h100.json");
  RegistryService service(registry.get(), {});
  ServerOptions options;
  options.listen = "unix:" + path;
  for (int round = 0; round < 20; ++round) {
    absl::StatusOr<std::unique_ptr<Server>> server;
    std::thread start([&] { server = Server::Start(options, {&service}); });
    struct stat st {};
    while (lstat(path.c_str(), &st) != 0) {
    }
    EXPECT_TRUE(testing::SendRawBytes(path, "")) << "round " << round << ": refused";
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    start.join();
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ(testing::ListDir(dir), std::vector<std::string>{"agent.sock"});
    (*server)->Shutdown(std::chrono::system_clock::now());
  }
  EXPECT_EQ(rmdir(dir.c_str()), 0) << "the server left files behind";

  // A path too long for a private name beside it is bound in place, as before.
  const std::string dir2 = TempDir();
  const std::string longest = dir2 + "/" + std::string(107 - dir2.size() - 1, 's');
  options.listen = "unix:" + longest;
  auto server = Server::Start(options, {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(testing::SendRawBytes(longest, ""));
  (*server)->Shutdown(std::chrono::system_clock::now());
  EXPECT_EQ(rmdir(dir2.c_str()), 0) << "the server left files behind";
}

// The socket's mode and group are the operator's: a root agent serves a Ray run as another
// user by giving the socket to that user's group.
TEST(ServerStartTest, TheSocketGetsTheModeAndGroupAskedFor) {
  spdlog::default_logger();
  const std::string dir = TempDir();
  const std::string path = dir + "/agent.sock";
  std::unique_ptr<Registry> registry = SimRegistry("dgx-h100.json");
  RegistryService service(registry.get(), {});
  ServerOptions options;
  options.listen = "unix:" + path;
  options.socket_mode = 0666;
  // As root any group will do; otherwise one of this user's own.
  const gid_t gid = geteuid() == 0 ? 65534 : getegid();
  options.socket_group = std::to_string(gid);
  auto server = Server::Start(options, {&service});
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  EXPECT_EQ(st.st_gid, gid);
  (*server)->Shutdown(std::chrono::system_clock::now());

  options.socket_group = "no-such-group-here";
  auto unknown = Server::Start(options, {&service});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no group \"no-such-group-here\""), std::string::npos)
      << unknown.status();
  options.socket_group.clear();
  options.socket_mode = 0066;  // the owner could not use it
  auto unusable = Server::Start(options, {&service});
  ASSERT_FALSE(unusable.ok());
  EXPECT_NE(unusable.status().message().find("socket mode 0066"), std::string::npos)
      << unusable.status();

  testing::CommandResult bad =
      testing::Run({RAYACCEL_CLI, "serve", "--listen", "unix:" + path, "--socket-mode", "0444"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--socket-mode needs an octal mode"), std::string::npos) << bad.err;
  rmdir(dir.c_str());
}

// As a user other than root, who cannot write /run, the agent needs no --listen: its socket
// goes to the user's runtime folder, or to a folder of its own in /tmp (refused when someone
// else made that folder); a folder it may not create gets a message saying what to do.
TEST(ServeCommand, ANonRootAgentListensInItsUsersFolder) {
  if (geteuid() != 0) GTEST_SKIP() << "runs the agent as another user: needs root";
  constexpr uid_t kNobody = 65534;
  const std::string dir = TempDir();
  const std::string runtime = dir + "/run-user";
  ASSERT_EQ(mkdir(runtime.c_str(), 0700), 0);
  ASSERT_EQ(chown(runtime.c_str(), kNobody, kNobody), 0);
  auto as_nobody = [](std::vector<std::string> env_and_argv) {
    std::vector<std::string> argv = {
        "--reuid=65534",  "--regid=65534", "--clear-groups", "/usr/bin/env", "-u",
        "XDG_RUNTIME_DIR"};
    argv.insert(argv.end(), env_and_argv.begin(), env_and_argv.end());
    return argv;
  };
  std::vector<std::string> serve = {RAYACCEL_CLI, "serve",
                                    "--plugin",   testing::SimPlugin(),
                                    "--config",   "sim.spec=" + testing::Example("dgx-h100.json")};
  auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return as_nobody(head);
  };
  std::vector<std::string> probe = with({}, {RAYACCEL_CLI, "version"});
  probe.insert(probe.begin(), "/usr/bin/setpriv");
  testing::CommandResult can_run = testing::Run(probe);
  if (can_run.exit_code != 0) {
    GTEST_SKIP() << "the build tree is not usable by another user: " << can_run.err;
  }

  pid_t agent =
      testing::Spawn("/usr/bin/setpriv", with({"XDG_RUNTIME_DIR=" + runtime}, serve), "/dev/null");
  const std::string socket = runtime + "/rayaccel/agent.sock";
  ASSERT_TRUE(WaitForFile(socket));
  struct stat st {};
  ASSERT_EQ(lstat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(Stop(agent), 0);

  // No runtime folder: /tmp/rayaccel-UID, the user's alone.
  const std::string own = "/tmp/rayaccel-65534";
  std::system(("rm -rf " + own).c_str());
  ASSERT_EQ(mkdir(own.c_str(), 0755), 0);  // made by someone else (root): refused
  std::vector<std::string> fallback = with({}, serve);
  fallback.insert(fallback.begin(), "/usr/bin/setpriv");
  testing::CommandResult refused = testing::Run(fallback);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find(own + " is not a folder of this user's alone"), std::string::npos)
      << refused.err;
  rmdir(own.c_str());
  agent = testing::Spawn("/usr/bin/setpriv", with({}, serve), "/dev/null");
  ASSERT_TRUE(WaitForFile(own + "/agent.sock"));
  ASSERT_EQ(lstat(own.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(Stop(agent), 0);
  std::system(("rm -rf " + own).c_str());

  // A folder this user may not create.
  std::vector<std::string> denied =
      with({}, {RAYACCEL_CLI, "serve", "--listen", "unix:" + dir + "/root-only/agent.sock",
                "--plugin", testing::SimPlugin()});
  denied.insert(denied.begin(), "/usr/bin/setpriv");
  testing::CommandResult r = testing::Run(denied);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot create the socket's folder " + dir +
                       "/root-only: Permission denied "
                       "(not running as root"),
            std::string::npos)
      << r.err;
  std::system(("rm -rf " + dir).c_str());
}

// A port already taken: Start says so (no crash), and `rayaccel sink` exits 1.
TEST(ServerStartTest, APortInUseIsAnErrorNotACrash) {
  spdlog::default_logger();
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  const std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  std::unique_ptr<Registry> registry = SimRegistry("dgx-h100.json");
  RegistryService service(registry.get(), {});
  ServerOptions options;
  options.listen = address;
  EXPECT_FALSE(Server::Start(options, {&service}).ok());
  EXPECT_EQ(testing::WaitExit(testing::Spawn(RAYACCEL_CLI, {"sink", "--listen", address},
                                             "/dev/null", "/dev/null")),
            1);
  close(taken);
}

// `rayaccel serve` as a process: serves on its socket, a SIGHUP reaches watchers, SIGTERM
// drains (the watch ends, the socket goes, exit 0).
TEST(ServeCommand, ServesWatchersAndDrainsOnSigterm) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/agent.sock", spec = dir + "/spec.json";
  testing::CopyFile(testing::Example("dgx-h100.json"), spec);
  pid_t agent = testing::Spawn(RAYACCEL_CLI,
                               {"serve", "--listen", "unix:" + socket, "--plugin", kSimPlugin,
                                "--config", "sim.spec=" + spec, "--rescan-interval", "0"},
                               "/dev/null");
  ASSERT_TRUE(WaitForFile(socket));
  auto stub = v1::AcceleratorRegistry::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto reader = stub->WatchSnapshots(&context, {});
  v1::NodeSnapshot s;
  ASSERT_TRUE(reader->Read(&s));
  EXPECT_EQ(s.generation(), 1u);
  testing::ChangeSimSpec(spec);  // a SIGHUP rescan publishes what changed
  kill(agent, SIGHUP);
  ASSERT_TRUE(reader->Read(&s));
  EXPECT_EQ(s.generation(), 2u);
  EXPECT_EQ(Stop(agent), 0);
  EXPECT_FALSE(reader->Read(&s));
  grpc::Status ended = reader->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  struct stat st {};
  EXPECT_NE(stat(socket.c_str(), &st), 0) << "the socket was left behind";
  unlink(spec.c_str());
  rmdir(dir.c_str());
}

// Run by systemd as a Type=notify service: ready once it serves (with its pid and what it
// serves), reloading and ready again around a SIGHUP rescan, watchdog pings at half the
// interval asked for, stopping on SIGTERM.
TEST(ServeCommand, TellsSystemdWhenItIsReadyReloadingAndStopping) {
  const std::string dir = TempDir();
  const std::string notify = dir + "/notify.sock", socket = dir + "/agent.sock";
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", notify.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval five_seconds{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof(five_seconds));
  auto next = [&] {
    char buffer[512];
    ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, n) : std::string();
  };
  // Skips watchdog pings, which come between the others.
  auto next_state = [&] {
    std::string m;
    do {
      m = next();
    } while (m == "WATCHDOG=1");
    return m;
  };
  setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  setenv("WATCHDOG_USEC", "200000", 1);
  pid_t agent =
      testing::Spawn(RAYACCEL_CLI,
                     {"serve", "--listen", "unix:" + socket, "--plugin", kSimPlugin, "--config",
                      "sim.spec=" + testing::Example("dgx-h100.json"), "--rescan-interval", "0"},
                     "/dev/null");
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  EXPECT_EQ(next(), "READY=1\nSTATUS=serving generation 1 on unix:" + socket +
                        "\nMAINPID=" + std::to_string(agent));
  EXPECT_EQ(next(), "WATCHDOG=1");  // within the 5 s: at half of 200 ms
  kill(agent, SIGHUP);
  const std::string reloading = next_state();
  EXPECT_EQ(reloading.rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << reloading;
  EXPECT_EQ(next_state(), "READY=1\nSTATUS=serving generation 1 on unix:" + socket);
  EXPECT_EQ(Stop(agent), 0);
  EXPECT_EQ(next_state(), "STOPPING=1\nSTATUS=draining");
  close(fd);
  std::system(("rm -rf " + dir).c_str());
}

// serve --http: /metrics in the Prometheus text format (read by Prometheus's own Python
// parser), /api/snapshot as discover's JSON, the token required when the agent has one, and a
// non-loopback address refused unless allowed.
TEST(ServeCommand, ServesPrometheusMetricsOverHttp) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/agent.sock", token = dir + "/token";
  std::ofstream(token) << "s3cret\n";
  chmod(token.c_str(), 0600);
  const int port = testing::FreeLoopbackPort();
  pid_t agent = testing::Spawn(
      RAYACCEL_CLI,
      {"serve", "--listen", "unix:" + socket, "--http", "tcp://127.0.0.1:" + std::to_string(port),
       "--token-file", token, "--plugin", kSimPlugin, "--config",
       "sim.spec=" + testing::Example("dgx-h100.json"), "--rescan-interval", "0"},
      "/dev/null");
  ASSERT_TRUE(WaitForFile(socket));
  const std::string script =
      "import sys, urllib.request, urllib.error\n"
      "from prometheus_client.parser import text_string_to_metric_families\n"
      "base = 'http://127.0.0.1:' + sys.argv[1]\n"
      "try:\n"
      "    urllib.request.urlopen(base + '/metrics')\n"
      "    print('no token: served')\n"
      "except urllib.error.HTTPError as e:\n"
      "    print('no token:', e.code)\n"
      "def get(path):\n"
      "    req = urllib.request.Request(base + path, headers={'Authorization': 'Bearer s3cret'})\n"
      "    return urllib.request.urlopen(req).read().decode()\n"
      "samples = {}\n"
      "for family in text_string_to_metric_families(get('/metrics')):\n"
      "    for s in family.samples:\n"
      "        samples[(s.name, tuple(sorted(s.labels.items())))] = s.value\n"
      "print(samples[('rayaccel_snapshot_generation', ())])\n"
      "print(samples[('rayaccel_devices', (('health', 'healthy'), ('plugin', 'sim'), "
      "('resource', 'GPU')))])\n"
      "print(samples[('rayaccel_ray_resource', (('resource', 'GPU'),))])\n"
      "print(samples[('rayaccel_scans_total', ())] >= 1)\n"
      "print(samples[('rayaccel_scan_duration_seconds_count', ())] >= 1)\n"
      "print('\"generation\": 1' in get('/api/snapshot'))\n";
  testing::CommandResult r = testing::Run({"/usr/bin/python3", "-c", script, std::to_string(port)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no token: 401\n1.0\n8.0\n8.0\nTrue\nTrue\nTrue\n") << r.err;
  EXPECT_EQ(Stop(agent), 0);

  testing::CommandResult open =
      testing::Run({RAYACCEL_CLI, "serve", "--listen", "unix:" + dir + "/other.sock", "--http",
                    "tcp://0.0.0.0:0", "--plugin", kSimPlugin});
  EXPECT_EQ(open.exit_code, 2) << open.err;
  EXPECT_NE(open.err.find("plain TCP on 0.0.0.0:0 is refused"), std::string::npos) << open.err;
  std::system(("rm -rf " + dir).c_str());
}

// The node's configuration file: RAYACCEL_CONFIG_FILE (else /etc/rayaccel/rayaccel.conf when
// there is one) configures every command that has no --config-file.
TEST(ServeCommand, TheNodesConfigFileIsReadByDefault) {
  const std::string dir = TempDir();
  const std::string conf = dir + "/rayaccel.conf";
  std::ofstream(conf) << "# the node's plugins\nsim.spec = " << testing::Example("dgx1-v100.json")
                      << "\n";
  testing::CommandResult r =
      testing::Run({RAYACCEL_CLI, "resources", "--plugin", kSimPlugin, "--no-host-topology"},
                   {{"RAYACCEL_CONFIG_FILE", conf}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("accelerator_type:V100"), std::string::npos) << r.out;
  testing::CommandResult flag = testing::Run({RAYACCEL_CLI, "resources", "--plugin", kSimPlugin,
                                              "--no-host-topology", "--config-file", "/dev/null"},
                                             {{"RAYACCEL_CONFIG_FILE", conf}});
  EXPECT_EQ(flag.out.find("V100"), std::string::npos) << "--config-file comes first: " << flag.out;
  std::system(("rm -rf " + dir).c_str());
}

// The sim plugin's health event is an edit of its spec: marking a GPU unhealthy (written to a
// temporary file and renamed, as editors do) reaches a watcher with no SIGHUP or rescan timer.
TEST(ServeCommand, ASpecEditIsPublishedAtOnce) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/agent.sock", spec = dir + "/node.json";
  std::string text = ReadText(std::string(RAYACCEL_EXAMPLES_DIR) + "/dgx-h100.json");
  std::ofstream(spec) << text;
  pid_t agent = testing::Spawn(RAYACCEL_CLI,
                               {"serve", "--listen", "unix:" + socket, "--plugin", kSimPlugin,
                                "--config", "sim.spec=" + spec, "--rescan-interval", "0"},
                               "/dev/null");
  ASSERT_TRUE(WaitForFile(socket));
  auto stub = v1::AcceleratorRegistry::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = stub->WatchSnapshots(&context, {});
  v1::NodeSnapshot s;
  ASSERT_TRUE(reader->Read(&s));
  EXPECT_EQ(s.resources_total().at("GPU"), 8);

  size_t at = text.find("\"health\": \"healthy\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\"health\": \"healthy\"").size(),
               "\"health\": \"unhealthy\", \"health_reason\": \"XID 79\"");
  std::ofstream(spec + ".tmp") << text;
  ASSERT_EQ(rename((spec + ".tmp").c_str(), spec.c_str()), 0);
  ASSERT_TRUE(reader->Read(&s));
  EXPECT_EQ(s.resources_total().at("GPU"), 7);
  EXPECT_EQ(s.devices(0).health_reason(), "XID 79");
  EXPECT_EQ(Stop(agent), 0);
  unlink(spec.c_str());
  rmdir(dir.c_str());
}

// The agent isolates plugins unless told otherwise: a plugin that segfaults in discover
// costs only itself, the agent serves the other plugins' devices and says why.
TEST(ServeCommand, IsolatesPluginsByDefault) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/agent.sock";
  pid_t agent =
      testing::Spawn(RAYACCEL_CLI,
                     {"serve", "--listen", "unix:" + socket, "--plugin", kSimPlugin, "--plugin",
                      std::string(RAYACCEL_TEST_PLUGIN_DIR) + "/librayaccel-segfault.so",
                      "--config", kDgxSpec, "--rescan-interval", "0"},
                     "/dev/null");
  ASSERT_TRUE(WaitForFile(socket));
  auto stub = v1::AcceleratorRegistry::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::NodeSnapshot s;
  ASSERT_TRUE(stub->GetSnapshot(&context, {}, &s).ok());
  EXPECT_EQ(s.resources_total().at("GPU"), 8);
  bool found = false;
  for (const v1::PluginStatus& p : s.plugins()) {
    if (p.name() != "segfault") continue;
    found = true;
    EXPECT_EQ(p.state(), v1::PluginStatus::STATE_FAILED);
    EXPECT_NE(p.message().find("crashed with signal 11"), std::string::npos) << p.message();
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(Stop(agent), 0);
  rmdir(dir.c_str());
}

TEST(ServeCommand, RefusesPlainTcpOffLoopbackUnlessAllowed) {
  const std::string dir = TempDir();
  const std::string err = dir + "/err.txt";
  const std::vector<std::string> base = {"serve", "--plugin", kSimPlugin, "--config", kDgxSpec};
  std::vector<std::string> wide = base;
  wide.insert(wide.end(), {"--listen", "tcp://0.0.0.0:0"});
  EXPECT_EQ(testing::WaitExit(testing::Spawn(RAYACCEL_CLI, wide, "/dev/null", err)), 2);
  EXPECT_NE(ReadText(err).find("plain TCP on 0.0.0.0:0 is refused"), std::string::npos)
      << ReadText(err);

  // Allowed explicitly, it serves (over loopback here, the address it also listens on). Port 0:
  // the agent takes a free one and logs it (a port picked here could be taken on another
  // address by a test running beside this one before the agent binds all of them).
  wide.insert(wide.end(), {"--allow-insecure-tcp", "--log-level", "info"});
  const std::string log = dir + "/log.txt";
  pid_t agent = testing::Spawn(RAYACCEL_CLI, wide, "/dev/null", log);
  int port = 0;
  const std::string serving = "serving generation 1 on 0.0.0.0:";
  for (int i = 0; i < 200 && port == 0; ++i) {
    std::string text = ReadText(log);
    if (size_t at = text.find(serving); at != std::string::npos) {
      port = std::atoi(text.c_str() + at + serving.size());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ASSERT_GT(port, 0) << ReadText(log);
  auto stub = v1::AcceleratorRegistry::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::NodeSnapshot s;
  grpc::Status st = stub->GetSnapshot(&context, {}, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Stop(agent), 0);
  unlink(err.c_str());
  unlink(log.c_str());
  rmdir(dir.c_str());
}

// The agent and the sink over TCP loopback, plain and with TLS, with a bearer token on the
// sink: a wrong token is refused (nothing applied), the right one publishes.
class AgentAndSinkOverTcp : public ::testing::TestWithParam<bool> {};

TEST_P(AgentAndSinkOverTcp, TheSinkRequiresTheAgentsToken) {
  const bool tls = GetParam();
  const std::string dir = TempDir();
  const std::string token = dir + "/token", wrong = dir + "/wrong", out = dir + "/sink.jsonl";
  std::ofstream(token) << "agent-token\n";
  std::ofstream(wrong) << "not-it\n";
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> sink_args = {"sink",         "--listen", address,
                                        "--token-file", token,      "--json"};
  if (tls) {
    sink_args.insert(sink_args.end(),
                     {"--tls-cert", kTlsDir + "/server.pem", "--tls-key", kTlsDir + "/server.key"});
  }
  pid_t sink = testing::Spawn(RAYACCEL_CLI, sink_args, out);
  auto serve = [&](const std::string& token_file) {
    std::vector<std::string> args = {"serve",
                                     "--listen",
                                     "unix:" + dir + "/agent.sock",
                                     "--raylet",
                                     address,
                                     "--node-id",
                                     std::string(56, 'd'),
                                     "--raylet-token-file",
                                     token_file,
                                     "--plugin",
                                     kSimPlugin,
                                     "--config",
                                     kDgxSpec,
                                     "--rescan-interval",
                                     "0"};
    if (tls) args.insert(args.end(), {"--raylet-tls-ca", kTlsDir + "/ca.pem"});
    return testing::Spawn(RAYACCEL_CLI, args, "/dev/null");
  };
  pid_t impostor = serve(wrong);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_TRUE(Lines(out).empty()) << "an agent with the wrong token was applied";
  EXPECT_EQ(Stop(impostor), 0);

  pid_t agent = serve(token);
  for (int i = 0; i < 1000 && Lines(out).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(Lines(out).empty()) << "the agent with the right token was not applied";
  EXPECT_NE(Lines(out)[0].find("\"GPU\": 8"), std::string::npos) << Lines(out)[0];
  EXPECT_EQ(Stop(agent), 0);
  EXPECT_EQ(Stop(sink), 0);
  for (const std::string& f : {token, wrong, out}) unlink(f.c_str());
  rmdir(dir.c_str());
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, AgentAndSinkOverTcp, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("tls") : std::string("plain");
                         });

// `rayaccel discover --agent` shows what the running agent holds, byte for byte what a local
// discovery prints; it sends the token the agent requires.
TEST(ServeCommand, TheCliReadsARunningAgent) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/agent.sock", token = dir + "/token";
  std::ofstream(token) << "t0ken\n";
  const std::vector<std::string> plugin = {"--no-host-topology", "--plugin", kSimPlugin, "--config",
                                           kDgxSpec};
  std::vector<std::string> serve = {
      "serve", "--listen", "unix:" + socket, "--token-file", token, "--rescan-interval", "0"};
  serve.insert(serve.end(), plugin.begin(), plugin.end());
  pid_t agent = testing::Spawn(RAYACCEL_CLI, serve, "/dev/null");
  ASSERT_TRUE(WaitForFile(socket));

  std::vector<std::string> local = {RAYACCEL_CLI, "discover", "--json"};
  local.insert(local.end(), plugin.begin(), plugin.end());
  testing::CommandResult expected = testing::Run(local);
  ASSERT_EQ(expected.exit_code, 0) << expected.err;
  testing::CommandResult via_agent = testing::Run(
      {RAYACCEL_CLI, "discover", "--json", "--agent", "unix:" + socket, "--token-file", token});
  EXPECT_EQ(via_agent.exit_code, 0) << via_agent.err;
  EXPECT_EQ(via_agent.out, expected.out);
  EXPECT_NE(via_agent.out.find("\"GPU\": 8"), std::string::npos);
  EXPECT_EQ(testing::Run({RAYACCEL_CLI, "discover", "--agent", "unix:" + socket}).exit_code, 1)
      << "no token, yet the agent answered";
  EXPECT_EQ(Stop(agent), 0);
  unlink(token.c_str());
  rmdir(dir.c_str());
}

// `rayaccel serve` as a process facing hostile and numerous clients: calls without the token,
// garbage bytes and an oversized request are refused, and 100 watchers then all see a rescan.
TEST(ServeCommand, RefusesHostileClientsAndServesManyWatchers) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/agent.sock", token = dir + "/token";
  const std::string spec = dir + "/spec.json";
  testing::CopyFile(testing::Example("nvl72.json"), spec);
  std::ofstream(token) << "t0ken\n";
  pid_t agent =
      testing::Spawn(RAYACCEL_CLI,
                     {"serve", "--listen", "unix:" + socket, "--token-file", token, "--plugin",
                      kSimPlugin, "--config", "sim.spec=" + spec, "--rescan-interval", "0"},
                     "/dev/null");
  ASSERT_TRUE(WaitForFile(socket));
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = v1::AcceleratorRegistry::NewStub(channel);
  v1::NodeSnapshot s;
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer t0ken-not");
    EXPECT_EQ(stub->GetSnapshot(&context, {}, &s).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer t0ken");
    v1::PrepareAllocationRequest huge;
    huge.add_device_ids(std::string(5 << 20, 'x'));
    v1::PrepareAllocationResponse env;
    EXPECT_EQ(stub->PrepareAllocation(&context, huge, &env).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  for (const std::string& junk : testing::GarbageForGrpc()) {
    ASSERT_TRUE(testing::SendRawBytes(socket, junk));
  }

  constexpr int kWatchers = 100;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::NodeSnapshot>>> readers;
  for (int i = 0; i < kWatchers; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->AddMetadata("authorization", "Bearer t0ken");
    readers.push_back(stub->WatchSnapshots(contexts.back().get(), {}));
  }
  for (auto& r : readers) {
    ASSERT_TRUE(r->Read(&s));
    EXPECT_EQ(s.generation(), 1u);
  }
  testing::ChangeSimSpec(spec);
  kill(agent, SIGHUP);
  int updated = 0;
  for (auto& r : readers) updated += r->Read(&s) && s.generation() == 2 && s.devices_size() == 72;
  EXPECT_EQ(updated, kWatchers);
  EXPECT_EQ(Stop(agent), 0);
  for (auto& r : readers) r->Finish();
  unlink(token.c_str());
  unlink(spec.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace rayaccel::rpc
