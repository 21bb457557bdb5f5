#include "registry/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "registry/validate.h"

namespace rayaccel::wire {
namespace {

absl::Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    // MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE that kills us.
    ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("write: ", std::strerror(errno)));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t size,
                     std::chrono::steady_clock::time_point deadline) {
  while (size > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return absl::DeadlineExceededError("no answer in time");
    pollfd p{fd, POLLIN, 0};
    // poll() takes an int: wait in slices of at most ~24 days, the loop checks the deadline.
    int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), INT32_MAX)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError("the plugin host is gone");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string Text(rayaccel_string s) {
  if (s.data == nullptr) return "";
  return std::string(s.data, std::min(s.size, kMaxStringBytes + 1));  // oversize still refused
}

// The struct's fields that fit in its struct_size, written as JSON members.
class Fields {
 public:
  Fields(const char* call, size_t struct_size) {
    w_.BeginObject();
    w_.Key("call").String(call);
    w_.Key("struct_size").Uint(struct_size);
  }
  Fields& Str(const char* key, rayaccel_string s) {
    w_.Key(key).String(Text(s));
    return *this;
  }
  Fields& Num(const char* key, int64_t v) {
    w_.Key(key).Int(v);
    return *this;
  }
  json::Writer& writer() { return w_; }
  // The plugin passed NULL for the struct.
  std::string Null() {
    w_.Key("null").Bool(true);
    return Done();
  }
  std::string Done() {
    w_.EndObject();
    std::string out = w_.Finish();
    out.pop_back();  // newline
    return out;
  }

 private:
  json::Writer w_;
};

#define RAYACCEL_FIELD(ptr, type, field) ((ptr) != nullptr && RAYACCEL_HAS_FIELD(ptr, type, field))

}  // namespace

