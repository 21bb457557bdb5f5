#include "sim/sim_spec.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "common/sysfs.h"
#include "util/json.h"

namespace rayaccel::sim {
namespace {

using json::Value;

// Collects the first error with its position; every reader returns false after it.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  bool Error(const Value& at, const std::string& field, const std::string& problem) {
    if (error_.empty()) {
      error_ = source_ + ":" + std::to_string(at.line()) + ":" + std::to_string(at.column()) +
               ": " + field + ": " + problem;
    }
    return false;
  }
  const std::string& error() const { return error_; }

  bool Expect(const Value& v, Value::Type type, const std::string& field) {
    if (v.type() == type) return true;
    return Error(
        v, field,
        std::string("expected ") + Value::TypeName(type) + ", found " + Value::TypeName(v.type()));
  }

  // Rejects members not in `known`: a misspelt field must not be silently ignored.
  bool OnlyKnown(const Value& object, const std::string& field,
                 std::initializer_list<std::string_view> known) {
    for (const auto& [key, value] : object.members()) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || k == key;
      if (!ok) return Error(value, field.empty() ? key : field + "." + key, "unknown field");
    }
    return true;
  }

  bool String(const Value& object, std::string_view key, const std::string& field, std::string* out,
              bool required = false) {
    const Value* v = object.Find(key);
    if (v == nullptr) {
      return required ? Error(object, field, "missing required field") : true;
    }
    if (!Expect(*v, Value::Type::kString, field)) return false;
    *out = v->string();
    if (required && out->empty()) return Error(*v, field, "must not be empty");
    return true;
  }

  template <typename T>
  bool Unsigned(const Value& object, std::string_view key, const std::string& field, T* out,
                uint64_t max = std::numeric_limits<T>::max()) {
    const Value* v = object.Find(key);
    if (v == nullptr) return true;
    if (!Expect(*v, Value::Type::kNumber, field)) return false;
    std::optional<uint64_t> n = v->as_uint64();
    if (!n || *n > max) {
      return Error(*v, field, "expected a whole number from 0 to " + std::to_string(max));
    }
    *out = static_cast<T>(*n);
    return true;
  }

  // A number, or a string in hex ("0x74a1") for PCI ids.
  bool PciId(const Value& object, std::string_view key, const std::string& field, uint32_t* out) {
    const Value* v = object.Find(key);
    if (v == nullptr) return true;
    if (v->is_string()) {
      std::string_view s = v->string();
      if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
      std::optional<uint64_t> n = plugin::ParseUnsigned(s, 16);
      if (!n || *n > 0xFFFF) {
        return Error(*v, field, "expected a 16-bit PCI id such as \"0x74a1\" or 29857");
      }
      *out = static_cast<uint32_t>(*n);
      return true;
    }
    return Unsigned(object, key, field, out, 0xFFFF);
  }

  bool DeviceRef(const Value& v, const std::string& field, size_t device_count, uint32_t* out) {
    std::optional<uint64_t> n = v.is_number() ? v.as_uint64() : std::nullopt;
    if (!n) return Error(v, field, "expected a device position (a whole number)");
    if (*n >= device_count) {
      return Error(v, field,
                   "device " + std::to_string(*n) + " does not exist (the spec has " +
                       std::to_string(device_count) + " devices)");
    }
    *out = static_cast<uint32_t>(*n);
    return true;
  }

  // What was already read, to refuse repeats in O(log n).
  std::set<std::string> seen_uuids;
  std::set<std::tuple<uint32_t, uint32_t, rayaccel_link_type>> seen_links;

 private:
  std::string source_;
  std::string error_;
};

bool ParseHealth(Reader* r, const Value& dev, const std::string& field, SimDevice* d) {
  std::string health;
  if (!r->String(dev, "health", field + ".health", &health)) return false;
  if (health.empty() || health == "healthy") {
    d->health = RAYACCEL_HEALTH_HEALTHY;
  } else if (health == "unhealthy") {
    d->health = RAYACCEL_HEALTH_UNHEALTHY;
  } else if (health == "unknown") {
    d->health = RAYACCEL_HEALTH_UNKNOWN;
  } else {
    return r->Error(*dev.Find("health"), field + ".health",
                    "expected \"healthy\", \"unhealthy\" or \"unknown\"");
  }
  return r->String(dev, "health_reason", field + ".health_reason", &d->health_reason);
}

