// rayaccel._native: the Python binding of librayaccel's Registry. Thin on purpose: snapshots
// cross as plain dicts and lists (rayaccel/types.py makes them frozen dataclasses), errors as
// rayaccel.errors exceptions carrying the absl status code and message. Calls that may wait on
// plugins release the GIL.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rayaccel/registry.h"
#include "rayaccel/transport.h"

namespace py = pybind11;

namespace {

// An absl status as the Python exception of its code (rayaccel.errors), with its message.
struct StatusError {
  absl::Status status;
};

[[noreturn]] void Throw(const absl::Status& status) { throw StatusError{status}; }

py::dict AttributeDict(const std::vector<rayaccel::Attribute>& attributes) {
  py::dict out;
  for (const rayaccel::Attribute& a : attributes) {
    switch (a.kind) {
      case rayaccel::Attribute::Kind::kInt:
        out[py::str(a.name)] = py::int_(a.int_value);
        break;
      case rayaccel::Attribute::Kind::kBool:
        out[py::str(a.name)] = py::bool_(a.int_value != 0);
        break;
      default:
        out[py::str(a.name)] = py::str(a.string_value);
    }
  }
  return out;
}

py::dict SnapshotDict(const rayaccel::NodeSnapshot& s) {
  py::list plugins;
  for (const rayaccel::PluginStatus& p : s.plugins) {
    py::dict d;
    d["name"] = p.name;
    d["path"] = p.path;
    d["state"] = rayaccel::PluginStateName(p.state);
    d["message"] = p.message;
    d["abi_version"] = p.abi_version;
    d["vendor"] = p.vendor;
    d["version"] = p.plugin_version;
    d["resource"] = p.resource_name;
    d["visible_devices_env"] = p.visible_devices_env;
    d["capabilities"] = p.capabilities;
    d["device_count"] = p.device_count;
    plugins.append(d);
  }
  py::list devices;
  for (const rayaccel::Device& v : s.devices) {
    py::dict d;
    d["id"] = v.id;
    d["plugin"] = v.plugin;
    d["resource"] = v.resource;
    d["index"] = v.index;
    d["name"] = v.name;
    d["vendor"] = v.vendor;
    d["accelerator_type"] = v.accelerator_type;
    d["architecture"] = v.architecture;
    d["memory_bytes"] = v.memory_bytes;
    d["pci_bus_id"] = v.pci_bus_id;
    d["pci_vendor_id"] = v.pci_vendor_id;
    d["pci_device_id"] = v.pci_device_id;
    d["numa_node"] = v.numa_node >= 0 ? py::object(py::int_(v.numa_node)) : py::none();
    d["driver_version"] = v.driver_version;
    d["firmware_version"] = v.firmware_version;
    d["parent_id"] = v.parent_id;
    d["partition_profile"] = v.partition_profile;
    d["health"] = rayaccel::HealthName(v.health);
    d["health_reason"] = v.health_reason;
    d["attributes"] = AttributeDict(v.attributes);
    d["cpuset"] = v.cpuset;
    d["nearest_nics"] = v.nearest_nics;
    devices.append(d);
  }
  py::list links;
  for (const rayaccel::Link& l : s.links) {
    py::dict d;
    d["a"] = l.a;
    d["b"] = l.b;
    d["type"] = l.type_name.empty() ? rayaccel::LinkTypeName(l.type) : l.type_name;
    d["count"] = l.count;
    d["bandwidth_mbps"] = l.bandwidth_mbps;
    d["pcie_path"] = rayaccel::PciePathName(l.pcie_path);
    d["source"] = l.source;
    links.append(d);
  }
  py::list domains;
  for (const rayaccel::Domain& dom : s.domains) {
    py::dict d;
    d["plugin"] = dom.plugin;
    d["kind"] = dom.kind;
    d["id"] = dom.id;
    d["devices"] = dom.devices;
    domains.append(d);
  }
  py::dict out;
  out["generation"] = s.generation;
  out["plugins"] = plugins;
  out["devices"] = devices;
  out["links"] = links;
  out["domains"] = domains;
  out["host_topology"] = s.host_topology;
  out["resources"] = s.ray.resources;
  out["labels"] = s.ray.labels;
  return out;
}

// Holds the registry; the GIL is released around every call that may wait on a plugin.
class PyRegistry {
 public:
  PyRegistry(std::vector<std::string> plugins,
             std::map<std::string, std::map<std::string, std::string>> config,
             const std::string& isolation, std::vector<std::string> search_path,
             bool use_environment, bool host_topology, const std::string& hwloc_xml,
             const std::string& plugin_host, uint32_t call_timeout_ms,
             const std::string& config_file) {
    rayaccel::RegistryOptions options;
    options.plugins = std::move(plugins);
    options.config = std::move(config);
    options.config_file = config_file;
    options.search_path = std::move(search_path);
    options.use_environment = use_environment;
    options.host_topology = host_topology;
    options.hwloc_xml = hwloc_xml;
    options.plugin_host = plugin_host;
    options.call_timeout_ms = call_timeout_ms;
    if (isolation == "process") {
      options.isolation = rayaccel::RegistryOptions::Isolation::kChildProcess;
    } else if (isolation != "none") {
      Throw(absl::InvalidArgumentError("isolation is \"process\" or \"none\", not \"" + isolation +
                                       "\""));
    }
    absl::StatusOr<std::unique_ptr<rayaccel::Registry>> created;
    {
      py::gil_scoped_release unlocked;
      created = rayaccel::Registry::Create(std::move(options));
    }
    if (!created.ok()) Throw(created.status());
    registry_ = *std::move(created);
  }