absl::Status WriteFrame(int fd, const std::string& payload) {
  if (payload.size() > kMaxFrameBytes) return absl::ResourceExhaustedError("frame too large");
  uint32_t n = static_cast<uint32_t>(payload.size());
  unsigned char len[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                          static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  if (absl::Status st = WriteAll(fd, reinterpret_cast<const char*>(len), 4); !st.ok()) return st;
  return WriteAll(fd, payload.data(), payload.size());
}

absl::StatusOr<std::string> ReadFrame(int fd, std::chrono::steady_clock::time_point deadline) {
  unsigned char len[4];
  if (absl::Status st = ReadAll(fd, reinterpret_cast<char*>(len), 4, deadline); !st.ok()) {
    return st;
  }
  uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
  if (n > kMaxFrameBytes) return absl::DataLossError("frame larger than 16 MiB");
  std::string payload(n, '\0');
  if (absl::Status st = ReadAll(fd, payload.data(), n, deadline); !st.ok()) return st;
  return payload;
}

const rayaccel_sink* Recorder::Wrap(const rayaccel_sink* inner) {
  inner_ = *inner;
  sink_ = rayaccel_sink{};
  sink_.struct_size = sizeof(sink_);
  sink_.host_context = this;
  sink_.add_device = &AddDevice;
  sink_.add_attribute = &AddAttribute;
  sink_.add_label = &AddLabel;
  sink_.add_link = &AddLink;
  sink_.add_domain = &AddDomain;
  sink_.set_health = &SetHealth;
  sink_.set_env = &SetEnv;
  return &sink_;
}

void Recorder::Write(json::Writer* w) const {
  w->BeginArray();
  for (const std::string& c : calls_) w->Raw(c);
  w->EndArray();
}

rayaccel_status Recorder::AddDevice(void* ctx, const rayaccel_device_info* d) {
  auto* self = static_cast<Recorder*>(ctx);
  if (d == nullptr) self->calls_.push_back(Fields("device", 0).Null());
  if (d != nullptr) {
    using T = rayaccel_device_info;
    Fields f("device", d->struct_size);
    if (RAYACCEL_FIELD(d, T, index)) f.Num("index", d->index);
    if (RAYACCEL_FIELD(d, T, id)) f.Str("id", d->id);
    if (RAYACCEL_FIELD(d, T, name)) f.Str("name", d->name);
    if (RAYACCEL_FIELD(d, T, accelerator_type)) f.Str("accelerator_type", d->accelerator_type);
    if (RAYACCEL_FIELD(d, T, architecture)) f.Str("architecture", d->architecture);
    if (RAYACCEL_FIELD(d, T, memory_bytes)) f.writer().Key("memory_bytes").Uint(d->memory_bytes);
    if (RAYACCEL_FIELD(d, T, pci_bus_id)) f.Str("pci_bus_id", d->pci_bus_id);
    if (RAYACCEL_FIELD(d, T, pci_vendor_id)) f.Num("pci_vendor_id", d->pci_vendor_id);
    if (RAYACCEL_FIELD(d, T, pci_device_id)) f.Num("pci_device_id", d->pci_device_id);
    if (RAYACCEL_FIELD(d, T, numa_node)) f.Num("numa_node", d->numa_node);
    if (RAYACCEL_FIELD(d, T, driver_version)) f.Str("driver_version", d->driver_version);
    if (RAYACCEL_FIELD(d, T, firmware_version)) f.Str("firmware_version", d->firmware_version);
    if (RAYACCEL_FIELD(d, T, parent_id)) f.Str("parent_id", d->parent_id);
    if (RAYACCEL_FIELD(d, T, partition_profile)) f.Str("partition_profile", d->partition_profile);
    if (RAYACCEL_FIELD(d, T, health)) {
      uint32_t raw = 0;
      std::memcpy(&raw, &d->health, sizeof(raw));
      f.Num("health", raw);
    }
    if (RAYACCEL_FIELD(d, T, health_reason)) f.Str("health_reason", d->health_reason);
    self->calls_.push_back(f.Done());
  }
  return self->inner_.add_device(self->inner_.host_context, d);
}

rayaccel_status Recorder::AddAttribute(void* ctx, const rayaccel_attribute* a) {
  auto* self = static_cast<Recorder*>(ctx);
  if (a == nullptr || !RAYACCEL_HAS_FIELD(a, rayaccel_attribute, int_value)) {
    // Recorded so that the registry refuses it as it would in-process.
    self->calls_.push_back(a == nullptr ? Fields("attribute", 0).Null()
                                        : Fields("attribute", a->struct_size).Done());
  } else {
    uint32_t kind = 0;
    std::memcpy(&kind, &a->kind, sizeof(kind));
    Fields f("attribute", a->struct_size);
    f.Num("device_index", a->device_index).Str("name", a->name).Num("kind", kind);
    f.Str("string_value", a->string_value).Num("int_value", a->int_value);
    self->calls_.push_back(f.Done());
  }
  return self->inner_.add_attribute(self->inner_.host_context, a);
}

rayaccel_status Recorder::AddLabel(void* ctx, rayaccel_string k, rayaccel_string v) {
  auto* self = static_cast<Recorder*>(ctx);
  Fields f("label", 0);
  f.Str("key", k).Str("value", v);
  self->calls_.push_back(f.Done());
  return self->inner_.add_label(self->inner_.host_context, k, v);
}

rayaccel_status Recorder::AddLink(void* ctx, const rayaccel_link* l) {
  auto* self = static_cast<Recorder*>(ctx);
  if (l == nullptr || !RAYACCEL_HAS_FIELD(l, rayaccel_link, type)) {
    self->calls_.push_back(l == nullptr ? Fields("link", 0).Null()
                                        : Fields("link", l->struct_size).Done());
  } else {
    using T = rayaccel_link;
    uint32_t type = 0, path = 0;
    std::memcpy(&type, &l->type, sizeof(type));
    Fields f("link", l->struct_size);
    f.Num("device_a", l->device_a).Num("device_b", l->device_b).Num("type", type);
    if (RAYACCEL_FIELD(l, T, pcie_path)) {
      std::memcpy(&path, &l->pcie_path, sizeof(path));
      f.Num("pcie_path", path);
    }
    if (RAYACCEL_FIELD(l, T, count)) f.Num("count", l->count);
    if (RAYACCEL_FIELD(l, T, bandwidth_mbps)) {
      f.writer().Key("bandwidth_mbps").Uint(l->bandwidth_mbps);
    }
    if (RAYACCEL_FIELD(l, T, weight)) f.Num("weight", l->weight);
    if (RAYACCEL_FIELD(l, T, hops)) f.Num("hops", l->hops);
    if (RAYACCEL_FIELD(l, T, min_bandwidth_mbps)) {
      f.writer().Key("min_bandwidth_mbps").Uint(l->min_bandwidth_mbps);
    }
    self->calls_.push_back(f.Done());
  }
  return self->inner_.add_link(self->inner_.host_context, l);
}

rayaccel_status Recorder::AddDomain(void* ctx, const rayaccel_domain* d) {
  auto* self = static_cast<Recorder*>(ctx);
  bool listable = d != nullptr && RAYACCEL_HAS_FIELD(d, rayaccel_domain, device_count) &&
                  d->device_count <= kMaxDevicesPerPlugin &&
                  (d->devices != nullptr || d->device_count == 0);
  if (!listable) {
    // Too small, NULL, or a member list the registry would refuse: recorded as refusable.
    Fields f("domain", d == nullptr ? 0 : d->struct_size);
    if (d != nullptr) f.Num("bad_devices", 1);
    self->calls_.push_back(d == nullptr ? f.Null() : f.Done());
  } else {
    Fields f("domain", d->struct_size);
    f.Str("kind", d->kind).Str("id", d->id);
    f.writer().Key("devices").BeginArray();
    for (size_t i = 0; i < d->device_count; ++i) f.writer().Uint(d->devices[i]);
    f.writer().EndArray();
    self->calls_.push_back(f.Done());
  }
  return self->inner_.add_domain(self->inner_.host_context, d);
}

rayaccel_status Recorder::SetHealth(void* ctx, uint32_t i, rayaccel_health h, rayaccel_string r) {
  auto* self = static_cast<Recorder*>(ctx);
  uint32_t raw = 0;
  std::memcpy(&raw, &h, sizeof(raw));
  Fields f("health", 0);
  f.Num("device_index", i).Num("health", raw).Str("reason", r);
  self->calls_.push_back(f.Done());
  return self->inner_.set_health(self->inner_.host_context, i, h, r);
}

rayaccel_status Recorder::SetEnv(void* ctx, rayaccel_string n, rayaccel_string v) {
  auto* self = static_cast<Recorder*>(ctx);
  Fields f("env", 0);
  f.Str("name", n).Str("value", v);
  self->calls_.push_back(f.Done());
  return self->inner_.set_env(self->inner_.host_context, n, v);
}

namespace {

// Field readers over a recorded call; absent or mistyped fields read as zero/empty.
struct Call {
  const json::Value& v;
  rayaccel_string Str(const char* key) const {
    const json::Value* f = v.Find(key);
    if (f == nullptr || !f->is_string()) return {nullptr, 0};
    return {f->string().data(), f->string().size()};
  }
  int64_t Int(const char* key) const {
    const json::Value* f = v.Find(key);
    std::optional<int64_t> n = f != nullptr ? f->as_int64() : std::nullopt;
    return n.value_or(0);
  }
  uint64_t Uint(const char* key) const {
    const json::Value* f = v.Find(key);
    std::optional<uint64_t> n = f != nullptr ? f->as_uint64() : std::nullopt;
    return n.value_or(0);
  }
  size_t Size(size_t host_size) const { return std::min<uint64_t>(Uint("struct_size"), host_size); }
};

template <typename E>
E Enum(int64_t raw) {
  E e;
  uint32_t bits = static_cast<uint32_t>(raw);
  std::memcpy(&e, &bits, sizeof(e));  // out-of-range values stay for the Collector to refuse
  return e;
}

}  // namespace

absl::Status Replay(const json::Value& calls, const rayaccel_sink* sink) {
  if (!calls.is_array()) return absl::DataLossError("the plugin host sent no call list");
  void* ctx = sink->host_context;
  for (const json::Value& v : calls.array()) {
    Call c{v};
    const json::Value* kind = v.Find("call");
    if (!v.is_object() || kind == nullptr || !kind->is_string()) {
      return absl::DataLossError("the plugin host sent a malformed call");
    }
    const std::string& k = kind->string();
    const json::Value* null = v.Find("null");
    bool is_null = null != nullptr && null->is_bool() && null->bool_value();
    if (is_null && k == "device") {
      sink->add_device(ctx, nullptr);
    } else if (is_null && k == "attribute") {
      sink->add_attribute(ctx, nullptr);
    } else if (is_null && k == "link") {
      sink->add_link(ctx, nullptr);
    } else if (is_null && k == "domain") {
      sink->add_domain(ctx, nullptr);
    } else if (k == "device") {
      rayaccel_device_info d{};
      d.struct_size = c.Size(sizeof(d));
      d.index = static_cast<uint32_t>(c.Uint("index"));
      d.id = c.Str("id");
      d.name = c.Str("name");
      d.accelerator_type = c.Str("accelerator_type");
      d.architecture = c.Str("architecture");
      d.memory_bytes = c.Uint("memory_bytes");
      d.pci_bus_id = c.Str("pci_bus_id");
      d.pci_vendor_id = static_cast<uint32_t>(c.Uint("pci_vendor_id"));
      d.pci_device_id = static_cast<uint32_t>(c.Uint("pci_device_id"));
      d.numa_node = static_cast<int32_t>(c.Int("numa_node"));
      d.driver_version = c.Str("driver_version");
      d.firmware_version = c.Str("firmware_version");
      d.parent_id = c.Str("parent_id");
      d.partition_profile = c.Str("partition_profile");
      d.health = Enum<rayaccel_health>(c.Int("health"));
      d.health_reason = c.Str("health_reason");
      sink->add_device(ctx, &d);
    } else if (k == "attribute") {
      rayaccel_attribute a{};
      a.struct_size = c.Size(sizeof(a));
      a.device_index = static_cast<uint32_t>(c.Uint("device_index"));
      a.name = c.Str("name");
      a.kind = Enum<rayaccel_attribute_kind>(c.Int("kind"));
      a.string_value = c.Str("string_value");
      a.int_value = c.Int("int_value");
      sink->add_attribute(ctx, &a);
    } else if (k == "label") {
      sink->add_label(ctx, c.Str("key"), c.Str("value"));
    } else if (k == "link") {
      rayaccel_link l{};
      l.struct_size = c.Size(sizeof(l));
      l.device_a = static_cast<uint32_t>(c.Uint("device_a"));
      l.device_b = static_cast<uint32_t>(c.Uint("device_b"));
      l.type = Enum<rayaccel_link_type>(c.Int("type"));
      l.pcie_path = Enum<rayaccel_pcie_path>(c.Int("pcie_path"));
      l.count = static_cast<uint32_t>(c.Uint("count"));
      l.bandwidth_mbps = c.Uint("bandwidth_mbps");
      l.weight = static_cast<uint32_t>(c.Uint("weight"));
      l.hops = static_cast<uint32_t>(c.Uint("hops"));
      l.min_bandwidth_mbps = c.Uint("min_bandwidth_mbps");
      sink->add_link(ctx, &l);
    } else if (k == "domain") {
      rayaccel_domain d{};
      d.struct_size = c.Size(sizeof(d));
      d.kind = c.Str("kind");
      d.id = c.Str("id");
      std::vector<uint32_t> members;
      if (const json::Value* list = v.Find("devices"); list != nullptr && list->is_array()) {
        for (const json::Value& m : list->array()) {
          members.push_back(static_cast<uint32_t>(m.as_uint64().value_or(UINT32_MAX)));
        }
      }
      d.devices = members.data();
      d.device_count = members.size();
      if (v.Find("bad_devices") != nullptr) {
        d.devices = nullptr;  // what the plugin sent could not be listed: refused as such
        d.device_count = kMaxDevicesPerPlugin + 1;
      }
      sink->add_domain(ctx, &d);
    } else if (k == "health") {
      sink->set_health(ctx, static_cast<uint32_t>(c.Uint("device_index")),
                       Enum<rayaccel_health>(c.Int("health")), c.Str("reason"));
    } else if (k == "env") {
      sink->set_env(ctx, c.Str("name"), c.Str("value"));
    } else {
      return absl::DataLossError("the plugin host sent an unknown call \"" + k + "\"");
    }
  }
  return absl::OkStatus();
}

}  // namespace rayaccel::wire