bool ParseDevice(Reader* r, const Value& dev, const std::string& field, SimSpec* spec) {
  if (!r->Expect(dev, Value::Type::kObject, field)) return false;
  if (!r->OnlyKnown(
          dev, field,
          {"uuid", "name", "vendor", "accelerator_type", "architecture", "memory_bytes",
           "pci_bus_id", "pci_vendor_id", "pci_device_id", "numa_node", "driver_version",
           "firmware_version", "parent", "partition_profile", "health", "health_reason"})) {
    return false;
  }
  SimDevice d;
  std::string vendor;
  bool ok =
      r->String(dev, "uuid", field + ".uuid", &d.uuid, true) &&
      r->String(dev, "name", field + ".name", &d.name, true) &&
      r->String(dev, "vendor", field + ".vendor", &vendor) &&
      r->String(dev, "accelerator_type", field + ".accelerator_type", &d.accelerator_type) &&
      r->String(dev, "architecture", field + ".architecture", &d.architecture) &&
      r->Unsigned(dev, "memory_bytes", field + ".memory_bytes", &d.memory_bytes) &&
      r->String(dev, "pci_bus_id", field + ".pci_bus_id", &d.pci_bus_id) &&
      r->PciId(dev, "pci_vendor_id", field + ".pci_vendor_id", &d.pci_vendor_id) &&
      r->PciId(dev, "pci_device_id", field + ".pci_device_id", &d.pci_device_id) &&
      r->String(dev, "driver_version", field + ".driver_version", &d.driver_version) &&
      r->String(dev, "firmware_version", field + ".firmware_version", &d.firmware_version) &&
      r->String(dev, "parent", field + ".parent", &d.parent) &&
      r->String(dev, "partition_profile", field + ".partition_profile", &d.partition_profile) &&
      ParseHealth(r, dev, field, &d);
  if (!ok) return false;
  if (const Value* numa = dev.Find("numa_node")) {
    std::optional<int64_t> n = numa->as_int64();
    if (!n || *n < -1 || *n > 4095) {
      return r->Error(*numa, field + ".numa_node", "expected -1 (unknown) or 0 to 4095");
    }
    d.numa_node = static_cast<int32_t>(*n);
  }
  if (!vendor.empty()) {
    if (spec->vendor.empty()) spec->vendor = vendor;
    if (vendor != spec->vendor) {
      return r->Error(*dev.Find("vendor"), field + ".vendor",
                      "all devices of one spec share a vendor (\"" + spec->vendor +
                          "\"); describe another family in a second spec");
    }
  }
  if (!r->seen_uuids.insert(d.uuid).second) {
    return r->Error(*dev.Find("uuid"), field + ".uuid", "duplicate uuid \"" + d.uuid + "\"");
  }
  spec->devices.push_back(std::move(d));
  return true;
}