  py::dict Snapshot() const { return SnapshotDict(*registry_->snapshot()); }

  py::dict Rescan() {
    std::shared_ptr<const rayaccel::NodeSnapshot> s;
    {
      py::gil_scoped_release unlocked;
      s = registry_->Rescan();
    }
    return SnapshotDict(*s);
  }

  py::dict WaitForNewer(uint64_t generation, double timeout_s) {
    std::shared_ptr<const rayaccel::NodeSnapshot> s;
    {
      py::gil_scoped_release unlocked;
      s = registry_->WaitForNewer(
          generation, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    }
    return SnapshotDict(*s);
  }

  // Registry::SampleTelemetry, each field None where the driver cannot say.
  py::dict Telemetry() const {
    rayaccel::Telemetry t;
    {
      py::gil_scoped_release unlocked;
      t = registry_->SampleTelemetry();
    }
    auto maybe = [](const rayaccel::DeviceSample& s, uint32_t bit, auto value) -> py::object {
      return (s.known & bit) != 0 ? py::cast(value) : py::none();
    };
    static const std::pair<uint32_t, const char*> kFields[] = {
        {RAYACCEL_SAMPLE_UTILIZATION, "utilization_percent"},
        {RAYACCEL_SAMPLE_MEMORY, "memory"},
        {RAYACCEL_SAMPLE_POWER, "power_mw"},
        {RAYACCEL_SAMPLE_TEMPERATURE, "temperature_c"},
        {RAYACCEL_SAMPLE_ECC, "ecc"},
        {RAYACCEL_SAMPLE_RETIRED_PAGES, "retired_pages"},
        {RAYACCEL_SAMPLE_LINK_ERRORS, "link_errors"}};
    py::list devices;
    for (const rayaccel::DeviceSample& s : t.devices) {
      py::dict d;
      d["device_id"] = s.device_id;
      d["plugin"] = s.plugin;
      d["index"] = s.index;
      d["utilization_percent"] = maybe(s, RAYACCEL_SAMPLE_UTILIZATION, s.utilization_percent);
      d["memory_used_bytes"] = maybe(s, RAYACCEL_SAMPLE_MEMORY, s.memory_used_bytes);
      d["memory_total_bytes"] = maybe(s, RAYACCEL_SAMPLE_MEMORY, s.memory_total_bytes);
      d["power_mw"] = maybe(s, RAYACCEL_SAMPLE_POWER, s.power_mw);
      d["temperature_c"] = maybe(s, RAYACCEL_SAMPLE_TEMPERATURE, s.temperature_c);
      d["ecc_corrected"] = maybe(s, RAYACCEL_SAMPLE_ECC, s.ecc_corrected);
      d["ecc_uncorrected"] = maybe(s, RAYACCEL_SAMPLE_ECC, s.ecc_uncorrected);
      d["retired_pages"] = maybe(s, RAYACCEL_SAMPLE_RETIRED_PAGES, s.retired_pages);
      d["link_errors"] = maybe(s, RAYACCEL_SAMPLE_LINK_ERRORS, s.link_errors);
      devices.append(d);
    }
    py::list plugins;
    for (const rayaccel::PluginTelemetry& p : t.plugins) {
      py::dict d;
      d["name"] = p.plugin;
      d["error"] = p.error;
      d["seconds"] = p.seconds;
      d["problems"] = p.problems;
      py::dict unknown;
      for (const auto& [fields, why] : p.unknown) {
        for (const auto& [bit, name] : kFields) {
          if ((fields & bit) != 0) unknown[name] = why;
        }
      }
      d["unknown"] = unknown;
      plugins.append(d);
    }
    py::dict out;
    out["unix_ms"] = t.unix_ms;
    out["devices"] = devices;
    out["plugins"] = plugins;
    return out;
  }

  void ValidateQuantity(const std::string& resource, uint32_t quantity) const {
    absl::Status st;
    {
      py::gil_scoped_release unlocked;
      st = registry_->ValidateQuantity(resource, quantity);
    }
    if (!st.ok()) Throw(st);
  }

  py::dict PreferredAllocation(const std::vector<std::string>& available,
                               const std::vector<std::string>& must_include, size_t size,
                               const std::string& resource) const {
    absl::StatusOr<rayaccel::Allocation> a;
    {
      py::gil_scoped_release unlocked;
      a = registry_->PreferredAllocation(available, must_include, size, resource);
    }
    if (!a.ok()) Throw(a.status());
    py::dict out;
    out["device_ids"] = a->device_ids;
    out["positions"] = a->devices;
    out["generation"] = a->generation;
    out["reason"] = a->reason;
    out["link_score"] = a->link_score;
    out["leftover_score"] = a->leftover_score;
    return out;
  }

  std::map<std::string, std::string> PrepareAllocation(const std::vector<std::string>& ids,
                                                       uint64_t generation) const {
    absl::StatusOr<std::map<std::string, std::string>> env;
    {
      py::gil_scoped_release unlocked;
      env = registry_->PrepareAllocation(ids, generation);
    }
    if (!env.ok()) Throw(env.status());
    return *std::move(env);
  }

  void Close() {
    py::gil_scoped_release unlocked;
    registry_->Shutdown();
  }

 private:
  std::unique_ptr<rayaccel::Registry> registry_;
};

// The bytes of any buffer-protocol object (NumPy arrays, bytearray, memoryview, a CPU tensor's
// NumPy view), which must be C-contiguous: a region is one range of addresses.
struct Span {
  void* data = nullptr;
  uint64_t size = 0;
};

Span Contiguous(const py::buffer& buffer, bool writable) {
  py::buffer_info info = buffer.request(writable);
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected) {
      Throw(
          absl::InvalidArgumentError("the buffer is not C-contiguous: copy it first "
                                     "(numpy.ascontiguousarray)"));
    }
    expected *= info.shape[d];
  }
  return {info.ptr, static_cast<uint64_t>(info.size * info.itemsize)};
}

