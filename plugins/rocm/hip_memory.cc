#include "rocm/hip_memory.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "common/plugin_util.h"

namespace rayaccel::rocm {
namespace {

using plugin::Resolve;

// HIP's types and values (hip_runtime_api.h), for the calls made here.
using hipError_t = int;
constexpr hipError_t hipSuccess = 0;
constexpr hipError_t hipErrorOutOfMemory = 2;
constexpr int hipMemcpyHostToDevice = 1;
constexpr int hipMemcpyDeviceToHost = 2;
constexpr int hipMemcpyDefault = 4;
constexpr unsigned hipStreamNonBlocking = 1;
constexpr unsigned hipIpcMemLazyEnablePeerAccess = 1;
constexpr unsigned hipHostMallocPortable = 1;
struct hipIpcMemHandle_t {
  char reserved[64];  // HIP_IPC_HANDLE_SIZE
};
using hipStream_t = void*;
// hipPointerAttribute_t: ROCm 6 made the first field a union of `memoryType` and `type` and
// renumbered hipMemoryType after CUDA's (Device 2; ROCm 5: 1); the layout is the same.
struct hipPointerAttribute_t {
  int memoryType;
  int device;
  void* devicePointer;
  void* hostPointer;
  int isManaged;
  unsigned allocationFlags;
};
// HIP_VERSION = major * 10000000 + minor * 100000 + patch.
constexpr int kRocm6 = 60000000;

struct Hip {
  void* handle = nullptr;
  hipError_t (*Init)(unsigned) = nullptr;
  hipError_t (*RuntimeGetVersion)(int*) = nullptr;
  hipError_t (*GetDeviceCount)(int*) = nullptr;
  hipError_t (*DeviceGetPCIBusId)(char*, int, int) = nullptr;
  hipError_t (*GetDevice)(int*) = nullptr;
  hipError_t (*SetDevice)(int) = nullptr;
  hipError_t (*Malloc)(void**, size_t) = nullptr;
  hipError_t (*Free)(void*) = nullptr;
  hipError_t (*Memcpy)(void*, const void*, size_t, int) = nullptr;
  hipError_t (*PointerGetAttributes)(hipPointerAttribute_t*, const void*) = nullptr;
  hipError_t (*MemGetAddressRange)(void**, size_t*, void*) = nullptr;
  // IPC and copies on a stream: optional (without them device memory is staged).
  hipError_t (*IpcGetMemHandle)(hipIpcMemHandle_t*, void*) = nullptr;
  hipError_t (*IpcOpenMemHandle)(void**, hipIpcMemHandle_t, unsigned) = nullptr;
  hipError_t (*IpcCloseMemHandle)(void*) = nullptr;
  hipError_t (*StreamCreateWithFlags)(hipStream_t*, unsigned) = nullptr;
  hipError_t (*StreamSynchronize)(hipStream_t) = nullptr;
  hipError_t (*MemcpyAsync)(void*, const void*, size_t, int, hipStream_t) = nullptr;
  hipError_t (*HostMalloc)(void**, size_t, unsigned) = nullptr;  // optional, like IPC
  hipError_t (*HostFree)(void*) = nullptr;
  const char* (*GetErrorName)(hipError_t) = nullptr;
  const char* (*GetErrorString)(hipError_t) = nullptr;
  int version = 0;

  // "hipMalloc: hipErrorOutOfMemory (out of memory)", the runtime's own words.
  std::string Error(const char* call, hipError_t e) const {
    return plugin::RuntimeError(call, GetErrorName != nullptr ? GetErrorName(e) : nullptr,
                                GetErrorString != nullptr ? GetErrorString(e) : nullptr,
                                "hipError_t " + std::to_string(e));
  }
};

class HipRuntime : public plugin::GpuRuntime {
 public:
  explicit HipRuntime(std::vector<std::string> libraries) : libraries_(std::move(libraries)) {}
  ~HipRuntime() override { rayaccel::plugin::CloseLibrary(h_.handle); }
  const char* name() const override { return "HIP"; }
  const char* visible_variable() const override { return "HIP_VISIBLE_DEVICES"; }

