#include "common/gpu_memory.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace rayaccel::plugin {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::string RuntimeError(const char* call, const char* name, const char* text,
                         const std::string& code) {
  std::string out = std::string(call) + ": " + (name != nullptr ? name : code);
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

rayaccel_status GpuRuntime::IpcExport(const void* /*start*/, std::string* /*handle*/,
                                      std::string* why) {
  *why = std::string(name()) + " IPC is not available here";
  return RAYACCEL_STATUS_UNSUPPORTED;
}

rayaccel_status GpuRuntime::IpcOpen(const std::string& /*handle*/, void** /*p*/, std::string* why) {
  *why = std::string(name()) + " IPC is not available here";
  return RAYACCEL_STATUS_UNSUPPORTED;
}

void GpuRuntime::IpcClose(void* /*p*/) {}

rayaccel_status GpuRuntime::Copy(void* /*to*/, const void* /*from*/, uint64_t /*n*/,
                                 std::string* why) {
  *why = std::string(name()) + " copies between arbitrary memory are not available here";
  return RAYACCEL_STATUS_UNSUPPORTED;
}

rayaccel_status GpuRuntime::HostAlloc(uint64_t /*n*/, void** /*p*/, std::string* why) {
  *why = std::string(name()) + " page-locked host memory is not available here";
  return RAYACCEL_STATUS_UNSUPPORTED;
}

void GpuRuntime::HostFree(void* /*p*/) {}

GpuMemory::GpuMemory(std::unique_ptr<GpuRuntime> runtime, std::function<BusIds()> list, bool ipc)
    : runtime_(std::move(runtime)), list_(std::move(list)), ipc_(ipc) {}

void GpuMemory::SetDevices(BusIds bus_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, id] : bus_ids) id = Lower(id);
  bus_ids_ = std::move(bus_ids);
}

std::string GpuMemory::BusIdOf(uint32_t device) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = bus_ids_.find(device); it != bus_ids_.end()) return it->second;
  }
  SetDevices(list_());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = bus_ids_.find(device);
  return it == bus_ids_.end() ? "" : it->second;
}