// A transfer in flight; holds its transport, which must outlive it.
// Waits up to `timeout_s` (None: until it ends) without the GIL. True once it completed; False
// while still in flight; raises its error. A Request or a BatchRequest.
template <typename Request>
bool WaitWithoutGil(Request& request, std::optional<double> timeout_s) {
  absl::Status st;
  {
    py::gil_scoped_release unlocked;
    st = request.Wait(timeout_s.has_value() ? absl::Now() + absl::Seconds(*timeout_s)
                                            : absl::InfiniteFuture());
  }
  if (absl::IsDeadlineExceeded(st) && !request.done()) return false;
  if (!st.ok()) Throw(st);
  return true;
}

class PyRequest {
 public:
  PyRequest(std::shared_ptr<rayaccel::Transport> transport, rayaccel::Request request)
      : transport_(std::move(transport)), request_(std::move(request)) {}

  bool Wait(std::optional<double> timeout_s) { return WaitWithoutGil(request_, timeout_s); }

  // How the bytes move: "fabric", "staged", "device-ipc" or "unreported".
  std::string Path() const { return rayaccel::TransferPathName(request_.path()); }

 private:
  std::shared_ptr<rayaccel::Transport> transport_;
  rayaccel::Request request_;
};

// Many reads as one (Transport::ReadBatch): the tensors of one object.
class PyBatchRequest {
 public:
  PyBatchRequest(std::shared_ptr<rayaccel::Transport> transport, rayaccel::BatchRequest request)
      : transport_(std::move(transport)), request_(std::move(request)) {}

  // True once every entry landed; raises the first failed entry's error, saying how many.
  bool Wait(std::optional<double> timeout_s) { return WaitWithoutGil(request_, timeout_s); }

  std::vector<std::string> Paths() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < request_.size(); ++i) {
      out.push_back(rayaccel::TransferPathName(request_.path(i)));
    }
    return out;
  }

 private:
  std::shared_ptr<rayaccel::Transport> transport_;
  rayaccel::BatchRequest request_;
};

