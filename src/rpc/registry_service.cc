#include "rpc/registry_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rpc/snapshot_proto.h"
#include "util/log_line.h"

namespace rayaccel::rpc {
namespace {

// Lists in a request are bounded by the message size; this bounds the work per id as well.
constexpr int kMaxRequestIds = 4096;

grpc::Status ToGrpc(const absl::Status& status) {
  // absl's canonical codes are gRPC's, number for number.
  return {static_cast<grpc::StatusCode>(status.code()), std::string(status.message())};
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// A raw method's request, parsed; a malformed one is INVALID_ARGUMENT.
template <typename Message>
grpc::Status Parse(const grpc::ByteBuffer& request, Message* out) {
  grpc::ByteBuffer copy = request;  // Deserialize consumes its buffer
  grpc::Status st = grpc::SerializationTraits<Message>::Deserialize(&copy, out);
  if (!st.ok()) return {grpc::StatusCode::INVALID_ARGUMENT, "malformed request"};
  return grpc::Status::OK;
}

std::vector<std::string> Ids(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  return {ids.begin(), ids.end()};
}

}  // namespace

class RegistryService::Watcher final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Watcher(RegistryService* service, uint64_t after) : service_(service), after_(after) {}

  // Queues `snapshot` when it is newer than anything sent or queued; writes it at once unless
  // a write is in flight, in which case it replaces whatever was queued.
  void Offer(std::shared_ptr<const Wire> snapshot) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t newest = next_ != nullptr ? next_->generation : after_;
    if (finished_ || snapshot->generation <= newest) return;
    next_ = std::move(snapshot);
    if (in_flight_ == nullptr) WriteNextLocked();
  }

  void End(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.reset();
    bytes_.Clear();
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away"));
    } else if (next_ != nullptr) {
      WriteNextLocked();
    }
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    service_->Forget(this);
    delete this;
  }

 private:
  void WriteNextLocked() {
    if (finished_) return;
    in_flight_ = std::move(next_);
    after_ = in_flight_->generation;
    bytes_ = in_flight_->bytes;  // shares the slices: no copy of the snapshot per watcher
    StartWrite(&bytes_);
  }

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    next_.reset();
    Finish(status);
  }

  RegistryService* service_;
  std::mutex mu_;
  uint64_t after_;  // the newest generation written
  std::shared_ptr<const Wire> in_flight_, next_;
  grpc::ByteBuffer bytes_;  // what is being written, alive until OnWriteDone
  bool finished_ = false;
};

RegistryService::RegistryService(Registry* registry, Options options)
    : registry_(registry), options_(options) {
  Latest();
  feed_ = std::thread([this] { Feed(); });
}

RegistryService::~RegistryService() {
  stopping_ = true;
  feed_.join();
}

grpc::Status RegistryService::Authorize(const grpc::CallbackServerContext& context) const {
  return options_.token == nullptr ? grpc::Status::OK : options_.token->Check(context);
}

std::shared_ptr<const RegistryService::Wire> RegistryService::Latest() {
  std::shared_ptr<const NodeSnapshot> snapshot = registry_->snapshot();
  std::lock_guard<std::mutex> lock(latest_mu_);
  if (latest_ == nullptr || latest_->generation < snapshot->generation) {
    auto wire = std::make_shared<Wire>();
    wire->generation = snapshot->generation;
    wire->proto = ToProto(*snapshot);
    bool own_buffer = false;
    grpc::SerializationTraits<v1::NodeSnapshot>::Serialize(wire->proto, &wire->bytes, &own_buffer);
    latest_ = std::move(wire);
  }
  return latest_;
}

void RegistryService::Feed() {
  uint64_t sent = Latest()->generation;
  while (!stopping_) {
    // Bounded, so that stopping is noticed; a new generation wakes this at once.
    if (registry_->WaitForNewer(sent, std::chrono::milliseconds(200))->generation <= sent) {
      continue;
    }
    std::shared_ptr<const Wire> latest = Latest();
    sent = latest->generation;
    std::lock_guard<std::mutex> lock(watchers_mu_);
    for (Watcher* w : watchers_) w->Offer(latest);
  }
}

void RegistryService::Forget(Watcher* watcher) {
  std::lock_guard<std::mutex> lock(watchers_mu_);
  watchers_.erase(watcher);
}

void RegistryService::EndWatches() {
  std::lock_guard<std::mutex> lock(watchers_mu_);
  ending_ = true;
  for (Watcher* w : watchers_) {
    w->End({grpc::StatusCode::UNAVAILABLE, "the agent is stopping"});
  }
}

size_t RegistryService::watcher_count() const {
  std::lock_guard<std::mutex> lock(watchers_mu_);
  return watchers_.size();
}

