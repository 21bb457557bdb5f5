// A plugin hosted in a child process (rayaccel-plugin-host), for isolation: a crash, abort,
// hang (per-call timeout) or runaway memory use in vendor code ends that child only, and the
// call that was running reports the cause.
#ifndef RAYACCEL_ISOLATION_REMOTE_PLUGIN_H_
#define RAYACCEL_ISOLATION_REMOTE_PLUGIN_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "isolation/wire.h"
#include "loader/plugin_handle.h"
#include "util/json.h"

namespace rayaccel::isolation {

struct RemoteOptions {
  std::string host_binary;  // rayaccel-plugin-host
  std::chrono::milliseconds call_timeout{10000};
  uint64_t memory_limit_bytes = uint64_t{4} << 30;  // the child's RLIMIT_DATA; 0: no limit
  // RegistryOptions::spawn_child: the embedder's wrapper around starting a host, or none.
  std::function<pid_t(const std::function<pid_t()>& spawn)> spawn_child;
};

class RemotePlugin : public PluginHandle {
 public:
  // Starts the host process and opens the plugin in it (dlopen, negotiation, table checks).
  static absl::StatusOr<std::unique_ptr<RemotePlugin>> Open(const std::string& path,
                                                            const RemoteOptions& options);
  ~RemotePlugin() override;  // asks the host to shut down; kills it if it does not

  const std::string& name() const override { return name_; }
  std::string abi_version() const override { return abi_version_; }
  uint64_t capabilities() const override { return capabilities_; }
  bool has_prepare_allocation() const override { return has_prepare_allocation_; }
  bool has_validate_quantity() const override { return has_validate_quantity_; }

  absl::Status Initialize(const std::map<std::string, std::string>& config) override;
  absl::StatusOr<PluginProperties> GetProperties() const override;
  absl::Status Query(PluginReport* report) override;
  absl::Status QueryShared(std::shared_ptr<const PluginReport>* report) override;
  absl::Status ValidateQuantity(uint32_t quantity) const override;
  absl::StatusOr<EnvList> PrepareAllocation(const std::vector<uint32_t>& indices) const override;
  std::string zero_devices_reason() const override { return zero_devices_reason_; }
  // The health watch's thread calls this while others may query: the host watches on a thread
  // and socket of its own, so neither waits for the other.
  absl::Status WaitHealthEvents(uint32_t timeout_ms, PluginReport* report) override;
  absl::Status Telemetry(TelemetryReport* report) override;

  // The host's pid and its answer id: the host itself said whether the answer changed.
  void AppendAnswerKey(const PluginReport& report, std::string* key) const override;

  // False once the host process died or was killed; every call then fails.
  bool alive() const override { return pid_.load() > 0; }

 private:
  RemotePlugin() = default;
  // Sends one request and waits for its JSON answer; a dead, silent or confused host is
  // killed, reaped and described ("crashed with signal 11 (Segmentation fault) during query").
  // `timeout` 0: the call timeout of the options.
  absl::StatusOr<json::Value> Call(const std::string& request, const char* what,
                                   std::chrono::milliseconds timeout = {}) const;
  // The same for the calls answered with a report (report_codec.h); `frame` keeps the bytes the
  // reply points into. Caller holds call_mu_.
  absl::StatusOr<ReportReply> CallForReport(const std::string& request, const char* what,
                                            std::string* frame) const;
  // One request and its reply frame. Caller holds call_mu_.
  absl::StatusOr<std::string> Exchange(const std::string& request, size_t max_reply,
                                       std::chrono::milliseconds timeout) const;
  static absl::StatusOr<json::Value> ParseJson(const std::string& frame);
  // Kills and reaps the host after `cause`, and says why in the terms of `what`.
  absl::Status Fail(absl::Status cause, const char* what) const;

  RemoteOptions options_;
  mutable std::mutex call_mu_;  // one request on the channel at a time
  mutable std::atomic<pid_t> pid_{-1};
  int pidfd_ = -1;     // signals reach this host only, even once its pid could be reused
  int crash_fd_ = -1;  // the host's last words: the fatal signal it caught (plugin_host_main.cc)
  mutable int fd_ = -1;
  int health_fd_ = -1;  // health events from the host's watch thread
  std::atomic<bool> watching_{false};
  static constexpr std::chrono::milliseconds kShutdownTimeout{1000};
  std::string name_;
  std::string abi_version_;
  uint64_t capabilities_ = 0;
  bool has_prepare_allocation_ = false;
  bool has_validate_quantity_ = true;  // a host that does not say: ask it
  std::string zero_devices_reason_;
  // The last report the host sent in full, by its id: what an "unchanged" answer means.
  std::shared_ptr<const PluginReport> answer_;
  uint64_t answer_id_ = 0;
};

}  // namespace rayaccel::isolation

#endif  // RAYACCEL_ISOLATION_REMOTE_PLUGIN_H_