class PyTransport {
 public:
  PyTransport(const std::string& plugin, std::map<std::string, std::string> config,
              std::vector<std::string> search_path, double peer_timeout_s, py::bytes key,
              const std::string& key_file) {
    rayaccel::TransportOptions options;
    options.key = std::string(key);
    options.key_file = key_file;
    options.plugin = plugin;
    options.config = std::move(config);
    options.search_path = std::move(search_path);
    options.peer_timeout = absl::Seconds(peer_timeout_s);
    absl::StatusOr<std::unique_ptr<rayaccel::Transport>> opened;
    {
      py::gil_scoped_release unlocked;
      opened = rayaccel::Transport::Open(options);
    }
    if (!opened.ok()) Throw(opened.status());
    transport_ = std::shared_ptr<rayaccel::Transport>(std::move(*opened));
  }

  py::bytes Address() const { return py::bytes(transport_->address()); }
  std::string PluginName() const { return transport_->plugin_name(); }

  uint64_t Register(const py::buffer& buffer, bool writable) {
    Span span = Contiguous(buffer, writable);
    absl::StatusOr<uint64_t> region = transport_->Register(span.data, span.size);
    if (!region.ok()) Throw(region.status());
    return *region;
  }

  // Device memory of the plugin's device `device` (its own index) at [address, address +
  // length): the plugin's driver checks it.
  uint64_t RegisterDevice(uintptr_t address, uint64_t length, uint32_t device) {
    absl::StatusOr<uint64_t> region;
    {
      py::gil_scoped_release unlocked;
      region = transport_->Register(reinterpret_cast<void*>(address),  // NOLINT: an address
                                    length, rayaccel::MemoryKind::kDevice, device);
    }
    if (!region.ok()) Throw(region.status());
    return *region;
  }

  void Deregister(uint64_t region) {
    absl::Status st;
    {
      py::gil_scoped_release unlocked;
      st = transport_->Deregister(region);
    }
    if (!st.ok()) Throw(st);
  }

  py::bytes Describe(uint64_t region) const {
    absl::StatusOr<std::string> d = transport_->Describe(region);
    if (!d.ok()) Throw(d.status());
    return py::bytes(*d);
  }

  uint64_t Connect(const py::bytes& peer) {
    const std::string address = peer;
    absl::StatusOr<uint64_t> connection;
    {
      py::gil_scoped_release unlocked;
      connection = transport_->Connect(address);
    }
    if (!connection.ok()) Throw(connection.status());
    return *connection;
  }

  void Close(uint64_t connection) {
    absl::Status st;
    {
      py::gil_scoped_release unlocked;
      st = transport_->Close(connection);
    }
    if (!st.ok()) Throw(st);
  }

  PyRequest Read(uint64_t connection, uint64_t local, uint64_t local_offset,
                 const py::bytes& descriptor, uint64_t remote_offset, uint64_t length) {
    const std::string d = descriptor;
    absl::StatusOr<rayaccel::Request> r;
    {
      py::gil_scoped_release unlocked;
      r = transport_->Read(connection, local, local_offset, d, remote_offset, length);
    }
    if (!r.ok()) Throw(r.status());
    return PyRequest(transport_, *std::move(r));
  }

  // entries: (local region, local offset, descriptor, remote offset, length) each.
  PyBatchRequest ReadBatch(
      uint64_t connection,
      const std::vector<std::tuple<uint64_t, uint64_t, py::bytes, uint64_t, uint64_t>>& entries) {
    std::vector<rayaccel::TransferEntry> batch;
    batch.reserve(entries.size());
    for (const auto& [local, local_offset, descriptor, remote_offset, length] : entries) {
      batch.push_back({local, local_offset, std::string(descriptor), remote_offset, length});
    }
    absl::StatusOr<rayaccel::BatchRequest> r;
    {
      py::gil_scoped_release unlocked;
      r = transport_->ReadBatch(connection, batch);
    }
    if (!r.ok()) Throw(r.status());
    return PyBatchRequest(transport_, *std::move(r));
  }

