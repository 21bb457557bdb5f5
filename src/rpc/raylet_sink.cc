#include "rpc/raylet_sink.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/validate.h"
#include "util/log_line.h"

namespace rayaccel::rpc {
namespace {

// An agent session is the agent's own random token: short printable text, checked before it
// is logged or kept.
bool IsSession(const std::string& s) {
  return !s.empty() && s.size() <= 128 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 0x7F; });
}

// Counts a stream while it is open.
class OpenStream {
 public:
  explicit OpenStream(std::atomic<uint64_t>* open) : open_(open) { open_->fetch_add(1); }
  ~OpenStream() { open_->fetch_sub(1); }
  OpenStream(const OpenStream&) = delete;
  OpenStream& operator=(const OpenStream&) = delete;

 private:
  std::atomic<uint64_t>* open_;
};

}  // namespace

// The reason may quote what the peer sent: the log line gets it escaped.
grpc::Status RayletSink::Refuse(const std::string& peer, const std::string& why) {
  refusals_.fetch_add(1);
  LogAt(LogLevel::kWarning, "sink: refused {}: {}", EscapeControl(peer), EscapeControl(why));
  return {grpc::StatusCode::INVALID_ARGUMENT, why};
}

grpc::Status RayletSink::Publish(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::PublishAck, v1::PublishRequest>* stream) {
  const std::string peer = context->peer();
  OpenStream counted(&streams_open_);
  if (token_ != nullptr) {
    if (grpc::Status st = token_->Check(*context); !st.ok()) {
      refusals_.fetch_add(1);
      LogAt(LogLevel::kWarning, "sink: refused {}: {}", peer, st.error_message());
      return st;
    }
  }
  v1::PublishRequest request;
  if (!stream->Read(&request)) return grpc::Status::OK;  // closed before saying anything
  if (request.kind_case() != v1::PublishRequest::kHello) {
    return Refuse(peer, "the first message must be hello");
  }
  const v1::Hello hello = request.hello();
  if (!IsSession(hello.agent_session())) {
    return Refuse(peer, "hello without a well-formed agent session (1-128 printable bytes)");
  }
  std::string node_id = hello.node_id();
  if (node_id.empty()) {
    if (own_node_id_.empty()) {
      return Refuse(peer,
                    "hello without a node id: this sink serves many nodes and is none of "
                    "them, so the agent must name its node (--node-id)");
    }
    node_id = own_node_id_;
  } else if (absl::Status st = CheckNodeId(node_id); !st.ok()) {
    return Refuse(peer, std::string(st.message()));
  } else if (!own_node_id_.empty() && node_id != own_node_id_) {
    return Refuse(peer, absl::StrCat("the agent says it is node ", node_id, "; this sink is node ",
                                     own_node_id_));
  }
  streams_accepted_.fetch_add(1);
  LogAt(LogLevel::kInfo, "sink: node {} agent session {} connected from {}", node_id,
        hello.agent_session(), peer);
  if (hello.node_id().empty()) {  // the agent learns which node it is
    v1::PublishAck named;
    named.set_node_id(node_id);
    if (!stream->Write(named)) return grpc::Status::OK;
  }

  while (stream->Read(&request)) {
    if (request.kind_case() == v1::PublishRequest::kTelemetry) {
      if (absl::Status st =
              state_.ApplyTelemetry(node_id, hello.agent_session(), request.telemetry());
          !st.ok()) {
        return Refuse(peer, absl::StrCat("telemetry: ", st.message()));
      }
      continue;  // not acknowledged
    }
    if (request.kind_case() != v1::PublishRequest::kSnapshot) {
      return Refuse(peer, "after hello, only snapshots and telemetry");
    }
    absl::StatusOr<SinkState::Applied> applied =
        state_.Apply(node_id, hello.agent_session(), request.snapshot());
    if (!applied.ok()) {
      return Refuse(peer, absl::StrCat("snapshot ", request.snapshot().generation(), ": ",
                                       applied.status().message()));
    }
    if (applied->applied && listener_ != nullptr) {
      const v1::NodeSnapshot& s = request.snapshot();
      listener_->OnNodeResources(
          node_id,
          std::map<std::string, double>(s.resources_total().begin(), s.resources_total().end()),
          std::map<std::string, std::string>(s.labels().begin(), s.labels().end()), s);
    }
    v1::PublishAck ack;
    ack.set_applied_generation(applied->generation);
    ack.set_stale(!applied->applied);
    ack.set_takes_telemetry(true);
    if (!stream->Write(ack)) break;  // the agent went away; it republishes on reconnect
  }
  return grpc::Status::OK;
}

}  // namespace rayaccel::rpc
