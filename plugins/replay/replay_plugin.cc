// The replay plugin: answers every hook as one plugin of a capture bundle did
// (docs/capture.md), through the ABI, so that the conformance suite (or any host) can run
// against a customer's node without its hardware. Configuration: `bundle` (the file) and
// `plugin` (which of its plugins; optional when only one has answers).
//
// What a capture holds is what it can answer: discover, labels, topology and health as
// recorded; validate_quantity for the quantities recorded (others are refused as not
// captured); prepare_allocation for the sets recorded (each device alone, pairs on small
// nodes, all). No health events and no transport: those need the device.
//
// Not on the default plugin search path (lib/rayaccel/replay/): it is for tests and
// maintainers, never a production node.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/plugin_util.h"
#include "isolation/report_walk.h"
#include "util/json.h"

namespace rayaccel::replay {
namespace {

constexpr char kVersion[] = "1.0.0";
// As `rayaccel --replay` reads them (src/cli/capture_bundle.h).
constexpr char kFormat[] = "rayaccel-capture";
constexpr uint64_t kBundleVersion = 1;
constexpr size_t kMaxBundleBytes = size_t{32} << 20;

// RFC 4648 base64, padding required; false on anything else.
bool Base64Decode(const std::string& in, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) return false;
  out->clear();
  out->reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = value(c)) < 0) {
        return false;
      }
    }
    const uint32_t bits = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out->push_back(static_cast<char>(bits >> 16));
    if (pad < 2) out->push_back(static_cast<char>((bits >> 8) & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(bits & 0xff));
  }
  return true;
}

struct Allocation {
  std::vector<uint32_t> indices;
  std::vector<std::pair<std::string, std::string>> env;
  std::string error;
};

}  // namespace
}  // namespace rayaccel::replay

struct rayaccel_plugin_instance {
  // Immutable after initialize: every hook may run on any thread.
  std::string vendor, resource_name, visible_devices_env, plugin_version;
  std::string report;  // the recorded answers, in the plugin host's encoding
  bool has_prepare_allocation = false;
  std::map<uint32_t, std::string> quantities;  // "" allowed, else the refusal
  std::vector<rayaccel::replay::Allocation> allocations;
};

