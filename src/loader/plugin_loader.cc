#include "loader/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loader/collector.h"
#include "loader/elf_file.h"
#include "loader/transport_table.h"
#include "model/validate.h"
#include "spdlog/spdlog.h"
#include "util/installed_program.h"
#include "util/log.h"

namespace rayaccel {
namespace {

constexpr char kPrefix[] = "librayaccel-";
constexpr char kSuffix[] = ".so";

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The table's plugin name: [a-z0-9_-]{1,32}.
bool IsPluginName(absl::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

}  // namespace

std::string PluginFileName(const std::string& name) { return kPrefix + name + kSuffix; }

std::vector<std::string> DefaultSearchPath() {
  std::vector<std::string> path;
  if (const char* env = std::getenv("RAYACCEL_PLUGIN_PATH"); env != nullptr) {
    for (absl::string_view dir : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      path.emplace_back(dir);
    }
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    path.push_back(Dirname(Dirname(exe)) + "/lib/rayaccel/plugins");
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&DefaultSearchPath), &info) != 0 &&
      info.dli_fname != nullptr) {
    char real[PATH_MAX];
    if (realpath(info.dli_fname, real) != nullptr) {
      path.push_back(Dirname(real) + "/rayaccel/plugins");
    }
  }
  // Drop repeats, keeping the first.
  std::vector<std::string> unique;
  for (const std::string& dir : path) {
    char real[PATH_MAX];
    std::string key = realpath(dir.c_str(), real) != nullptr ? std::string(real) : dir;
    if (std::find(unique.begin(), unique.end(), key) == unique.end()) unique.push_back(key);
  }
  return unique;
}

std::string DefaultPluginHost() { return InstalledProgram("rayaccel-plugin-host"); }

std::vector<PluginFile> FindPluginFiles(const std::vector<std::string>& search_path,
                                        const std::vector<std::string>& requested) {
  std::vector<PluginFile> files;
  if (!requested.empty()) {
    for (const std::string& want : requested) {
      if (want.find('/') != std::string::npos) {
        std::string base = want.substr(want.rfind('/') + 1);
        std::string name = base;
        if (absl::StartsWith(name, kPrefix)) name = name.substr(sizeof(kPrefix) - 1);
        if (absl::EndsWith(name, kSuffix)) name.resize(name.size() - (sizeof(kSuffix) - 1));
        files.push_back({name, want});
        continue;
      }
      PluginFile file{want, ""};
      for (const std::string& dir : search_path) {
        std::string candidate = dir + "/" + PluginFileName(want);
        if (IsFile(candidate)) {
          file.path = candidate;
          break;
        }
      }
      files.push_back(file);
    }
    return files;
  }
  std::set<std::string> seen;
  for (const std::string& dir : search_path) {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> names;
    while (struct dirent* entry = readdir(d)) {
      std::string base = entry->d_name;
      if (absl::StartsWith(base, kPrefix) && absl::EndsWith(base, kSuffix) &&
          base.size() > sizeof(kPrefix) - 1 + sizeof(kSuffix) - 1) {
        names.push_back(base);
      }
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& base : names) {
      std::string name = base.substr(sizeof(kPrefix) - 1,
                                     base.size() - (sizeof(kPrefix) - 1) - (sizeof(kSuffix) - 1));
      if (!seen.insert(name).second) continue;
      std::string path = dir + "/" + base;
      if (IsFile(path)) files.push_back({name, path});
    }
  }
  return files;
}

