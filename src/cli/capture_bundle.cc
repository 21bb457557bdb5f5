#include "cli/capture_bundle.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "present/render.h"
#include "rayaccel/plugin.h"
#include "topology/host_topology.h"
#include "util/json.h"

extern char** environ;

namespace rayaccel::cli {
namespace {

// Variables that say which devices a process sees or how Ray is told about them.
bool Allowed(std::string_view name) {
  for (std::string_view secret : {"TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL"}) {
    if (name.find(secret) != std::string_view::npos) return false;
  }
  for (std::string_view prefix : {"RAY_OVERRIDE_", "RAYACCEL_", "TPU_", "CUDA_", "HIP_", "ROCR_",
                                  "HABANA_", "NEURON_RT_", "ASCEND_RT_", "ONEAPI_DEVICE_", "ZE_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

std::string OsName() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "";
}

PluginStatus::State StateOf(std::string_view name, bool* ok) {
  for (auto s : {PluginStatus::State::kActive, PluginStatus::State::kDegraded,
                 PluginStatus::State::kFailed, PluginStatus::State::kRefused}) {
    if (name == PluginStateName(s)) return s;
  }
  *ok = false;
  return PluginStatus::State::kRefused;
}

// Reads members of one JSON object, each checked for its type; the first problem is kept,
// named by its path in the bundle.
class Fields {
 public:
  Fields(const json::Value* object, std::string where, std::string* error)
      : object_(object), where_(std::move(where)), error_(error) {
    if (object_ == nullptr || !object_->is_object()) Fail("", "an object");
  }
  std::string String(std::string_view key, bool required = true) {
    const json::Value* v = Get(key, required);
    if (v == nullptr) return "";
    if (!v->is_string()) return Fail(key, "a string"), "";
    return v->string();
  }
  uint64_t Unsigned(std::string_view key, bool required = true) {
    const json::Value* v = Get(key, required);
    if (v == nullptr) return 0;
    std::optional<uint64_t> n = v->as_uint64();
    if (!n) return Fail(key, "a whole number"), 0;
    return *n;
  }
  bool Bool(std::string_view key) {
    const json::Value* v = Get(key, true);
    if (v == nullptr) return false;
    if (!v->is_bool()) return Fail(key, "true or false"), false;
    return v->bool_value();
  }
  const json::Value* Array(std::string_view key, bool required = true) {
    const json::Value* v = Get(key, required);
    if (v != nullptr && !v->is_array()) return Fail(key, "an array"), nullptr;
    return v;
  }
  const json::Value* Object(std::string_view key, bool required = true) {
    const json::Value* v = Get(key, required);
    if (v != nullptr && !v->is_object()) return Fail(key, "an object"), nullptr;
    return v;
  }
  std::string Path(std::string_view key) const {
    return absl::StrCat(where_, ".", std::string(key));
  }
  void Fail(std::string_view key, std::string_view expected) {
    if (error_->empty()) {
      *error_ =
          absl::StrCat(key.empty() ? where_ : Path(key), ": expected ", std::string(expected));
    }
  }

 private:
  const json::Value* Get(std::string_view key, bool required) {
    if (object_ == nullptr || !object_->is_object()) return nullptr;
    const json::Value* v = object_->Find(key);
    if (v == nullptr && required) Fail(key, "a value (missing)");
    return v;
  }
  const json::Value* object_;
  std::string where_;
  std::string* error_;
};

std::map<std::string, std::string> StringMap(const json::Value* v, const std::string& where,
                                             std::string* error) {
  std::map<std::string, std::string> out;
  if (v == nullptr) return out;
  for (const json::Value::Member& m : v->members()) {
    if (!m.second.is_string()) {
      if (error->empty()) *error = absl::StrCat(where, ".", m.first, ": expected a string");
      return out;
    }
    out[m.first] = m.second.string();
  }
  return out;
}

std::vector<std::string> StringList(const json::Value* v, const std::string& where,
                                    std::string* error) {
  std::vector<std::string> out;
  if (v == nullptr) return out;
  if (!v->is_array()) {
    if (error->empty()) *error = where + ": expected an array of strings";
    return out;
  }
  for (const json::Value& item : v->array()) {
    if (!item.is_string()) {
      if (error->empty()) *error = where + ": expected an array of strings";
      return out;
    }
    out.push_back(item.string());
  }
  return out;
}

// A parsed value written back as JSON text.
std::string Text(const json::Value& v) {
  json::Writer w;
  std::function<void(const json::Value&)> write = [&](const json::Value& x) {
    switch (x.type()) {
      case json::Value::Type::kNull:
        w.Null();
        break;
      case json::Value::Type::kBool:
        w.Bool(x.bool_value());
        break;
      case json::Value::Type::kNumber:
        if (std::optional<int64_t> i = x.as_int64()) {
          w.Int(*i);
        } else if (std::optional<uint64_t> u = x.as_uint64()) {
          w.Uint(*u);
        } else {
          w.Double(x.number());
        }
        break;
      case json::Value::Type::kString:
        w.String(x.string());
        break;
      case json::Value::Type::kArray:
        w.BeginArray();
        for (const json::Value& item : x.array()) write(item);
        w.EndArray();
        break;
      case json::Value::Type::kObject:
        w.BeginObject();
        for (const json::Value::Member& m : x.members()) {
          w.Key(m.first);
          write(m.second);
        }
        w.EndObject();
        break;
    }
  };
  write(v);
  return w.Finish();
}

// Leaves of a JSON value by path: "devices[0].id" -> "\"GPU-...\"".
void Flatten(const json::Value& v, const std::string& path, const std::vector<std::string>& ignore,
             std::map<std::string, std::string>* out) {
  if (v.is_object()) {
    for (const json::Value::Member& m : v.members()) {
      if (path.empty() && std::find(ignore.begin(), ignore.end(), m.first) != ignore.end()) {
        continue;  // top-level members only: a device attribute may have any name
      }
      Flatten(m.second, path.empty() ? m.first : path + "." + m.first, ignore, out);
    }
    if (v.members().empty()) (*out)[path] = "{}";
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.array().size(); ++i) {
      Flatten(v.array()[i], absl::StrCat(path, "[", i, "]"), ignore, out);
    }
    if (v.array().empty()) (*out)[path] = "[]";
  } else {
    std::string text = Text(v);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    (*out)[path] = text;
  }
}

}  // namespace

std::vector<std::string> DiffJson(std::string_view a, std::string_view b,
                                  const std::vector<std::string>& ignore) {
  std::map<std::string, std::string> left, right;
  json::ParseError error;
  if (std::optional<json::Value> va = json::Parse(a, &error)) Flatten(*va, "", ignore, &left);
  if (std::optional<json::Value> vb = json::Parse(b, &error)) Flatten(*vb, "", ignore, &right);
  std::vector<std::string> out;
  auto l = left.begin();
  auto r = right.begin();
  while (l != left.end() || r != right.end()) {
    if (r == right.end() || (l != left.end() && l->first < r->first)) {
      out.push_back(absl::StrCat("- ", l->first, ": ", l->second));
      ++l;
    } else if (l == left.end() || r->first < l->first) {
      out.push_back(absl::StrCat("+ ", r->first, ": ", r->second));
      ++r;
    } else {
      if (l->second != r->second) {
        out.push_back(absl::StrCat("- ", l->first, ": ", l->second));
        out.push_back(absl::StrCat("+ ", r->first, ": ", r->second));
      }
      ++l;
      ++r;
    }
  }
  return out;
}

std::string WithoutHostName(std::string xml) {
  const std::string tag = "<info name=\"HostName\"";
  for (size_t at = xml.find(tag); at != std::string::npos; at = xml.find(tag, at)) {
    size_t end = xml.find("/>", at);
    if (end == std::string::npos) break;
    xml.erase(at, end + 2 - at);
  }
  return xml;
}

Manifest CollectManifest(bool include_hostname, const std::string& sysfs_root) {
  Manifest m;
  m.hwloc_version = HostTopology::LibraryVersion();
  // The kernel drivers behind the in-tree plugins' devices (vfio_pci: TPU VMs).
  for (const char* module :
       {"nvidia", "nvidia_uvm", "nvidia_peermem", "amdgpu", "habanalabs", "vfio_pci"}) {
    const std::string dir = absl::StrCat(sysfs_root, "/sys/module/", module);
    if (access(dir.c_str(), F_OK) != 0) continue;
    std::ifstream in(dir + "/version");
    std::string version;
    std::getline(in, version);
    m.kernel_modules[module] = std::string(absl::StripAsciiWhitespace(version));
  }
  m.rayaccel_version = RAYACCEL_VERSION;
  m.abi_version = absl::StrCat(RAYACCEL_ABI_VERSION_MAJOR, ".", RAYACCEL_ABI_VERSION_MINOR);
  utsname u{};
  if (uname(&u) == 0) {
    m.kernel = u.release;
    m.machine = u.machine;
    if (include_hostname) m.hostname = u.nodename;
  }
  m.os = OsName();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || !Allowed(entry.substr(0, eq))) continue;
    m.environment[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  return m;
}

void AddVendorStacks(const NodeSnapshot& snapshot, Manifest* manifest) {
  manifest->vendor_stacks.clear();
  for (const PluginStatus& p : snapshot.plugins) {
    if (p.state == PluginStatus::State::kRefused) continue;
    Manifest::VendorStack stack{p.name, p.plugin_version, p.vendor, {}, {}, {}};
    auto add_distinct = [](std::vector<std::string>* list, const std::string& value) {
      if (!value.empty() && std::find(list->begin(), list->end(), value) == list->end()) {
        list->push_back(value);
      }
    };
    for (const Device& d : snapshot.devices) {
      if (d.plugin != p.name) continue;
      add_distinct(&stack.driver_versions, d.driver_version);
      if (!d.firmware_version.empty()) stack.firmware[d.id] = d.firmware_version;
      for (const Attribute& a : d.attributes) {
        if (a.kind == Attribute::Kind::kVersion) {
          add_distinct(&stack.version_attributes[a.name], a.string_value);
        }
      }
    }
    manifest->vendor_stacks.push_back(std::move(stack));
  }
}

std::string ManifestJson(const Manifest& manifest) {
  json::Writer w;
  w.BeginObject();
  w.Key("rayaccel_version").String(manifest.rayaccel_version);
  w.Key("abi_version").String(manifest.abi_version);
  w.Key("kernel").String(manifest.kernel);
  w.Key("machine").String(manifest.machine);
  w.Key("os").String(manifest.os);
  w.Key("hostname").String(manifest.hostname);
  w.Key("environment").BeginObject();
  for (const auto& [k, v] : manifest.environment) w.Key(k).String(v);
  w.EndObject();
  w.Key("hwloc_version").String(manifest.hwloc_version);
  w.Key("kernel_modules").BeginObject();
  for (const auto& [k, v] : manifest.kernel_modules) w.Key(k).String(v);
  w.EndObject();
  w.Key("vendor_stacks").BeginArray();
  for (const Manifest::VendorStack& v : manifest.vendor_stacks) {
    w.BeginObject();
    w.Key("plugin").String(v.plugin);
    w.Key("plugin_version").String(v.plugin_version);
    w.Key("vendor").String(v.vendor);
    w.Key("driver_versions").BeginArray();
    for (const std::string& d : v.driver_versions) w.String(d);
    w.EndArray();
    w.Key("firmware").BeginObject();
    for (const auto& [id, version] : v.firmware) w.Key(id).String(version);
    w.EndObject();
    w.Key("version_attributes").BeginObject();
    for (const auto& [name, values] : v.version_attributes) {
      w.Key(name).BeginArray();
      for (const std::string& value : values) w.String(value);
      w.EndArray();
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Finish();
}

std::string WriteBundle(const CapturedNode& node, const NodeSnapshot& snapshot,
                        const Manifest& manifest) {
  json::Writer w;
  w.BeginObject();
  w.Key("format").String(kBundleFormat);
  w.Key("version").Int(kBundleVersion);
  w.Key("manifest").Raw(ManifestJson(manifest));
  w.Key("host_topology").String(node.host_topology);
  w.Key("hwloc_xml").String(node.hwloc_xml);
  w.Key("plugins").BeginArray();
  for (const CapturedPlugin& p : node.plugins) {
    const PluginStatus& s = p.status;
    w.BeginObject();
    w.Key("name").String(s.name);
    w.Key("path").String(s.path);
    w.Key("state").String(PluginStateName(s.state));
    w.Key("message").String(s.message);
    w.Key("abi_version").String(s.abi_version);
    w.Key("vendor").String(s.vendor);
    w.Key("plugin_version").String(s.plugin_version);
    w.Key("resource_name").String(s.resource_name);
    w.Key("visible_devices_env").String(s.visible_devices_env);
    w.Key("capabilities").Uint(s.capabilities);
    w.Key("device_count").Uint(s.device_count);
    w.Key("has_prepare_allocation").Bool(p.has_prepare_allocation);
    w.Key("zero_devices_reason").String(p.zero_devices_reason);
    // The answer in the plugin host's report encoding (src/isolation/report_codec.h), base64.
    w.Key("report").String(absl::Base64Escape(p.report));
    w.Key("quantities").BeginObject();
    for (const auto& [q, refusal] : p.quantities) w.Key(std::to_string(q)).String(refusal);
    w.EndObject();
    w.Key("allocations").BeginArray();
    for (const CapturedPlugin::AllocationAnswer& a : p.allocations) {
      w.BeginObject();
      w.Key("indices").BeginArray();
      for (uint32_t i : a.indices) w.Uint(i);
      w.EndArray();
      w.Key("env").BeginObject();
      for (const auto& [k, v] : a.env) w.Key(k).String(v);
      w.EndObject();
      w.Key("error").String(a.error);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Key("snapshot").Raw(present::DiscoverJson(snapshot));
  w.EndObject();
  return w.Finish();
}

absl::StatusOr<Bundle> ParseBundle(std::string_view text) {
  auto invalid = [](const std::string& why) {
    return absl::InvalidArgumentError("not a usable capture bundle: " + why);
  };
  if (text.size() > kMaxBundleBytes) {
    return invalid(absl::StrCat("larger than ", kMaxBundleBytes >> 20, " MiB"));
  }
  json::ParseError parse_error;
  std::optional<json::Value> doc = json::Parse(text, &parse_error);
  if (!doc) {
    return invalid(absl::StrCat("line ", parse_error.line, ", column ", parse_error.column, ": ",
                                parse_error.message));
  }
  std::string error;
  Bundle bundle;
  Fields root(&*doc, "bundle", &error);
  if (root.String("format") != kBundleFormat && error.empty()) {
    return invalid(absl::StrCat("format is not \"", kBundleFormat, "\""));
  }
  if (uint64_t version = root.Unsigned("version"); error.empty() && version != kBundleVersion) {
    return invalid(
        absl::StrCat("version ", version, "; this rayaccel reads version ", kBundleVersion));
  }
  Fields manifest(root.Object("manifest"), "bundle.manifest", &error);
  bundle.manifest.rayaccel_version = manifest.String("rayaccel_version");
  bundle.manifest.abi_version = manifest.String("abi_version");
  bundle.manifest.kernel = manifest.String("kernel");
  bundle.manifest.machine = manifest.String("machine");
  bundle.manifest.os = manifest.String("os");
  bundle.manifest.hostname = manifest.String("hostname");
  bundle.manifest.environment =
      StringMap(manifest.Object("environment"), "bundle.manifest.environment", &error);
  // Added within version 1 (bundles written before lack them); for people and for diff.
  bundle.manifest.hwloc_version = manifest.String("hwloc_version", /*required=*/false);
  bundle.manifest.kernel_modules =
      StringMap(manifest.Object("kernel_modules", false), "bundle.manifest.kernel_modules", &error);
  if (const json::Value* stacks = manifest.Array("vendor_stacks", false)) {
    for (size_t i = 0; i < stacks->array().size() && error.empty(); ++i) {
      const std::string where = absl::StrCat("bundle.manifest.vendor_stacks[", i, "]");
      Fields f(&stacks->array()[i], where, &error);
      Manifest::VendorStack v;
      v.plugin = f.String("plugin");
      v.plugin_version = f.String("plugin_version");
      v.vendor = f.String("vendor");
      v.driver_versions =
          StringList(f.Array("driver_versions"), where + ".driver_versions", &error);
      v.firmware = StringMap(f.Object("firmware"), where + ".firmware", &error);
      if (const json::Value* attributes = f.Object("version_attributes")) {
        for (const json::Value::Member& m : attributes->members()) {
          v.version_attributes[m.first] =
              StringList(&m.second, absl::StrCat(where, ".version_attributes.", m.first), &error);
        }
      }
      bundle.manifest.vendor_stacks.push_back(std::move(v));
    }
  }
  bundle.node.host_topology = root.String("host_topology");
  bundle.node.hwloc_xml = root.String("hwloc_xml");
  const json::Value* plugins = root.Array("plugins");
  for (size_t i = 0; plugins != nullptr && i < plugins->array().size() && error.empty(); ++i) {
    const std::string where = absl::StrCat("bundle.plugins[", i, "]");
    Fields f(&plugins->array()[i], where, &error);
    CapturedPlugin p;
    PluginStatus& s = p.status;
    s.name = f.String("name");
    s.path = f.String("path");
    bool state_ok = true;
    s.state = StateOf(f.String("state"), &state_ok);
    if (!state_ok) f.Fail("state", "active, degraded, failed or refused");
    s.message = f.String("message");
    s.abi_version = f.String("abi_version");
    s.vendor = f.String("vendor");
    s.plugin_version = f.String("plugin_version");
    s.resource_name = f.String("resource_name");
    s.visible_devices_env = f.String("visible_devices_env");
    s.capabilities = f.Unsigned("capabilities");
    s.device_count = f.Unsigned("device_count");
    p.has_prepare_allocation = f.Bool("has_prepare_allocation");
    p.zero_devices_reason = f.String("zero_devices_reason");
    if (!absl::Base64Unescape(f.String("report"), &p.report) && error.empty()) {
      f.Fail("report", "base64");
    }
    if (const json::Value* q = f.Object("quantities")) {
      for (const json::Value::Member& m : q->members()) {
        uint32_t n = 0;
        if (!absl::SimpleAtoi(m.first, &n) || n == 0 || !m.second.is_string()) {
          f.Fail("quantities", "quantity numbers mapped to strings");
          break;
        }
        p.quantities[n] = m.second.string();
      }
    }
    if (const json::Value* allocations = f.Array("allocations")) {
      for (size_t k = 0; k < allocations->array().size() && error.empty(); ++k) {
        const std::string at = absl::StrCat(where, ".allocations[", k, "]");
        Fields a(&allocations->array()[k], at, &error);
        CapturedPlugin::AllocationAnswer answer;
        if (const json::Value* indices = a.Array("indices")) {
          for (const json::Value& v : indices->array()) {
            std::optional<uint64_t> n = v.as_uint64();
            if (!n || *n > UINT32_MAX) {
              a.Fail("indices", "device indices");
              break;
            }
            answer.indices.push_back(static_cast<uint32_t>(*n));
          }
        }
        answer.env = StringMap(a.Object("env"), at + ".env", &error);
        answer.error = a.String("error");
        p.allocations.push_back(std::move(answer));
      }
    }
    bundle.node.plugins.push_back(std::move(p));
  }
  if (const json::Value* snapshot = root.Object("snapshot")) bundle.snapshot_json = Text(*snapshot);
  if (const json::Value* manifest_value = root.Object("manifest")) {
    bundle.manifest_json = Text(*manifest_value);
  }
  if (!error.empty()) return invalid(error);
  return bundle;
}

absl::StatusOr<Bundle> ReadBundleFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("capture bundle ", path, ": cannot be read"));
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxBundleBytes) break;
  }
  absl::StatusOr<Bundle> bundle = ParseBundle(text);
  if (!bundle.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bundle.status().message()));
  }
  return bundle;
}

}  // namespace rayaccel::cli