namespace rayaccel::replay {
namespace {

using plugin::Fail;

// The chosen plugin of `text`, or why there is none.
std::string Load(const std::string& text, const std::string& wanted,
                 rayaccel_plugin_instance* self) {
  json::ParseError parse_error;
  std::optional<json::Value> doc = json::Parse(text, &parse_error);
  if (!doc) {
    return "line " + std::to_string(parse_error.line) + ": " + parse_error.message;
  }
  const json::Value* format = doc->Find("format");
  const json::Value* version = doc->Find("version");
  if (format == nullptr || !format->is_string() || format->string() != kFormat) {
    return std::string("not a ") + kFormat + " document";
  }
  if (version == nullptr || version->as_uint64() != kBundleVersion) {
    return "a bundle version this plugin does not read (it reads 1)";
  }
  const json::Value* plugins = doc->Find("plugins");
  if (plugins == nullptr || !plugins->is_array()) return "no plugins array";
  const json::Value* chosen = nullptr;
  std::string names;
  for (const json::Value& p : plugins->array()) {
    const json::Value* name = p.Find("name");
    const json::Value* report = p.Find("report");
    if (name == nullptr || !name->is_string() || report == nullptr || !report->is_string()) {
      continue;
    }
    if (report->string().empty()) continue;  // refused or failed: nothing to answer with
    names += (names.empty() ? "" : ", ") + name->string();
    if (wanted.empty() ? chosen == nullptr : name->string() == wanted)
      chosen = &p;
    else if (wanted.empty())
      return "several plugins have answers (" + names + "...): set plugin";
  }
  if (chosen == nullptr) {
    return (wanted.empty() ? std::string("no plugin") : "no plugin \"" + wanted + "\"") +
           " with answers in the bundle (there are: " + (names.empty() ? "none" : names) + ")";
  }
  auto text_of = [&](const char* key) {
    const json::Value* v = chosen->Find(key);
    return v != nullptr && v->is_string() ? v->string() : std::string();
  };
  self->vendor = text_of("vendor");
  self->resource_name = text_of("resource_name");
  self->visible_devices_env = text_of("visible_devices_env");
  self->plugin_version = text_of("plugin_version");
  const json::Value* has_prepare = chosen->Find("has_prepare_allocation");
  self->has_prepare_allocation =
      has_prepare != nullptr && has_prepare->is_bool() && has_prepare->bool_value();
  if (!Base64Decode(text_of("report"), &self->report)) return "report: not base64";
  isolation::ReportNotes notes;
  if (std::string bad = isolation::WalkReport(self->report, {}, &notes); !bad.empty()) {
    return "report: " + bad;
  }
  if (const json::Value* q = chosen->Find("quantities"); q != nullptr && q->is_object()) {
    for (const json::Value::Member& m : q->members()) {
      if (!m.second.is_string()) return "quantities: not strings";
      self->quantities[static_cast<uint32_t>(std::strtoul(m.first.c_str(), nullptr, 10))] =
          m.second.string();
    }
  }
  if (const json::Value* a = chosen->Find("allocations"); a != nullptr && a->is_array()) {
    for (const json::Value& item : a->array()) {
      Allocation answer;
      if (const json::Value* indices = item.Find("indices"); indices && indices->is_array()) {
        for (const json::Value& i : indices->array()) {
          if (std::optional<uint64_t> n = i.as_uint64(); n && *n <= UINT32_MAX) {
            answer.indices.push_back(static_cast<uint32_t>(*n));
          }
        }
      }
      if (const json::Value* env = item.Find("env"); env && env->is_object()) {
        for (const json::Value::Member& m : env->members()) {
          if (m.second.is_string()) answer.env.emplace_back(m.first, m.second.string());
        }
      }
      if (const json::Value* e = item.Find("error"); e && e->is_string())
        answer.error = e->string();
      self->allocations.push_back(std::move(answer));
    }
  }
  return "";
}

rayaccel_status Initialize(rayaccel_initialize_args* args, rayaccel_error* error) {
  return plugin::Guard(error, [&] {
    if (args == nullptr ||
        args->struct_size < RAYACCEL_STRUCT_SIZE(rayaccel_initialize_args, instance)) {
      return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "bad initialize args");
    }
    const std::string path = plugin::ConfigValue(args, "bundle");
    if (path.empty()) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "no bundle configured (set replay.bundle to a capture bundle)");
    }
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, path + ": not a readable file");
    }
    if (static_cast<uint64_t>(st.st_size) > kMaxBundleBytes) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, path + ": larger than 32 MiB");
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    auto self = std::make_unique<rayaccel_plugin_instance>();
    if (std::string bad = Load(text.str(), plugin::ConfigValue(args, "plugin"), self.get());
        !bad.empty()) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, path + ": " + bad);
    }
    args->instance = self.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Shutdown(rayaccel_plugin_instance* self, rayaccel_error* error) {
  if (self == nullptr) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no instance");
  }
  delete self;
  return RAYACCEL_STATUS_OK;
}

rayaccel_status GetProperties(rayaccel_plugin_instance* self, rayaccel_plugin_properties* props,
                              rayaccel_error* error) {
  if (self == nullptr || props == nullptr) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
  }
  // Views of the instance's strings, valid until shutdown as the ABI asks.
  const std::string_view version =
      self->plugin_version.empty() ? std::string_view(kVersion) : self->plugin_version;
  plugin::SetProperties(props, self->vendor, self->resource_name, self->visible_devices_env,
                        version);
  return RAYACCEL_STATUS_OK;
}