bool ParseLink(Reader* r, const Value& l, const std::string& field, SimSpec* spec) {
  if (!r->Expect(l, Value::Type::kObject, field)) return false;
  if (!r->OnlyKnown(l, field, {"a", "b", "type", "name", "count", "bandwidth_mbps", "path"})) {
    return false;
  }
  SimLink link;
  const Value* a = l.Find("a");
  const Value* b = l.Find("b");
  if (a == nullptr || b == nullptr) return r->Error(l, field, "needs both \"a\" and \"b\"");
  size_t n = spec->devices.size();
  if (!r->DeviceRef(*a, field + ".a", n, &link.a) || !r->DeviceRef(*b, field + ".b", n, &link.b)) {
    return false;
  }
  if (link.a == link.b) return r->Error(l, field, "a device cannot link to itself");
  std::string type = "pcie", path;
  if (!r->String(l, "type", field + ".type", &type) ||
      !r->String(l, "path", field + ".path", &path) ||
      !r->String(l, "name", field + ".name", &link.type_name) ||
      !r->Unsigned(l, "count", field + ".count", &link.count, 1024) ||
      !r->Unsigned(l, "bandwidth_mbps", field + ".bandwidth_mbps", &link.bandwidth_mbps)) {
    return false;
  }
  static const std::pair<const char*, rayaccel_link_type> kTypes[] = {
      {"pcie", RAYACCEL_LINK_PCIE},           {"nvlink", RAYACCEL_LINK_NVLINK},
      {"xgmi", RAYACCEL_LINK_XGMI},           {"ici", RAYACCEL_LINK_ICI},
      {"scale-out", RAYACCEL_LINK_SCALE_OUT}, {"other", RAYACCEL_LINK_OTHER}};
  bool found = false;
  for (const auto& [name, value] : kTypes) {
    if (type == name) link.type = value, found = true;
  }
  if (!found) {
    return r->Error(*l.Find("type"), field + ".type",
                    "expected pcie, nvlink, xgmi, ici, scale-out or other");
  }
  static const std::pair<const char*, rayaccel_pcie_path> kPaths[] = {
      {"PIX", RAYACCEL_PCIE_PATH_PIX},
      {"PXB", RAYACCEL_PCIE_PATH_PXB},
      {"PHB", RAYACCEL_PCIE_PATH_PHB},
      {"NODE", RAYACCEL_PCIE_PATH_NODE},
      {"SYS", RAYACCEL_PCIE_PATH_SYS}};
  if (!path.empty()) {
    found = false;
    for (const auto& [name, value] : kPaths) {
      if (path == name) link.path = value, found = true;
    }
    if (!found)
      return r->Error(*l.Find("path"), field + ".path", "expected PIX, PXB, PHB, NODE or SYS");
    if (link.type != RAYACCEL_LINK_PCIE) {
      return r->Error(*l.Find("path"), field + ".path", "only pcie links have a path");
    }
  }
  if (!link.type_name.empty() && link.type != RAYACCEL_LINK_OTHER) {
    return r->Error(*l.Find("name"), field + ".name", "only other links have a name");
  }
  auto key = std::make_tuple(std::min(link.a, link.b), std::max(link.a, link.b), link.type);
  if (!r->seen_links.insert(key).second) {
    return r->Error(l, field, "this pair already has a " + type + " link");
  }
  spec->links.push_back(link);
  return true;
}

bool ParseDomain(Reader* r, const Value& d, const std::string& field, SimSpec* spec) {
  if (!r->Expect(d, Value::Type::kObject, field)) return false;
  if (!r->OnlyKnown(d, field, {"kind", "id", "devices"})) return false;
  SimDomain dom;
  if (!r->String(d, "kind", field + ".kind", &dom.kind, true) ||
      !r->String(d, "id", field + ".id", &dom.id, true)) {
    return false;
  }
  const Value* devices = d.Find("devices");
  if (devices == nullptr) return r->Error(d, field + ".devices", "missing required field");
  if (!r->Expect(*devices, Value::Type::kArray, field + ".devices")) return false;
  std::set<uint32_t> seen;
  for (size_t i = 0; i < devices->array().size(); ++i) {
    std::string f = field + ".devices[" + std::to_string(i) + "]";
    uint32_t index = 0;
    if (!r->DeviceRef(devices->array()[i], f, spec->devices.size(), &index)) return false;
    if (!seen.insert(index).second) return r->Error(devices->array()[i], f, "listed twice");
    dom.devices.push_back(index);
  }
  spec->domains.push_back(std::move(dom));
  return true;
}

}  // namespace

