// The agent's AcceleratorRegistry service (proto/rayaccel/v1/agent.proto) over a Registry,
// on gRPC's callback API: no thread per call, so a hundred watchers cost a hundred small
// reactors, not a hundred threads.
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

class RegistryService final : public v1::AcceleratorRegistry::CallbackService {
 public:
  struct Options {
    const BearerToken* token = nullptr;  // required on every call when set; must outlive this
    size_t max_watchers = 1024;          // more WatchSnapshots streams get RESOURCE_EXHAUSTED
  };

  // `registry` must outlive the service; the server that runs it must be shut down first.
  RegistryService(Registry* registry, Options options);
  ~RegistryService() override;

  grpc::ServerUnaryReactor* GetSnapshot(grpc::CallbackServerContext* context,
                                        const v1::GetSnapshotRequest* request,
                                        v1::NodeSnapshot* response) override;
  // The current snapshot at once (when newer than after_generation), then each newer one.
  // Each watcher has at most one write in flight; a watcher that reads slowly is sent the
  // newest snapshot when its write completes, skipping those in between, and holds up no one.
  grpc::ServerWriteReactor<v1::NodeSnapshot>* WatchSnapshots(
      grpc::CallbackServerContext* context, const v1::WatchSnapshotsRequest* request) override;
  grpc::ServerUnaryReactor* PreferredAllocation(grpc::CallbackServerContext* context,
                                                const v1::PreferredAllocationRequest* request,
                                                v1::PreferredAllocationResponse* response) override;
  grpc::ServerUnaryReactor* PrepareAllocation(grpc::CallbackServerContext* context,
                                              const v1::PrepareAllocationRequest* request,
                                              v1::PrepareAllocationResponse* response) override;
  grpc::ServerUnaryReactor* GetPluginStatus(grpc::CallbackServerContext* context,
                                            const v1::GetPluginStatusRequest* request,
                                            v1::GetPluginStatusResponse* response) override;

  // Ends every watch stream with UNAVAILABLE ("the agent is stopping") and refuses new ones,
  // so that a draining server need not wait for watchers to go away by themselves.
  void EndWatches();

  size_t watcher_count() const;

 private:
  class Watcher;

  grpc::Status Authorize(const grpc::CallbackServerContext& context) const;
  // The registry's current snapshot in wire form, converted once per generation and shared.
  std::shared_ptr<const v1::NodeSnapshot> Latest();
  void Feed();  // hands each new generation to every watcher
  void Forget(Watcher* watcher);

  Registry* registry_;
  Options options_;
  std::mutex latest_mu_;
  std::shared_ptr<const v1::NodeSnapshot> latest_;
  mutable std::mutex watchers_mu_;  // taken before any Watcher's own lock
  std::set<Watcher*> watchers_;
  bool ending_ = false;  // guarded by watchers_mu_
  std::atomic<bool> stopping_{false};
  std::thread feed_;
};

}  // namespace rayaccel::rpc

#endif  // RAYACCEL_RPC_REGISTRY_SERVICE_H_
