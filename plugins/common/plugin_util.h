// Helpers shared by the in-tree C++ plugins: strings and sinks, configuration lookup, host
// logging, and the guard that keeps C++ exceptions from crossing the C ABI.
#ifndef RAYACCEL_PLUGINS_COMMON_PLUGIN_UTIL_H_
#define RAYACCEL_PLUGINS_COMMON_PLUGIN_UTIL_H_

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rayaccel/plugin.h"

namespace rayaccel::plugin {

// A view of `s` for the ABI; valid while `s` is.
inline rayaccel_string Str(std::string_view s) { return {s.data(), s.size()}; }

// `name` from a vendor library loaded with dlopen, into `out`; false (and null) where the
// library lacks it.
template <typename F>
bool Resolve(void* handle, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  return *out != nullptr;
}

inline std::string_view View(rayaccel_string s) {
  return s.data == nullptr ? std::string_view() : std::string_view(s.data, s.size);
}

// The value of configuration key `key`, or `fallback`.
inline std::string ConfigValue(const rayaccel_initialize_args* args, std::string_view key,
                               std::string fallback = "") {
  for (size_t i = 0; i < args->config_count; ++i) {
    if (View(args->config[i].key) == key) return std::string(View(args->config[i].value));
  }
  return fallback;
}

// Configuration key `key` as a boolean ("true"/"false", "1"/"0", "yes"/"no", "on"/"off"),
// `fallback` when absent; nullopt for anything else, which the caller refuses.
inline std::optional<bool> ConfigBool(const rayaccel_initialize_args* args, std::string_view key,
                                      bool fallback) {
  const std::string v = ConfigValue(args, key, fallback ? "true" : "false");
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return std::nullopt;
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> SplitList(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Sink adapters: one call per item, for the shapes every plugin hands over.
// An int attribute, or a bool one (`kind` RAYACCEL_ATTRIBUTE_BOOL, `value` 0 or 1).
inline rayaccel_status AddAttribute(const rayaccel_sink* sink, uint32_t device,
                                    std::string_view name, int64_t value,
                                    rayaccel_attribute_kind kind = RAYACCEL_ATTRIBUTE_INT) {
  rayaccel_attribute a{};
  a.struct_size = sizeof(a);
  a.device_index = device;
  a.name = Str(name);
  a.kind = kind;
  a.int_value = value;
  return sink->add_attribute(sink->host_context, &a);
}

inline rayaccel_status AddAttribute(const rayaccel_sink* sink, uint32_t device,
                                    std::string_view name, std::string_view value,
                                    rayaccel_attribute_kind kind = RAYACCEL_ATTRIBUTE_STRING) {
  if (value.empty()) return RAYACCEL_STATUS_OK;
  rayaccel_attribute a{};
  a.struct_size = sizeof(a);
  a.device_index = device;
  a.name = Str(name);
  a.kind = kind;
  a.string_value = Str(value);
  return sink->add_attribute(sink->host_context, &a);
}

inline rayaccel_status AddDomain(const rayaccel_sink* sink, std::string_view kind,
                                 std::string_view id, const std::vector<uint32_t>& members) {
  rayaccel_domain d{};
  d.struct_size = sizeof(d);
  d.kind = Str(kind);
  d.id = Str(id);
  d.devices = members.data();
  d.device_count = members.size();
  return sink->add_domain(sink->host_context, &d);
}

// A direct link (one link, one hop) between two devices; `type_name` names an
// RAYACCEL_LINK_OTHER interconnect, `weight` is the plugin's own distance (0: none).
inline rayaccel_status AddLink(const rayaccel_sink* sink, uint32_t a, uint32_t b,
                               rayaccel_link_type type, std::string_view type_name = {},
                               uint32_t weight = 0) {
  rayaccel_link link{};
  link.struct_size = sizeof(link);
  link.device_a = a;
  link.device_b = b;
  link.type = type;
  link.type_name = Str(type_name);
  link.count = 1;
  link.hops = 1;
  link.weight = weight;
  return sink->add_link(sink->host_context, &link);
}

inline rayaccel_status SetEnv(const rayaccel_sink* sink, std::string_view name,
                              std::string_view value) {
  return sink->set_env(sink->host_context, Str(name), Str(value));
}

// Logs through the host when it offers a logger.
inline void Log(const rayaccel_host_api* host, rayaccel_log_level level, std::string_view text) {
  if (host != nullptr && RAYACCEL_HAS_FIELD(host, rayaccel_host_api, log) && host->log != nullptr) {
    host->log(host->host_context, level, Str(text));
  }
}

// Says why discover found no device: through the sink where the host has explain_no_devices
// (1.6), and as the "0 devices: <why>" log line every host reads (older hosts only that).
inline void ExplainNoDevices(const rayaccel_host_api* host, const rayaccel_sink* sink,
                             std::string_view why) {
  if (sink != nullptr && RAYACCEL_HAS_FIELD(sink, rayaccel_sink, explain_no_devices) &&
      sink->explain_no_devices != nullptr) {
    sink->explain_no_devices(sink->host_context, Str(why));
  }
  Log(host, RAYACCEL_LOG_INFO, std::string("0 devices: ").append(why));
}

// Every field of a sample (ABI 1.6), for a plugin that can say nothing at all.
inline constexpr uint32_t kEverySampleField = RAYACCEL_SAMPLE_UTILIZATION | RAYACCEL_SAMPLE_MEMORY |
                                              RAYACCEL_SAMPLE_POWER | RAYACCEL_SAMPLE_TEMPERATURE |
                                              RAYACCEL_SAMPLE_ECC | RAYACCEL_SAMPLE_RETIRED_PAGES |
                                              RAYACCEL_SAMPLE_LINK_ERRORS;

// get_telemetry's last step: for each field no device's sample held (`known`, the union of
// their bits), the reason a device gave (`why`, by RAYACCEL_SAMPLE_* bit), said once.
inline void ExplainUnknownFields(const rayaccel_sink* sink, uint32_t known,
                                 const std::map<uint32_t, std::string>& why) {
  for (const auto& [bit, reason] : why) {
    if ((known & bit) == 0) sink->explain_unknown(sink->host_context, bit, Str(reason));
  }
}

// Unloads a vendor library the plugin loaded, unless RAYACCEL_NO_DLCLOSE is set (as the host
// then keeps plugins loaded too): a library with thread-local storage unloaded before exit
// leaves LeakSanitizer's scan of the threads' TLS a dangling entry to crash on, and profilers
// want the symbols at exit.
inline void CloseLibrary(void* handle) {
  if (handle != nullptr && std::getenv("RAYACCEL_NO_DLCLOSE") == nullptr) dlclose(handle);
}

inline rayaccel_status Fail(rayaccel_error* error, rayaccel_status code, const std::string& text) {
  return rayaccel_error_set(error, code, text.c_str());
}

// Runs `body` (returning rayaccel_status) and turns any escaping exception into an error:
// exceptions must never unwind into the host.
template <typename Body>
rayaccel_status Guard(rayaccel_error* error, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(error, RAYACCEL_STATUS_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INTERNAL, "internal error");
  }
}

// Fills the negotiation for a plugin built against this header's version.
inline rayaccel_status Negotiate(rayaccel_negotiation* n, const rayaccel_plugin_api* api,
                                 rayaccel_error* error) {
  if (n == nullptr || n->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_negotiation, api)) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "bad negotiation struct");
  }
  if (n->host_abi_major != RAYACCEL_ABI_VERSION_MAJOR) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INCOMPATIBLE,
                              "host ABI major version differs from this plugin's (1)");
  }
  n->chosen_abi_major = RAYACCEL_ABI_VERSION_MAJOR;
  const uint32_t mine = RAYACCEL_ABI_VERSION_MINOR;
  n->chosen_abi_minor = std::min(n->host_abi_minor, mine);
  n->api = api;
  return RAYACCEL_STATUS_OK;
}

// Writes the plugin properties the host asked for, respecting the host's struct_size.
inline void SetProperties(rayaccel_plugin_properties* p, std::string_view vendor,
                          std::string_view resource, std::string_view visible_env,
                          std::string_view version) {
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, vendor)) p->vendor = Str(vendor);
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, resource_name)) {
    p->resource_name = Str(resource);
  }
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, visible_devices_env)) {
    p->visible_devices_env = Str(visible_env);
  }
  if (RAYACCEL_HAS_FIELD(p, rayaccel_plugin_properties, plugin_version)) {
    p->plugin_version = Str(version);
  }
}

}  // namespace rayaccel::plugin

#endif  // RAYACCEL_PLUGINS_COMMON_PLUGIN_UTIL_H_