rayaccel_status GpuMemory::Enter(uint32_t device, int* ordinal, std::string* why) {
  const std::string bus = BusIdOf(device);
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_ && unavailable_.empty()) {
    if (runtime_->Load(&unavailable_)) {
      loaded_ = true;
      for (auto& [id, n] : runtime_->Devices()) ordinals_[Lower(id)] = n;
    } else if (unavailable_.empty()) {
      unavailable_ = std::string(runtime_->name()) + " cannot be loaded";
    }
  }
  if (!loaded_) {  // the memory kind cannot be reached on this host
    *why = unavailable_;
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  if (bus.empty()) {
    *why = "device " + std::to_string(device) +
           " is not a GPU whose memory this plugin copies (a partition, a GPU the plugin no "
           "longer lists, or no device of this plugin)";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  auto found = ordinals_.find(bus);
  if (found == ordinals_.end()) {
    *why = "GPU " + bus + " (device " + std::to_string(device) + ") is not among the GPUs " +
           runtime_->name() + " shows this process (" + runtime_->visible_variable() + ")";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  *ordinal = found->second;
  return runtime_->Enter(*ordinal, why) ? RAYACCEL_STATUS_OK : RAYACCEL_STATUS_UNAVAILABLE;
}

rayaccel_status GpuMemory::Check(const void* address, uint64_t length, uint32_t device,
                                 std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  GpuRuntime::Allocation a;
  rayaccel_status st = runtime_->Find(address, &a, why);
  const auto p = reinterpret_cast<uintptr_t>(address);
  const std::string name = runtime_->name();
  if (st != RAYACCEL_STATUS_OK) {
    // the runtime said why
  } else if (a.ordinal != ordinal) {
    *why = "memory of " + name + " device " + std::to_string(a.ordinal) + ", not of device " +
           std::to_string(device) + " (" + name + " device " + std::to_string(ordinal) + ")";
    st = RAYACCEL_STATUS_INVALID_ARGUMENT;
  } else if (p < a.start || p - a.start > a.size || length > a.size - (p - a.start)) {
    *why = std::to_string(length) + " bytes at offset " + std::to_string(p - a.start) +
           " run past the end of their " + std::to_string(a.size) + "-byte allocation";
    st = RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  runtime_->Leave();
  return st;
}

rayaccel_status GpuMemory::Allocate(uint32_t device, uint64_t length, void** address,
                                    std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  rayaccel_status st = runtime_->Allocate(length, address, why);
  runtime_->Leave();
  return st;
}

void GpuMemory::Free(void* address, uint32_t device) {
  int ordinal = 0;
  std::string why;
  if (Enter(device, &ordinal, &why) != RAYACCEL_STATUS_OK) return;
  runtime_->Free(address);
  runtime_->Leave();
}

rayaccel_status GpuMemory::ToHost(void* host, const void* device_memory, uint64_t length,
                                  uint32_t device, std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  rayaccel_status st = runtime_->ToHost(host, device_memory, length, why);
  runtime_->Leave();
  return st;
}

rayaccel_status GpuMemory::FromHost(void* device_memory, const void* host, uint64_t length,
                                    uint32_t device, std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  rayaccel_status st = runtime_->FromHost(device_memory, host, length, why);
  runtime_->Leave();
  return st;
}

// A handle names its runtime first, so that one runtime never opens another's.
rayaccel_status GpuMemory::Export(const void* address, uint64_t length, uint32_t device,
                                  std::string* handle, std::string* why) {
  if (!ipc_) {
    *why = "device_ipc is off in the plugin's configuration";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  GpuRuntime::Allocation a;
  rayaccel_status st = runtime_->Find(address, &a, why);
  if (st == RAYACCEL_STATUS_OK &&
      (a.start != reinterpret_cast<uintptr_t>(address) || a.size != length)) {
    *why = "the region is part of a " + std::to_string(a.size) +
           "-byte allocation, and a mapping would reach all of it";
    st = RAYACCEL_STATUS_UNSUPPORTED;
  }
  std::string raw;
  if (st == RAYACCEL_STATUS_OK) st = runtime_->IpcExport(address, &raw, why);
  runtime_->Leave();
  if (st == RAYACCEL_STATUS_OK) *handle = std::string(runtime_->name()) + '\0' + raw;
  return st;
}

rayaccel_status GpuMemory::Import(const std::string& handle, uint32_t device, uint64_t length,
                                  void** mapped, std::string* why) {
  if (!ipc_) {
    *why = "device_ipc is off in the plugin's configuration";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  const std::string prefix = std::string(runtime_->name()) + '\0';
  if (handle.compare(0, prefix.size(), prefix) != 0) {
    *why = std::string("the handle is not a ") + runtime_->name() + " IPC handle";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  void* p = nullptr;
  rayaccel_status st = runtime_->IpcOpen(handle.substr(prefix.size()), &p, why);
  GpuRuntime::Allocation a;
  if (st == RAYACCEL_STATUS_OK) st = runtime_->Find(p, &a, why);
  if (st == RAYACCEL_STATUS_OK && (a.start != reinterpret_cast<uintptr_t>(p) || a.size != length)) {
    *why = "the handle maps " + std::to_string(a.size) + " bytes, the owner named " +
           std::to_string(length);
    st = RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  if (st != RAYACCEL_STATUS_OK && p != nullptr) runtime_->IpcClose(p);
  runtime_->Leave();
  if (st == RAYACCEL_STATUS_OK) *mapped = p;
  return st;
}

void GpuMemory::Unimport(void* mapped, uint32_t device) {
  int ordinal = 0;
  std::string why;
  if (Enter(device, &ordinal, &why) != RAYACCEL_STATUS_OK) return;
  runtime_->IpcClose(mapped);
  runtime_->Leave();
}

rayaccel_status GpuMemory::Copy(void* to, const void* from, uint64_t length, uint32_t device,
                                std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  rayaccel_status st = runtime_->Copy(to, from, length, why);
  runtime_->Leave();
  return st;
}

rayaccel_status GpuMemory::HostAlloc(uint32_t device, uint64_t length, void** host,
                                     std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Enter(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  rayaccel_status st = runtime_->HostAlloc(length, host, why);
  runtime_->Leave();
  return st;
}

void GpuMemory::HostFree(void* host, uint32_t device) {
  int ordinal = 0;
  std::string why;
  if (Enter(device, &ordinal, &why) != RAYACCEL_STATUS_OK) return;
  runtime_->HostFree(host);
  runtime_->Leave();
}

}  // namespace rayaccel::plugin
