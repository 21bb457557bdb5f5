// The agent's AcceleratorRegistry service (proto/rayaccel/v1/agent.proto) over a Registry,
// on gRPC's callback API: no thread per call, so a hundred watchers cost a hundred small
// reactors, not a hundred threads. Snapshots are serialised once per generation and the same
// reference-counted bytes go to every caller and watcher (the two methods are "raw").
#ifndef RAYACCEL_RPC_REGISTRY_SERVICE_H_
#define RAYACCEL_RPC_REGISTRY_SERVICE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "rayaccel/registry.h"
#include "rayaccel/v1/agent.grpc.pb.h"
#include "rpc/server.h"

namespace rayaccel::rpc {

namespace internal {
using R = v1::AcceleratorRegistry;
using RegistryServiceBase = R::WithRawCallbackMethod_GetSnapshot<
    R::WithRawCallbackMethod_WatchSnapshots<R::WithCallbackMethod_PreferredAllocation<
        R::WithCallbackMethod_PrepareAllocation<R::WithCallbackMethod_GetPluginStatus<
            R::WithCallbackMethod_GetTelemetry<R::Service>>>>>>;
}  // namespace internal

class RegistryService final : public internal::RegistryServiceBase {
 public:
  struct Options {
    const BearerToken* token = nullptr;  // required on every call when set; must outlive this
    size_t max_watchers = 1024;          // more WatchSnapshots streams get RESOURCE_EXHAUSTED
  };

  // `registry` must outlive the service; the server that runs it must be shut down first.
  RegistryService(Registry* registry, Options options);
  ~RegistryService() override;

  // GetSnapshotRequest in, NodeSnapshot out.
  grpc::ServerUnaryReactor* GetSnapshot(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // WatchSnapshotsRequest in; the current snapshot at once (when newer than after_generation),
  // then each newer one. Each watcher has at most one write in flight; a watcher that reads
  // slowly is sent the newest snapshot when its write completes, skipping those in between,
  // and holds up no one.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchSnapshots(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* PreferredAllocation(grpc::CallbackServerContext* context,
                                                const v1::PreferredAllocationRequest* request,
                                                v1::PreferredAllocationResponse* response) override;
  grpc::ServerUnaryReactor* PrepareAllocation(grpc::CallbackServerContext* context,
                                              const v1::PrepareAllocationRequest* request,
                                              v1::PrepareAllocationResponse* response) override;
  grpc::ServerUnaryReactor* GetPluginStatus(grpc::CallbackServerContext* context,
                                            const v1::GetPluginStatusRequest* request,
                                            v1::GetPluginStatusResponse* response) override;
  // The registry's telemetry, sampled at most once a second (callers in between share it; one
  // sample at a time, so a flood of callers costs the plugins nothing more).
  grpc::ServerUnaryReactor* GetTelemetry(grpc::CallbackServerContext* context,
                                         const v1::GetTelemetryRequest* request,
                                         v1::Telemetry* response) override;

  // Ends every watch stream with UNAVAILABLE ("the agent is stopping") and refuses new ones,
  // so that a draining server need not wait for watchers to go away by themselves.
  void EndWatches();

  // WatchSnapshots streams open now.
  size_t watchers() const {
    std::lock_guard<std::mutex> lock(watchers_mu_);
    return watchers_.size();
  }

  size_t watcher_count() const;

 private:
  class Watcher;
  // One generation in wire form, built once and shared by every reply and watcher.
  struct Wire {
    uint64_t generation = 0;
    v1::NodeSnapshot proto;
    grpc::ByteBuffer bytes;  // proto, serialised; copies share its slices
  };

  grpc::Status Authorize(const grpc::CallbackServerContext& context) const;
  // The registry's current snapshot in wire form.
  std::shared_ptr<const Wire> Latest();
  void Feed();  // hands each new generation to every watcher
  void Forget(Watcher* watcher);

  Registry* registry_;
  Options options_;
  std::mutex telemetry_mu_;  // one sample at a time
  std::chrono::steady_clock::time_point telemetry_at_;
  v1::Telemetry telemetry_;  // the last sample, guarded by telemetry_mu_
  std::mutex latest_mu_;
  std::shared_ptr<const Wire> latest_;
  mutable std::mutex watchers_mu_;  // taken before any Watcher's own lock
  std::set<Watcher*> watchers_;
  bool ending_ = false;  // guarded by watchers_mu_
  std::atomic<bool> stopping_{false};
  std::thread feed_;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_REGISTRY_SERVICE_H_