  // Transport::Stats() as plain Python values (docs/python.md).
  py::dict Stats() const {
    const rayaccel::TransportStats s = transport_->Stats();
    py::dict out, transfers, latency;
    const char* ops[] = {"read", "write"};
    for (int op = 0; op < 2; ++op) {
      py::dict by_path;
      for (int path = 0; path < rayaccel::kTransferPaths; ++path) {
        const rayaccel::TransportStats::Transfers& t = s.transfers[op][path];
        py::dict d;
        d["completed"] = t.completed;
        d["bytes"] = t.bytes;
        d["failed"] = t.failed;
        by_path[rayaccel::TransferPathName(static_cast<rayaccel::TransferPath>(path))] = d;
      }
      transfers[ops[op]] = by_path;
      const rayaccel::TransportStats::Latency& l = s.latency[op];
      py::dict d;
      d["bounds_seconds"] = l.bounds;
      d["counts"] = l.counts;
      d["sum_seconds"] = l.sum_seconds;
      d["count"] = l.count;
      latency[ops[op]] = d;
    }
    out["transfers"] = transfers;
    out["latency"] = latency;
    out["connections"] = s.connections;
    out["connections_opened"] = s.connections_opened;
    out["peers_lost"] = s.peers_lost;
    out["regions"] = s.regions;
    out["registered_bytes"] = s.registered_bytes;
    out["notifications_sent"] = s.notifications_sent;
    out["notifications_received"] = s.notifications_received;
    return out;
  }

  static py::dict Inspect(const py::bytes& descriptor) {
    absl::StatusOr<rayaccel::DescriptorInfo> info =
        rayaccel::Transport::Inspect(std::string(descriptor));
    if (!info.ok()) Throw(info.status());
    py::dict out;
    out["plugin"] = info->plugin;
    out["endpoint"] = info->endpoint;
    out["region"] = info->region;
    out["length"] = info->length;
    return out;
  }

 private:
  std::shared_ptr<rayaccel::Transport> transport_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "librayaccel's Registry (use the rayaccel package, not this module)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object raise = py::module_::import("rayaccel.errors").attr("_from_status");
      py::object error = raise(static_cast<int>(e.status.code()), std::string(e.status.message()));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    }
  });
  py::class_<PyRegistry>(m, "Registry")
      .def(py::init<std::vector<std::string>,
                    std::map<std::string, std::map<std::string, std::string>>, const std::string&,
                    std::vector<std::string>, bool, bool, const std::string&, const std::string&,
                    uint32_t, const std::string&>(),
           py::arg("plugins"), py::arg("config"), py::arg("isolation"), py::arg("search_path"),
           py::arg("use_environment"), py::arg("host_topology"), py::arg("hwloc_xml"),
           py::arg("plugin_host"), py::arg("call_timeout_ms"), py::arg("config_file"))
      .def("snapshot", &PyRegistry::Snapshot)
      .def("rescan", &PyRegistry::Rescan)
      .def("wait_for_newer", &PyRegistry::WaitForNewer)
      .def("validate_quantity", &PyRegistry::ValidateQuantity)
      .def("telemetry", &PyRegistry::Telemetry)
      .def("preferred_allocation", &PyRegistry::PreferredAllocation)
      .def("prepare_allocation", &PyRegistry::PrepareAllocation)
      .def("close", &PyRegistry::Close);
  py::class_<PyRequest>(m, "Request")
      .def("wait", &PyRequest::Wait, py::arg("timeout") = py::none())
      .def_property_readonly("path", &PyRequest::Path);
  py::class_<PyBatchRequest>(m, "BatchRequest")
      .def("wait", &PyBatchRequest::Wait, py::arg("timeout") = py::none())
      .def_property_readonly("paths", &PyBatchRequest::Paths);
  py::class_<PyTransport>(m, "Transport")
      .def(py::init<const std::string&, std::map<std::string, std::string>,
                    std::vector<std::string>, double, py::bytes, const std::string&>(),
           py::arg("plugin"), py::arg("config"), py::arg("search_path"), py::arg("peer_timeout"),
           py::arg("key") = py::bytes(), py::arg("key_file") = "")
      .def_property_readonly("address", &PyTransport::Address)
      .def_property_readonly("plugin_name", &PyTransport::PluginName)
      .def("register", &PyTransport::Register, py::arg("buffer"), py::arg("writable"))
      .def("register_device", &PyTransport::RegisterDevice, py::arg("address"), py::arg("length"),
           py::arg("device"))
      .def("deregister", &PyTransport::Deregister)
      .def("describe", &PyTransport::Describe)
      .def("connect", &PyTransport::Connect)
      .def("close", &PyTransport::Close)
      .def("read", &PyTransport::Read)
      .def("read_batch", &PyTransport::ReadBatch)
      .def("stats", &PyTransport::Stats)
      .def_static("inspect", &PyTransport::Inspect);
}