  bool Load(std::string* why) override {
    std::string tried;
    for (const std::string& library : libraries_) {
      h_.handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h_.handle != nullptr) break;
      const char* e = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(e != nullptr ? e : library);
    }
    if (h_.handle == nullptr) {
      *why = "cannot load the HIP runtime: " + tried;
      return false;
    }
    void* l = h_.handle;
    bool ok = Resolve(l, "hipInit", &h_.Init) &&
              Resolve(l, "hipRuntimeGetVersion", &h_.RuntimeGetVersion) &&
              Resolve(l, "hipGetDeviceCount", &h_.GetDeviceCount) &&
              Resolve(l, "hipDeviceGetPCIBusId", &h_.DeviceGetPCIBusId) &&
              Resolve(l, "hipGetDevice", &h_.GetDevice) &&
              Resolve(l, "hipSetDevice", &h_.SetDevice) && Resolve(l, "hipMalloc", &h_.Malloc) &&
              Resolve(l, "hipFree", &h_.Free) && Resolve(l, "hipMemcpy", &h_.Memcpy) &&
              Resolve(l, "hipPointerGetAttributes", &h_.PointerGetAttributes) &&
              Resolve(l, "hipMemGetAddressRange", &h_.MemGetAddressRange);
    ipc_ = Resolve(l, "hipIpcGetMemHandle", &h_.IpcGetMemHandle) &&
           Resolve(l, "hipIpcOpenMemHandle", &h_.IpcOpenMemHandle) &&
           Resolve(l, "hipIpcCloseMemHandle", &h_.IpcCloseMemHandle) &&
           Resolve(l, "hipStreamCreateWithFlags", &h_.StreamCreateWithFlags) &&
           Resolve(l, "hipStreamSynchronize", &h_.StreamSynchronize) &&
           Resolve(l, "hipMemcpyAsync", &h_.MemcpyAsync);
    Resolve(l, "hipHostMalloc", &h_.HostMalloc);
    Resolve(l, "hipHostFree", &h_.HostFree);
    Resolve(l, "hipGetErrorName", &h_.GetErrorName);
    Resolve(l, "hipGetErrorString", &h_.GetErrorString);
    if (!ok) {
      *why = "the HIP runtime lacks an entry point the transport needs";
      return false;
    }
    if (hipError_t e = h_.Init(0); e != hipSuccess) {
      *why = h_.Error("hipInit", e);
      return false;
    }
    if (h_.RuntimeGetVersion(&h_.version) != hipSuccess) h_.version = 0;
    return true;
  }

  std::map<std::string, int> Devices() override {
    std::map<std::string, int> out;
    int count = 0;
    if (h_.GetDeviceCount(&count) != hipSuccess) return out;
    for (int i = 0; i < count; ++i) {
      char bus[32] = {};
      if (h_.DeviceGetPCIBusId(bus, sizeof(bus), i) == hipSuccess) out[bus] = i;
    }
    return out;
  }

  // HIP's current device is the calling thread's: put back what the caller had.
  bool Enter(int ordinal, std::string* why) override {
    if (h_.GetDevice(&previous_) != hipSuccess) previous_ = -1;
    if (hipError_t e = h_.SetDevice(ordinal); e != hipSuccess) {
      *why = h_.Error("hipSetDevice", e);
      return false;
    }
    current_ = ordinal;
    return true;
  }
  void Leave() override {
    if (previous_ >= 0) h_.SetDevice(previous_);
  }

  rayaccel_status HostAlloc(uint64_t n, void** p, std::string* why) override {
    if (h_.HostMalloc == nullptr || h_.HostFree == nullptr) {
      return plugin::GpuRuntime::HostAlloc(n, p, why);
    }
    if (hipError_t e = h_.HostMalloc(p, n, hipHostMallocPortable); e != hipSuccess) {
      *why = h_.Error("hipHostMalloc", e);
      return e == hipErrorOutOfMemory ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED
                                      : RAYACCEL_STATUS_INTERNAL;
    }
    return RAYACCEL_STATUS_OK;
  }
  void HostFree(void* p) override {
    if (h_.HostFree != nullptr) h_.HostFree(p);
  }

