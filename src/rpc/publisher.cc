#include "rpc/publisher.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_format.h"
#include "model/validate.h"
#include "rayaccel/v1/sink.grpc.pb.h"
#include "rpc/sink_state.h"
#include "rpc/snapshot_proto.h"
#include "util/log_line.h"

namespace rayaccel::rpc {
namespace {

// How long one wait for a newer snapshot lasts before the stop flag is looked at again.
constexpr std::chrono::milliseconds kPoll{200};

std::string RandomSession() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

}  // namespace

Publisher::Publisher(PublisherOptions options, Registry* registry)
    : options_(std::move(options)), registry_(registry), node_id_(options_.node_id) {
  if (options_.session.empty()) options_.session = RandomSession();
  thread_ = std::thread([this] { Run(); });
}

std::string Publisher::node_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_id_;
}

Publisher::~Publisher() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
}

void Publisher::Run() {
  std::mt19937_64 rng(std::random_device{}());
  std::chrono::milliseconds backoff = options_.min_backoff;
  while (!stop_) {
    uint64_t acked_before = acked_.load();
    auto started = std::chrono::steady_clock::now();
    PublishOnce();
    if (stop_) break;
    // A connection that got an ack resets the backoff; one that failed at once grows it.
    if (acked_.load() != acked_before ||
        std::chrono::steady_clock::now() - started > options_.max_backoff) {
      backoff = options_.min_backoff;
    }
    std::uniform_int_distribution<int64_t> jitter(backoff.count() / 2, backoff.count());
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(jitter(rng));
    while (!stop_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::min(kPoll, options_.min_backoff));
    }
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void Publisher::PublishOnce() {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options_.tls_root_certs.empty()
          ? grpc::InsecureChannelCredentials()
          : grpc::SslCredentials(grpc::SslCredentialsOptions{options_.tls_root_certs, "", ""});
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(options_.target, credentials);
  auto stub = v1::RayletAcceleratorSink::NewStub(channel);
  grpc::ClientContext context;
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    context_ = &context;
  }
  auto stream = stub->Publish(&context);
  ++connects_;
  v1::PublishRequest hello;
  hello.mutable_hello()->set_node_id(options_.node_id);
  hello.mutable_hello()->set_agent_session(options_.session);
  bool ok = stream->Write(hello);
  if (ok && options_.node_id.empty()) {
    // Asked the sink which node this is: the answer to the hello says.
    v1::PublishAck named;
    ok = stream->Read(&named);
    if (ok && !CheckNodeId(named.node_id()).ok()) {
      LogAt(LogLevel::kWarning,
            "publisher: the sink at {} did not name this node (answered \"{}\")", options_.target,
            EscapeControl(named.node_id().substr(0, 64)));
      ok = false;
      context.TryCancel();
    }
    if (ok) {
      std::lock_guard<std::mutex> lock(mu_);
      if (node_id_ != named.node_id()) {
        LogAt(LogLevel::kInfo, "publisher: the sink names this node {}", named.node_id());
        node_id_ = named.node_id();
      }
    }
  }

  // The full current snapshot first (a restarted sink learns everything), then each newer one.
  std::shared_ptr<const NodeSnapshot> snap = registry_->snapshot();
  while (ok && !stop_) {
    v1::PublishRequest request;
    *request.mutable_snapshot() = ToProto(*snap);
    v1::PublishAck ack;
    ok = stream->Write(request) && stream->Read(&ack);
    if (!ok) break;
    acked_ = ack.applied_generation();
    ++acks_;
    LogAt(LogLevel::kDebug, "publisher: sink holds generation {}{}", ack.applied_generation(),
          ack.stale() ? " (ours was stale)" : "");
    // Idle until a newer snapshot, or until the heartbeat is due: the current snapshot is sent
    // again (the sink acks it as stale), because only a write reliably shows that a sink
    // process went away. A GOAWAY shows sooner, in the channel's state.
    uint64_t sent = snap->generation;
    const bool telemetry = options_.telemetry && ack.takes_telemetry();
    auto heartbeat_at = std::chrono::steady_clock::now() + options_.heartbeat;
    while (ok && !stop_ && snap->generation <= sent &&
           std::chrono::steady_clock::now() < heartbeat_at) {
      ok = channel->GetState(false) == GRPC_CHANNEL_READY;
      if (ok && telemetry) {
        Telemetry sample = options_.telemetry();
        if (sample.unix_ms > telemetry_sent_) {
          v1::PublishRequest t;
          *t.mutable_telemetry() = ToProto(sample);
          ok = stream->Write(t);
          telemetry_sent_ = sample.unix_ms;
        }
      }
      if (ok) snap = registry_->WaitForNewer(sent, kPoll);
    }
  }
  if (ok) stream->WritesDone();  // stopping: end the stream cleanly
  grpc::Status status = stream->Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    context_ = nullptr;
  }
  if (!stop_) {
    ++failures_;
    LogAt(LogLevel::kWarning, "publisher: stream to {} ended: {} {}", options_.target,
          static_cast<int>(status.error_code()), status.error_message());
  }
}

}  // namespace rayaccel::rpc
