// Finding plugin files, refusing unsafe ones, dlopen, version negotiation and the checks on a
// plugin's table. A LoadedPlugin is one initialized plugin instance with its library.
#ifndef RAYACCEL_LOADER_PLUGIN_LOADER_H_
#define RAYACCEL_LOADER_PLUGIN_LOADER_H_

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loader/plugin_handle.h"
#include "rayaccel/plugin.h"

namespace rayaccel {

// The host's ABI version (what this build of librayaccel speaks).
inline constexpr uint32_t kHostAbiMajor = RAYACCEL_ABI_VERSION_MAJOR;
inline constexpr uint32_t kHostAbiMinor = RAYACCEL_ABI_VERSION_MINOR;

// "librayaccel-<name>.so"
std::string PluginFileName(const std::string& name);

// The default search path: RAYACCEL_PLUGIN_PATH entries, then the plugin folder next to the
// running binary and next to librayaccel.
std::vector<std::string> DefaultSearchPath();

// rayaccel-plugin-host next to the running binary, else in ../bin next to librayaccel.
std::string DefaultPluginHost();

struct PluginFile {
  std::string name;  // from the file name; the table's name wins once loaded
  std::string path;
};

// Plugin files to try: each `requested` entry (a path when it contains '/', otherwise a name
// looked up on the path), or every librayaccel-*.so on the path when `requested` is empty.
// A name found in several folders is taken from the first. Missing requested names come back
// with an empty path.
std::vector<PluginFile> FindPluginFiles(const std::vector<std::string>& search_path,
                                        const std::vector<std::string>& requested);

// Refuses a file, or its folder, that someone other than its owner or root can write, and
// files owned by someone other than root or the current user.
absl::Status CheckPermissions(const std::string& path);

// A plugin loaded into this process.
class LoadedPlugin : public PluginHandle {
 public:
  // dlopen (RTLD_NOW | RTLD_LOCAL), entry symbol, negotiation and table checks. Errors say
  // what is wrong with the file; nothing of it stays loaded.
  static absl::StatusOr<std::unique_ptr<LoadedPlugin>> Open(const std::string& path);
  ~LoadedPlugin() override;  // shutdown (when initialized), then dlclose
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;

  absl::Status Initialize(const std::map<std::string, std::string>& config) override;
  absl::StatusOr<PluginProperties> GetProperties() const override;
  absl::Status Query(PluginReport* report) override;
  absl::Status ValidateQuantity(uint32_t quantity) const override;
  absl::StatusOr<EnvList> PrepareAllocation(const std::vector<uint32_t>& indices) const override;
  std::string zero_devices_reason() const override;
  // Log lines the plugin sent with control characters or invalid UTF-8 (shown escaped or
  // replaced; the conformance suite fails such a plugin).
  size_t unclean_log_lines() const { return unclean_log_lines_.load(); }
  absl::Status WaitHealthEvents(uint32_t timeout_ms, PluginReport* report) override;
  absl::Status Telemetry(TelemetryReport* report) override;
  // get_telemetry with the indices samples may name given (the conformance suite's own
  // discover's); Telemetry uses the last Query's.
  absl::Status SampleDevices(const std::set<uint32_t>& reported, TelemetryReport* report) const;

  const std::string& name() const override { return name_; }
  const std::string& path() const { return path_; }
  std::string abi_version() const override;
  uint32_t chosen_minor() const { return chosen_minor_; }  // the negotiated 1.x
  uint64_t capabilities() const override { return api_.capabilities; }
  bool has_prepare_allocation() const override { return api_.prepare_allocation != nullptr; }
  bool has_validate_quantity() const override { return api_.validate_quantity != nullptr; }
  // The plugin's table, copied into a full-size, zero-padded host struct: every hook the
  // plugin's (possibly older) table lacks is NULL here.
  const rayaccel_plugin_api& api() const { return api_; }
  rayaccel_plugin_instance* instance() const { return instance_; }

 private:
  LoadedPlugin() = default;
  void* handle_ = nullptr;
  std::string path_;
  std::string name_;
  rayaccel_plugin_api api_{};
  uint32_t chosen_minor_ = 0;
  rayaccel_plugin_instance* instance_ = nullptr;
  rayaccel_host_api host_api_{};
  mutable std::mutex log_mu_;  // the plugin may log from its own threads
  std::string zero_devices_reason_;
  std::atomic<size_t> unclean_log_lines_{0};
  mutable std::mutex reported_mu_;
  std::set<uint32_t> reported_;  // the indices of the last Query's devices, for Telemetry

  static void HostLog(void* host_context, rayaccel_log_level level, rayaccel_string message);
};

// Calls a plugin hook. A C++ exception must never cross the C ABI; one that does anyway is
// caught here and turned into RAYACCEL_STATUS_INTERNAL with a message in `err`, so that the
// plugin fails and the host carries on.
template <typename Call>
rayaccel_status CallPlugin(struct ErrorBuffer* err, Call&& call) noexcept;

// A status for a non-OK plugin return code, with the plugin's message.
absl::Status FromPluginStatus(rayaccel_status code, const char* message, const std::string& what);

// Holds the buffer behind a rayaccel_error handed to a hook. The plugin is offered one byte
// less than the buffer, whose last byte stays NUL even if the plugin forgets to terminate.
struct ErrorBuffer {
  ErrorBuffer() : error{sizeof(rayaccel_error), text, sizeof(text) - 1} {
    text[0] = '\0';
    text[sizeof(text) - 1] = '\0';
  }
  ErrorBuffer(const ErrorBuffer&) = delete;
  ErrorBuffer& operator=(const ErrorBuffer&) = delete;
  char text[512];
  rayaccel_error error;
};

template <typename Call>
rayaccel_status CallPlugin(ErrorBuffer* err, Call&& call) noexcept {
  try {
    return call(&err->error);
  } catch (const std::exception& e) {
    rayaccel_error_set(&err->error, RAYACCEL_STATUS_INTERNAL,
                       (std::string("a C++ exception escaped the plugin: ") + e.what()).c_str());
  } catch (...) {
    rayaccel_error_set(&err->error, RAYACCEL_STATUS_INTERNAL, "a C++ exception escaped the plugin");
  }
  return RAYACCEL_STATUS_INTERNAL;
}

}  // namespace rayaccel

#endif  // RAYACCEL_LOADER_PLUGIN_LOADER_H_