  rayaccel_status Find(const void* address, Allocation* out, std::string* why) override {
    hipPointerAttribute_t attributes{};
    if (hipError_t e = h_.PointerGetAttributes(&attributes, address); e != hipSuccess) {
      *why = "not HIP device memory (a host, freed or foreign pointer): " +
             h_.Error("hipPointerGetAttributes", e);
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    const int device_type = h_.version >= kRocm6 ? 2 : 1;
    if (attributes.memoryType != device_type) {
      *why = "HIP memory of type " + std::to_string(attributes.memoryType) + ", not device memory";
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    void* base = nullptr;
    size_t size = 0;
    if (hipError_t e = h_.MemGetAddressRange(&base, &size, const_cast<void*>(address));
        e != hipSuccess) {
      *why = h_.Error("hipMemGetAddressRange", e);
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    out->ordinal = attributes.device;
    out->start = reinterpret_cast<uintptr_t>(base);
    out->size = size;
    return RAYACCEL_STATUS_OK;
  }

  rayaccel_status Allocate(uint64_t n, void** p, std::string* why) override {
    if (hipError_t e = h_.Malloc(p, n); e != hipSuccess) {
      *why = h_.Error("hipMalloc", e);
      return e == hipErrorOutOfMemory ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED
                                      : RAYACCEL_STATUS_INTERNAL;
    }
    return RAYACCEL_STATUS_OK;
  }

  void Free(void* p) override { h_.Free(p); }

  rayaccel_status ToHost(void* host, const void* device, uint64_t n, std::string* why) override {
    hipError_t e = h_.Memcpy(host, device, n, hipMemcpyDeviceToHost);
    if (e == hipSuccess) return RAYACCEL_STATUS_OK;
    *why = h_.Error("hipMemcpy", e);
    return RAYACCEL_STATUS_INTERNAL;
  }

  rayaccel_status FromHost(void* device, const void* host, uint64_t n, std::string* why) override {
    hipError_t e = h_.Memcpy(device, host, n, hipMemcpyHostToDevice);
    if (e == hipSuccess) return RAYACCEL_STATUS_OK;
    *why = h_.Error("hipMemcpy", e);
    return RAYACCEL_STATUS_INTERNAL;
  }

  rayaccel_status IpcExport(const void* start, std::string* handle, std::string* why) override {
    if (!ipc_) return plugin::GpuRuntime::IpcExport(start, handle, why);
    hipIpcMemHandle_t h{};
    if (hipError_t e = h_.IpcGetMemHandle(&h, const_cast<void*>(start)); e != hipSuccess) {
      *why = h_.Error("hipIpcGetMemHandle", e);
      return RAYACCEL_STATUS_UNSUPPORTED;
    }
    handle->assign(h.reserved, sizeof(h.reserved));
    return RAYACCEL_STATUS_OK;
  }

  rayaccel_status IpcOpen(const std::string& handle, void** p, std::string* why) override {
    if (!ipc_) return plugin::GpuRuntime::IpcOpen(handle, p, why);
    hipIpcMemHandle_t h{};
    if (handle.size() != sizeof(h.reserved)) {
      *why = "a HIP IPC handle of " + std::to_string(handle.size()) + " bytes, not 64";
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
    if (hipError_t e = h_.IpcOpenMemHandle(p, h, hipIpcMemLazyEnablePeerAccess); e != hipSuccess) {
      *why = h_.Error("hipIpcOpenMemHandle", e);
      return RAYACCEL_STATUS_UNSUPPORTED;
    }
    return RAYACCEL_STATUS_OK;
  }

  void IpcClose(void* p) override {
    if (ipc_) h_.IpcCloseMemHandle(p);
  }

  // hipMemcpyAsync on a non-blocking stream of this device's, then a wait for it alone.
  rayaccel_status Copy(void* to, const void* from, uint64_t n, std::string* why) override {
    if (!ipc_) return plugin::GpuRuntime::Copy(to, from, n, why);
    hipStream_t stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hipStream_t& held = streams_[current_];
      if (held == nullptr) {
        if (hipError_t e = h_.StreamCreateWithFlags(&held, hipStreamNonBlocking); e != hipSuccess) {
          streams_.erase(current_);
          *why = h_.Error("hipStreamCreateWithFlags", e);
          return RAYACCEL_STATUS_INTERNAL;
        }
      }
      stream = held;
    }
    if (hipError_t e = h_.MemcpyAsync(to, from, n, hipMemcpyDefault, stream); e != hipSuccess) {
      *why = h_.Error("hipMemcpyAsync", e);
      return RAYACCEL_STATUS_INTERNAL;
    }
    if (hipError_t e = h_.StreamSynchronize(stream); e != hipSuccess) {
      *why = h_.Error("hipStreamSynchronize", e);
      return RAYACCEL_STATUS_INTERNAL;
    }
    return RAYACCEL_STATUS_OK;
  }

 private:
  const std::vector<std::string> libraries_;
  Hip h_;
  bool ipc_ = false;
  std::mutex mu_;                       // guards streams_
  std::map<int, hipStream_t> streams_;  // the transport's own, by ordinal
  static thread_local int previous_;
  static thread_local int current_;  // the ordinal Enter made current on this thread
};

thread_local int HipRuntime::previous_ = -1;
thread_local int HipRuntime::current_ = -1;

}  // namespace

std::unique_ptr<plugin::GpuMemory> MakeHipMemory(std::vector<std::string> libraries, bool ipc,
                                                 std::function<plugin::GpuMemory::BusIds()> list) {
  return std::make_unique<plugin::GpuMemory>(std::make_unique<HipRuntime>(std::move(libraries)),
                                             std::move(list), ipc);
}

}  // namespace rayaccel::rocm