// Replays one section of the recorded answer into the host's sink.
rayaccel_status Section(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                        const rayaccel_sink* isolation::ReportSinks::*section,
                        rayaccel_error* error) {
  if (self == nullptr || sink == nullptr) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
  }
  return plugin::Guard(error, [&] {
    isolation::ReportSinks sinks;
    sinks.*section = sink;
    isolation::ReportNotes notes;
    isolation::WalkReport(self->report, sinks, &notes);  // checked at initialize
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Discover(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                         rayaccel_error* error) {
  return Section(self, sink, &isolation::ReportSinks::devices, error);
}
rayaccel_status GetLabels(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                          rayaccel_error* error) {
  return Section(self, sink, &isolation::ReportSinks::labels, error);
}
rayaccel_status GetTopology(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                            rayaccel_error* error) {
  return Section(self, sink, &isolation::ReportSinks::topology, error);
}
rayaccel_status GetHealth(rayaccel_plugin_instance* self, const rayaccel_sink* sink,
                          rayaccel_error* error) {
  return Section(self, sink, &isolation::ReportSinks::health, error);
}

rayaccel_status ValidateQuantity(rayaccel_plugin_instance* self, uint32_t quantity,
                                 rayaccel_error* error) {
  if (self == nullptr) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no instance");
  }
  return plugin::Guard(error, [&] {
    auto it = self->quantities.find(quantity);
    if (it == self->quantities.end()) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "validate_quantity(" + std::to_string(quantity) + ") was not captured");
    }
    return it->second.empty() ? RAYACCEL_STATUS_OK
                              : Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, it->second);
  });
}

rayaccel_status PrepareAllocation(rayaccel_plugin_instance* self, rayaccel_allocation_args* args,
                                  rayaccel_error* error) {
  if (self == nullptr || args == nullptr || args->sink == nullptr ||
      (args->device_count > 0 && args->device_indices == nullptr)) {
    return rayaccel_error_set(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "NULL argument");
  }
  return plugin::Guard(error, [&] {
    std::vector<uint32_t> wanted(args->device_indices, args->device_indices + args->device_count);
    std::sort(wanted.begin(), wanted.end());
    for (const Allocation& a : self->allocations) {
      if (a.indices != wanted) continue;
      if (!a.error.empty()) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, a.error);
      // The recorded plugin had no hook: the host's own answer, its variable set to the
      // indices.
      if (!self->has_prepare_allocation) {
        if (self->visible_devices_env.empty()) return RAYACCEL_STATUS_OK;
        std::string list;
        for (uint32_t i : wanted) list += (list.empty() ? "" : ",") + std::to_string(i);
        return plugin::SetEnv(args->sink, self->visible_devices_env, list);
      }
      for (const auto& [name, value] : a.env) {
        if (rayaccel_status s = plugin::SetEnv(args->sink, name, value); s != RAYACCEL_STATUS_OK) {
          return s;
        }
      }
      return RAYACCEL_STATUS_OK;
    }
    std::string list;
    for (uint32_t i : wanted) list += (list.empty() ? "" : ",") + std::to_string(i);
    return Fail(error, RAYACCEL_STATUS_NOT_FOUND,
                "prepare_allocation for devices " + list + " was not captured");
  });
}

constexpr rayaccel_plugin_api kApi = {
    sizeof(rayaccel_plugin_api),
    RAYACCEL_ABI_VERSION_MAJOR,
    RAYACCEL_ABI_VERSION_MINOR,
    {"replay", 6},
    RAYACCEL_CAP_TOPOLOGY | RAYACCEL_CAP_ALLOCATION | RAYACCEL_CAP_THREAD_SAFE,
    &Initialize,
    &Shutdown,
    &GetProperties,
    &Discover,
    &GetLabels,
    &GetTopology,
    &GetHealth,
    /*wait_health_events=*/nullptr,
    &ValidateQuantity,
    &PrepareAllocation,
    /*transport=*/nullptr,
    /*get_telemetry=*/nullptr,
};

}  // namespace
}  // namespace rayaccel::replay

extern "C" RAYACCEL_PLUGIN_EXPORT rayaccel_status
rayaccel_plugin_entry(rayaccel_negotiation* negotiation, rayaccel_error* error) {
  return rayaccel::plugin::Negotiate(negotiation, &rayaccel::replay::kApi, error);
}