grpc::ServerUnaryReactor* RegistryService::GetSnapshot(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  if (grpc::Status st = Authorize(*context); !st.ok()) return Done(context, st);
  v1::GetSnapshotRequest parsed;
  if (grpc::Status st = Parse(*request, &parsed); !st.ok()) return Done(context, st);
  *response = Latest()->bytes;
  return Done(context, grpc::Status::OK);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RegistryService::WatchSnapshots(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  v1::WatchSnapshotsRequest parsed;
  grpc::Status st = Parse(*request, &parsed);
  auto* watcher = new Watcher(this, parsed.after_generation());
  if (st.ok()) st = Authorize(*context);
  if (!st.ok()) {
    watcher->End(st);
    return watcher;
  }
  std::lock_guard<std::mutex> lock(watchers_mu_);
  if (ending_) {
    watcher->End({grpc::StatusCode::UNAVAILABLE, "the agent is stopping"});
    return watcher;
  }
  if (watchers_.size() >= options_.max_watchers) {
    LogAt(LogLevel::kWarning, "serve: refusing a watcher: {} are connected", watchers_.size());
    watcher->End({grpc::StatusCode::RESOURCE_EXHAUSTED,
                  absl::StrCat("too many watchers (", options_.max_watchers, ")")});
    return watcher;
  }
  watchers_.insert(watcher);
  watcher->Offer(Latest());  // under watchers_mu_: no generation the feed sends is missed
  return watcher;
}

grpc::ServerUnaryReactor* RegistryService::PreferredAllocation(
    grpc::CallbackServerContext* context, const v1::PreferredAllocationRequest* request,
    v1::PreferredAllocationResponse* response) {
  if (grpc::Status st = Authorize(*context); !st.ok()) return Done(context, st);
  if (request->count() == 0 || request->count() > kMaxRequestIds ||
      request->must_include_size() > kMaxRequestIds || request->available_size() > kMaxRequestIds) {
    return Done(context, {grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("count must be 1 to ", kMaxRequestIds,
                                       ", and the lists at most that long")});
  }
  absl::StatusOr<Allocation> chosen =
      registry_->PreferredAllocation(Ids(request->available()), Ids(request->must_include()),
                                     request->count(), request->resource());
  if (!chosen.ok()) return Done(context, ToGrpc(chosen.status()));
  response->set_generation(chosen->generation);
  for (const std::string& id : chosen->device_ids) response->add_device_ids(id);
  response->set_reason(chosen->reason);
  response->set_score(chosen->link_score);
  response->set_leftover_score(chosen->leftover_score);
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RegistryService::PrepareAllocation(
    grpc::CallbackServerContext* context, const v1::PrepareAllocationRequest* request,
    v1::PrepareAllocationResponse* response) {
  if (grpc::Status st = Authorize(*context); !st.ok()) return Done(context, st);
  if (request->device_ids_size() > kMaxRequestIds) {
    return Done(context, {grpc::StatusCode::INVALID_ARGUMENT, "too many device ids"});
  }
  absl::StatusOr<std::map<std::string, std::string>> env =
      registry_->PrepareAllocation(Ids(request->device_ids()), request->generation());
  if (!env.ok()) return Done(context, ToGrpc(env.status()));
  response->mutable_env()->insert(env->begin(), env->end());
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RegistryService::GetPluginStatus(
    grpc::CallbackServerContext* context, const v1::GetPluginStatusRequest* request,
    v1::GetPluginStatusResponse* response) {
  if (grpc::Status st = Authorize(*context); !st.ok()) return Done(context, st);
  std::shared_ptr<const Wire> latest = Latest();
  for (const v1::PluginStatus& p : latest->proto.plugins()) {
    if (request->name().empty() || p.name() == request->name()) *response->add_plugins() = p;
  }
  if (!request->name().empty() && response->plugins_size() == 0) {
    return Done(context,
                {grpc::StatusCode::NOT_FOUND, absl::StrCat("no plugin named ", request->name())});
  }
  return Done(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RegistryService::GetTelemetry(grpc::CallbackServerContext* context,
                                                        const v1::GetTelemetryRequest* /*request*/,
                                                        v1::Telemetry* response) {
  if (grpc::Status st = Authorize(*context); !st.ok()) return Done(context, st);
  std::lock_guard<std::mutex> lock(telemetry_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (telemetry_.unix_ms() == 0 || now - telemetry_at_ >= std::chrono::seconds(1)) {
    telemetry_ = ToProto(registry_->SampleTelemetry());
    telemetry_at_ = std::chrono::steady_clock::now();
  }
  *response = telemetry_;
  return Done(context, grpc::Status::OK);
}

}  // namespace rayaccel::rpc