bool ParseSpec(std::string_view text, const std::string& source, SimSpec* spec,
               std::string* error) {
  json::ParseError parse_error;
  std::optional<Value> doc = json::Parse(text, &parse_error);
  if (!doc) {
    *error = source + ":" + std::to_string(parse_error.line) + ":" +
             std::to_string(parse_error.column) + ": " + parse_error.message;
    return false;
  }
  Reader r(source);
  *spec = SimSpec();
  auto parse = [&]() -> bool {
    const Value& root = *doc;
    if (!r.Expect(root, Value::Type::kObject, "(top level)")) return false;
    if (!r.OnlyKnown(root, "",
                     {"resource_name", "visible_devices_env", "vendor", "devices", "links",
                      "domains", "labels", "valid_quantities"})) {
      return false;
    }
    if (!r.String(root, "resource_name", "resource_name", &spec->resource_name) ||
        !r.String(root, "visible_devices_env", "visible_devices_env", &spec->visible_devices_env) ||
        !r.String(root, "vendor", "vendor", &spec->vendor)) {
      return false;
    }
    if (spec->resource_name.empty()) {
      return r.Error(*root.Find("resource_name"), "resource_name", "must not be empty");
    }
    const Value* devices = root.Find("devices");
    if (devices == nullptr) return r.Error(root, "devices", "missing required field");
    if (!r.Expect(*devices, Value::Type::kArray, "devices")) return false;
    for (size_t i = 0; i < devices->array().size(); ++i) {
      if (!ParseDevice(&r, devices->array()[i], "devices[" + std::to_string(i) + "]", spec)) {
        return false;
      }
    }
    std::set<std::string> whole;  // a parent must be a whole device, not a partition
    for (const SimDevice& d : spec->devices) {
      if (d.parent.empty()) whole.insert(d.uuid);
    }
    for (size_t i = 0; i < spec->devices.size(); ++i) {
      const std::string& parent = spec->devices[i].parent;
      if (!parent.empty() && whole.count(parent) == 0) {
        return r.Error(devices->array()[i], "devices[" + std::to_string(i) + "].parent",
                       "no whole device with uuid \"" + parent + "\"");
      }
    }
    if (const Value* links = root.Find("links")) {
      if (!r.Expect(*links, Value::Type::kArray, "links")) return false;
      for (size_t i = 0; i < links->array().size(); ++i) {
        if (!ParseLink(&r, links->array()[i], "links[" + std::to_string(i) + "]", spec)) {
          return false;
        }
      }
    }
    if (const Value* domains = root.Find("domains")) {
      if (!r.Expect(*domains, Value::Type::kArray, "domains")) return false;
      for (size_t i = 0; i < domains->array().size(); ++i) {
        if (!ParseDomain(&r, domains->array()[i], "domains[" + std::to_string(i) + "]", spec)) {
          return false;
        }
      }
    }
    if (const Value* labels = root.Find("labels")) {
      if (!r.Expect(*labels, Value::Type::kObject, "labels")) return false;
      for (const auto& [key, value] : labels->members()) {
        if (!r.Expect(value, Value::Type::kString, "labels." + key)) return false;
        spec->labels[key] = value.string();
      }
    }
    if (const Value* q = root.Find("valid_quantities")) {
      if (!r.Expect(*q, Value::Type::kArray, "valid_quantities")) return false;
      for (size_t i = 0; i < q->array().size(); ++i) {
        std::optional<uint64_t> n = q->array()[i].as_uint64();
        if (!n || *n == 0 || *n > 1u << 20) {
          return r.Error(q->array()[i], "valid_quantities[" + std::to_string(i) + "]",
                         "expected a whole number of at least 1");
        }
        spec->valid_quantities.push_back(static_cast<uint32_t>(*n));
      }
    }
    return true;
  };
  if (!parse()) {
    *error = r.error();
    return false;
  }
  return true;
}

bool LoadSpec(const std::string& path, SimSpec* spec, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot read the spec file";
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  constexpr size_t kMaxSpecBytes = 64 << 20;
  if (text.str().size() > kMaxSpecBytes) {
    *error = path + ": spec larger than 64 MiB";
    return false;
  }
  return ParseSpec(text.str(), path, spec, error);
}

}  // namespace rayaccel::sim