namespace {

// Owned by root or this user, and writable by no one else: what a folder or file that decides
// which code this process runs must be.
absl::Status CheckOwnerAndMode(const std::string& p, const struct stat& st, uid_t me) {
  if (st.st_uid != 0 && st.st_uid != me) {
    return absl::PermissionDeniedError(
        absl::StrCat(p, " is owned by uid ", st.st_uid, ", neither root nor this user"));
  }
  bool group_writable = (st.st_mode & S_IWGRP) != 0 && st.st_gid != 0;
  if ((st.st_mode & S_IWOTH) != 0 || group_writable) {
    return absl::PermissionDeniedError(absl::StrCat(
        p, " is writable by ", (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group", " (mode ",
        absl::StrFormat("%04o", st.st_mode & 07777),
        "); a plugin runs with this process's rights, so it must be writable only by its "
        "owner or root"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPermissions(const std::string& path) {
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  const uid_t me = geteuid();
  // The file, its folder, and the folder of the name we were given (a symlink's folder).
  for (const std::string& p : {std::string(real), Dirname(real), Dirname(path)}) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(p, ": ", std::strerror(errno)));
    }
    if (absl::Status ok = CheckOwnerAndMode(p, st, me); !ok.ok()) return ok;
  }
  // The folders its RUNPATH/RPATH names: the dynamic loader takes libraries from them before
  // the system's, so whoever can write one can run code in this process. A folder that does
  // not exist is judged by its nearest existing parent (whoever can write that can create
  // it). A file that is not ELF is left to dlopen to refuse.
  absl::StatusOr<std::vector<std::string>> search = LibrarySearchPath(real);
  if (!search.ok()) return absl::OkStatus();
  for (const std::string& dir : *search) {
    if (dir.empty() || dir[0] != '/') {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " asks the loader to search \"", EscapeControl(dir),
                       "\", relative to whatever the working directory is (RUNPATH/RPATH)"));
    }
    std::string p = dir;
    struct stat st;
    while (stat(p.c_str(), &st) != 0 && p != "/") p = Dirname(p);
    if (absl::Status ok = CheckOwnerAndMode(p, st, me); !ok.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(path, " loads libraries from ",
                                                      EscapeControl(dir),
                                                      " (its RUNPATH/RPATH): ", ok.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status FromPluginStatus(rayaccel_status code, const char* message, const std::string& what) {
  std::string text =
      (message != nullptr && message[0] != '\0' && IsValidUtf8(absl::string_view(message)))
          ? EscapeControl(message)
          : std::string("(no message)");
  std::string full = absl::StrCat(what, ": ", text);
  switch (code) {
    case RAYACCEL_STATUS_OK:
      return absl::OkStatus();
    case RAYACCEL_STATUS_INVALID_ARGUMENT:
      return absl::InvalidArgumentError(full);
    case RAYACCEL_STATUS_NOT_FOUND:
      return absl::NotFoundError(full);
    case RAYACCEL_STATUS_UNSUPPORTED:
      return absl::UnimplementedError(full);
    case RAYACCEL_STATUS_UNAVAILABLE:
      return absl::UnavailableError(full);
    case RAYACCEL_STATUS_FAILED_PRECONDITION:
      return absl::FailedPreconditionError(full);
    case RAYACCEL_STATUS_RESOURCE_EXHAUSTED:
      return absl::ResourceExhaustedError(full);
    case RAYACCEL_STATUS_TIMEOUT:
      return absl::DeadlineExceededError(full);
    case RAYACCEL_STATUS_ABORTED:
      return absl::AbortedError(full);
    default:
      return absl::InternalError(full);
  }
}

absl::StatusOr<std::unique_ptr<LoadedPlugin>> LoadedPlugin::Open(const std::string& path) {
  std::unique_ptr<LoadedPlugin> plugin(new LoadedPlugin());
  plugin->path_ = path;
  dlerror();
  // Load the resolved path that CheckPermissions examined, not a symlink that could be
  // swapped in between.
  char real[PATH_MAX];
  const char* load = realpath(path.c_str(), real) != nullptr ? real : path.c_str();
  plugin->handle_ = dlopen(load, RTLD_NOW | RTLD_LOCAL);
  if (plugin->handle_ == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("dlopen failed: ", err != nullptr ? err : "unknown error"));
  }
  auto entry = reinterpret_cast<rayaccel_plugin_entry_fn>(
      dlsym(plugin->handle_, RAYACCEL_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no entry symbol '", RAYACCEL_PLUGIN_ENTRY_SYMBOL, "': not a rayaccel plugin"));
  }

  rayaccel_negotiation negotiation{};
  negotiation.struct_size = sizeof(negotiation);
  negotiation.host_abi_major = kHostAbiMajor;
  negotiation.host_abi_minor = kHostAbiMinor;
  ErrorBuffer err;
  rayaccel_status rc = CallPlugin(&err, [&](rayaccel_error* e) { return entry(&negotiation, e); });
  if (rc != RAYACCEL_STATUS_OK) {
    return FromPluginStatus(rc, err.text, "negotiation refused by the plugin");
  }
  if (negotiation.chosen_abi_major != kHostAbiMajor) {
    return absl::FailedPreconditionError(
        absl::StrCat("incompatible ABI: plugin speaks ", negotiation.chosen_abi_major, ".",
                     negotiation.chosen_abi_minor, ", host speaks ", kHostAbiMajor, ".",
                     kHostAbiMinor, " (major versions must match)"));
  }
  if (negotiation.chosen_abi_minor > kHostAbiMinor) {
    return absl::FailedPreconditionError(absl::StrCat("plugin chose ABI 1.",
                                                      negotiation.chosen_abi_minor,
                                                      ", newer than the host's 1.", kHostAbiMinor));
  }
  const rayaccel_plugin_api* api = negotiation.api;
  if (api == nullptr) return absl::FailedPreconditionError("negotiation returned no table");
  constexpr size_t kMinTable = RAYACCEL_STRUCT_SIZE(rayaccel_plugin_api, discover);
  if (api->struct_size < kMinTable) {
    return absl::FailedPreconditionError(absl::StrCat("plugin table struct_size ", api->struct_size,
                                                      " is smaller than the smallest 1.0 table (",
                                                      kMinTable, " bytes)"));
  }
  if (api->abi_major != kHostAbiMajor) {
    return absl::FailedPreconditionError(absl::StrCat("table says ABI major ", api->abi_major,
                                                      ", negotiation said ", kHostAbiMajor));
  }
  // Copy what the plugin's table has; hooks it lacks stay NULL.
  std::memcpy(&plugin->api_, api, std::min(api->struct_size, sizeof(rayaccel_plugin_api)));
  plugin->api_.struct_size = sizeof(rayaccel_plugin_api);
  plugin->chosen_minor_ = negotiation.chosen_abi_minor;
  const rayaccel_plugin_api& t = plugin->api_;

  absl::string_view name(t.name.data != nullptr ? t.name.data : "",
                         t.name.data != nullptr ? std::min<size_t>(t.name.size, 64) : 0);
  if (!IsPluginName(name)) {
    return absl::FailedPreconditionError(
        "table name must be 1-32 characters of [a-z0-9_-] (e.g. \"cuda\")");
  }
  plugin->name_ = std::string(name);

  // A hook the plugin left NULL, or one past the table's declared size (a struct_size set to
  // less than sizeof(rayaccel_plugin_api) hides hooks the source sets: say that instead).
  std::vector<std::string> missing, beyond;
  auto need = [&](bool present, const char* hook, size_t offset, const char* why) {
    if (present) return;
    (offset >= api->struct_size ? beyond : missing).push_back(absl::StrCat(hook, why));
  };
#define RAYACCEL_HOOK(h) t.h != nullptr, #h, offsetof(rayaccel_plugin_api, h)
  need(RAYACCEL_HOOK(initialize), "");
  need(RAYACCEL_HOOK(shutdown), "");
  need(RAYACCEL_HOOK(get_properties), "");
  need(RAYACCEL_HOOK(discover), "");
  if (t.capabilities & RAYACCEL_CAP_TOPOLOGY) {
    need(RAYACCEL_HOOK(get_topology), " (RAYACCEL_CAP_TOPOLOGY claimed)");
  }
  if (t.capabilities & RAYACCEL_CAP_HEALTH_EVENTS) {
    need(RAYACCEL_HOOK(wait_health_events), " (RAYACCEL_CAP_HEALTH_EVENTS claimed)");
  }
  if (t.capabilities & RAYACCEL_CAP_ALLOCATION) {
    need(t.validate_quantity != nullptr || t.prepare_allocation != nullptr,
         "validate_quantity or prepare_allocation",
         offsetof(rayaccel_plugin_api, validate_quantity), " (RAYACCEL_CAP_ALLOCATION claimed)");
  }
  if (t.capabilities & RAYACCEL_CAP_TRANSPORT) {
    need(RAYACCEL_HOOK(transport), " (RAYACCEL_CAP_TRANSPORT claimed)");
  }
  if (t.capabilities & RAYACCEL_CAP_TELEMETRY) {
    need(RAYACCEL_HOOK(get_telemetry), " (RAYACCEL_CAP_TELEMETRY claimed)");
  }
#undef RAYACCEL_HOOK
  if (!beyond.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "set the table's struct_size to sizeof(rayaccel_plugin_api) (", sizeof(rayaccel_plugin_api),
        " bytes in ABI 1.", kHostAbiMinor, "): it says ", api->struct_size,
        " bytes, so the host reads no hook from there on, and these lie past it: ",
        absl::StrJoin(beyond, ", "),
        missing.empty() ? "" : absl::StrCat("; NULL as well: ", absl::StrJoin(missing, ", "))));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("NULL mandatory hook: ", absl::StrJoin(missing, ", ")));
  }
  // A 1.1 transport table is checked whole (a 1.0 one was experimental and is never used).
  if ((t.capabilities & RAYACCEL_CAP_TRANSPORT) && negotiation.chosen_abi_minor >= 1) {
    if (auto table = CheckTransportTable(t.transport); !table.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("RAYACCEL_CAP_TRANSPORT claimed, but ", table.status().message()));
    }
  }
  Log().info("plugin {} ({}): host speaks ABI {}.{}, plugin chose {}.{}", plugin->name_, path,
             kHostAbiMajor, kHostAbiMinor, negotiation.chosen_abi_major,
             negotiation.chosen_abi_minor);
  return plugin;
}

void LoadedPlugin::HostLog(void* host_context, rayaccel_log_level level, rayaccel_string message) {
  auto* self = static_cast<LoadedPlugin*>(host_context);
  absl::string_view text(message.data != nullptr ? message.data : "",
                         message.data != nullptr ? std::min(message.size, kMaxStringBytes) : 0);
  std::string line = IsValidUtf8(text) ? EscapeControl(text) : std::string("<non-UTF-8 message>");
  if (line != text) self->unclean_log_lines_.fetch_add(1);
  if (absl::StartsWith(line, "0 devices")) {
    std::lock_guard<std::mutex> lock(self->log_mu_);
    self->zero_devices_reason_ = line;
  }
  spdlog::level::level_enum lvl = spdlog::level::err;
  switch (level) {
    case RAYACCEL_LOG_TRACE:
      lvl = spdlog::level::trace;
      break;
    case RAYACCEL_LOG_DEBUG:
      lvl = spdlog::level::debug;
      break;
    case RAYACCEL_LOG_INFO:
      lvl = spdlog::level::info;
      break;
    case RAYACCEL_LOG_WARN:
      lvl = spdlog::level::warn;
      break;
    default:
      break;
  }
  Log().log(lvl, "[plugin {}] {}", self->name_, line);
}

std::string LoadedPlugin::zero_devices_reason() const {
  std::lock_guard<std::mutex> lock(log_mu_);
  return zero_devices_reason_;
}

absl::Status LoadedPlugin::Initialize(const std::map<std::string, std::string>& config) {
  std::vector<rayaccel_config_entry> entries;
  entries.reserve(config.size());
  for (const auto& [key, value] : config) {
    entries.push_back(
        {sizeof(rayaccel_config_entry), {key.data(), key.size()}, {value.data(), value.size()}});
  }
  host_api_.struct_size = sizeof(host_api_);
  host_api_.host_context = this;
  host_api_.log = &LoadedPlugin::HostLog;
  rayaccel_initialize_args args{};
  args.struct_size = sizeof(args);
  args.host = &host_api_;
  args.config = entries.data();
  args.config_count = entries.size();
  ErrorBuffer err;
  rayaccel_status rc =
      CallPlugin(&err, [&](rayaccel_error* e) { return api_.initialize(&args, e); });
  if (rc != RAYACCEL_STATUS_OK) return FromPluginStatus(rc, err.text, "initialize failed");
  if (args.instance == nullptr) {
    return absl::InternalError("initialize returned OK but no instance");
  }
  instance_ = args.instance;
  return absl::OkStatus();
}

absl::StatusOr<PluginProperties> LoadedPlugin::GetProperties() const {
  rayaccel_plugin_properties props{};
  props.struct_size = sizeof(props);
  ErrorBuffer err;
  rayaccel_status rc = CallPlugin(
      &err, [&](rayaccel_error* e) { return api_.get_properties(instance_, &props, e); });
  if (rc != RAYACCEL_STATUS_OK) return FromPluginStatus(rc, err.text, "get_properties failed");
  PluginProperties out;
  struct Field {
    rayaccel_string value;
    const char* what;
    std::string* out;
  } fields[] = {{props.vendor, "vendor", &out.vendor},
                {props.resource_name, "resource_name", &out.resource_name},
                {props.visible_devices_env, "visible_devices_env", &out.visible_devices_env},
                {props.plugin_version, "plugin_version", &out.plugin_version}};
  for (const Field& f : fields) {
    if (f.value.size > 0 && (f.value.data == nullptr || f.value.size > kMaxStringBytes)) {
      return absl::InvalidArgumentError(absl::StrCat("get_properties: ", f.what, " is malformed"));
    }
    absl::string_view text(f.value.data != nullptr ? f.value.data : "", f.value.size);
    if (absl::Status st = CheckText(text, absl::StrCat("get_properties: ", f.what)); !st.ok()) {
      return st;
    }
    *f.out = std::string(text);
  }
  return out;
}

absl::Status LoadedPlugin::Query(PluginReport* report) {
  Collector collector(report);
  const rayaccel_sink* sink = collector.sink();
  ErrorBuffer err;
  rayaccel_status rc =
      CallPlugin(&err, [&](rayaccel_error* e) { return api_.discover(instance_, sink, e); });
  // A plugin that stops and passes back a sink's refusal of one item has not failed: the
  // refusal is already in `problems`, and the devices before it stand.
  bool passed_back =
      rc == RAYACCEL_STATUS_INVALID_ARGUMENT && collector.refused_any() && err.text[0] == '\0';
  if (rc != RAYACCEL_STATUS_OK && !report->over_limit && !passed_back) {
    return FromPluginStatus(rc, err.text, "discover failed");
  }
  {
    std::set<uint32_t> indices;
    for (const Device& d : report->devices) indices.insert(d.index);
    std::lock_guard<std::mutex> lock(reported_mu_);
    reported_ = std::move(indices);
  }
  if (!report->no_devices_reason.empty()) {
    // The sink's answer (1.6) stands where the log line's would, as the log line reads.
    std::lock_guard<std::mutex> lock(log_mu_);
    zero_devices_reason_ = "0 devices: " + report->no_devices_reason;
  }
  using Hook =
      rayaccel_status (*)(rayaccel_plugin_instance*, const rayaccel_sink*, rayaccel_error*);
  const std::pair<Hook, const char*> optional[] = {{api_.get_labels, "get_labels"},
                                                   {api_.get_topology, "get_topology"},
                                                   {api_.get_health, "get_health"}};
  for (const auto& [hook, what] : optional) {
    if (hook == nullptr || report->over_limit) continue;
    ErrorBuffer hook_err;
    rc = CallPlugin(&hook_err, [&, h = hook](rayaccel_error* e) { return h(instance_, sink, e); });
    bool passing_back_refusal = collector.refused_any() && hook_err.text[0] == '\0';
    if (rc != RAYACCEL_STATUS_OK && rc != RAYACCEL_STATUS_UNSUPPORTED && !passing_back_refusal) {
      report->hook_failures.push_back(std::string(
          FromPluginStatus(rc, hook_err.text, absl::StrCat(what, " failed")).message()));
    }
  }
  return absl::OkStatus();
}

absl::Status LoadedPlugin::WaitHealthEvents(uint32_t timeout_ms, PluginReport* report) {
  if (api_.wait_health_events == nullptr || (api_.capabilities & RAYACCEL_CAP_HEALTH_EVENTS) == 0) {
    return absl::UnimplementedError("no health events");
  }
  Collector collector(report);
  rayaccel_health_wait_args args{};
  args.struct_size = sizeof(args);
  args.timeout_ms = timeout_ms;
  args.sink = collector.sink();
  ErrorBuffer err;
  rayaccel_status rc = CallPlugin(
      &err, [&](rayaccel_error* e) { return api_.wait_health_events(instance_, &args, e); });
  if (rc == RAYACCEL_STATUS_TIMEOUT) return absl::DeadlineExceededError("no change");
  return FromPluginStatus(rc, err.text, "wait_health_events");
}

absl::Status LoadedPlugin::Telemetry(TelemetryReport* report) {
  std::set<uint32_t> reported;
  {
    std::lock_guard<std::mutex> lock(reported_mu_);
    reported = reported_;
  }
  return SampleDevices(reported, report);
}

absl::Status LoadedPlugin::SampleDevices(const std::set<uint32_t>& reported,
                                         TelemetryReport* report) const {
  if (api_.get_telemetry == nullptr || (api_.capabilities & RAYACCEL_CAP_TELEMETRY) == 0 ||
      chosen_minor_ < 6) {
    return absl::UnimplementedError("the plugin has no get_telemetry");
  }
  SampleCollector collector(report, reported);
  ErrorBuffer err;
  rayaccel_status rc = CallPlugin(
      &err, [&](rayaccel_error* e) { return api_.get_telemetry(instance_, collector.sink(), e); });
  // Passing a refusal back (INVALID_ARGUMENT, no message) is no failure: the samples before it
  // stand, and `problems` says why.
  if (rc == RAYACCEL_STATUS_INVALID_ARGUMENT && !report->problems.empty() && err.text[0] == '\0') {
    return absl::OkStatus();
  }
  return FromPluginStatus(rc, err.text, "get_telemetry");
}

absl::Status LoadedPlugin::ValidateQuantity(uint32_t quantity) const {
  if (api_.validate_quantity == nullptr) return absl::OkStatus();
  ErrorBuffer err;
  rayaccel_status rc = CallPlugin(
      &err, [&](rayaccel_error* e) { return api_.validate_quantity(instance_, quantity, e); });
  return FromPluginStatus(rc, err.text, absl::StrCat(name_, " refuses ", quantity, " devices"));
}

absl::StatusOr<EnvList> LoadedPlugin::PrepareAllocation(
    const std::vector<uint32_t>& indices) const {
  if (api_.prepare_allocation == nullptr) {
    return absl::UnimplementedError("no prepare_allocation hook");
  }
  PluginReport report;
  Collector collector(&report);
  rayaccel_allocation_args args{};
  args.struct_size = sizeof(args);
  args.device_indices = indices.data();
  args.device_count = indices.size();
  args.sink = collector.sink();
  ErrorBuffer err;
  rayaccel_status rc = CallPlugin(
      &err, [&](rayaccel_error* e) { return api_.prepare_allocation(instance_, &args, e); });
  if (rc != RAYACCEL_STATUS_OK) return FromPluginStatus(rc, err.text, "prepare_allocation");
  if (!report.problems.empty()) {
    return absl::InternalError(
        absl::StrCat("prepare_allocation: ", absl::StrJoin(report.problems, "; ")));
  }
  return report.env;
}

std::string LoadedPlugin::abi_version() const {
  return absl::StrCat(api_.abi_major, ".", chosen_minor_);
}

LoadedPlugin::~LoadedPlugin() {
  if (instance_ != nullptr) {
    ErrorBuffer err;
    rayaccel_status rc =
        CallPlugin(&err, [&](rayaccel_error* e) { return api_.shutdown(instance_, e); });
    if (rc != RAYACCEL_STATUS_OK) {
      Log().warn("plugin {}: {}", name_,
                 std::string(FromPluginStatus(rc, err.text, "shutdown failed").message()));
    }
  }
  // Stay loaded under sanitizers' leak checks so that reports keep the plugin's symbols.
  if (handle_ != nullptr && std::getenv("RAYACCEL_NO_DLCLOSE") == nullptr) dlclose(handle_);
}

}  // namespace rayaccel
