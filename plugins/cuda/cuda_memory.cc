#include "cuda/cuda_memory.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "common/plugin_util.h"

namespace rayaccel::cuda {
namespace {

using plugin::Resolve;

// The driver API's types and values (cuda.h), for the calls made here.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): the driver API's own type
using CUcontext = void*;
using CUstream = void*;
struct CUipcMemHandle {
  char reserved[64];
};
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
constexpr int CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;
constexpr int CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;
constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1;
constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 1;

struct Driver {
  void* handle = nullptr;
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*PrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*CtxPush)(CUcontext) = nullptr;
  CUresult (*CtxPop)(CUcontext*) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*PointerGetAttribute)(void*, int, CUdeviceptr) = nullptr;
  // IPC and copies on a stream: optional (without them device memory is staged).
  CUresult (*IpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*IpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned) = nullptr;
  CUresult (*IpcCloseMemHandle)(CUdeviceptr) = nullptr;
  CUresult (*StreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*StreamSynchronize)(CUstream) = nullptr;
  CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*MemHostAlloc)(void**, size_t, unsigned) = nullptr;  // optional, like IPC
  CUresult (*MemFreeHost)(void*) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;

  // "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", the driver's own words.
  std::string Error(const char* call, CUresult r) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (GetErrorName == nullptr || GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
    if (GetErrorString == nullptr || GetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
    return plugin::RuntimeError(call, name, text, "CUresult " + std::to_string(r));
  }
};

// Loads the driver and initializes it, or says why not.
std::unique_ptr<Driver> Load(const std::string& library, std::string* why) {
  auto d = std::make_unique<Driver>();
  d->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (d->handle == nullptr) {
    const char* e = dlerror();
    *why = "cannot load the CUDA driver " + library + ": " + (e != nullptr ? e : "unknown");
    return nullptr;
  }
  bool ok = Resolve(d->handle, "cuInit", &d->Init) &&
            Resolve(d->handle, "cuDeviceGetCount", &d->DeviceGetCount) &&
            Resolve(d->handle, "cuDeviceGet", &d->DeviceGet) &&
            Resolve(d->handle, "cuDeviceGetPCIBusId", &d->DeviceGetPCIBusId) &&
            Resolve(d->handle, "cuDevicePrimaryCtxRetain", &d->PrimaryCtxRetain) &&
            Resolve(d->handle, "cuDevicePrimaryCtxRelease_v2", &d->PrimaryCtxRelease) &&
            Resolve(d->handle, "cuCtxPushCurrent_v2", &d->CtxPush) &&
            Resolve(d->handle, "cuCtxPopCurrent_v2", &d->CtxPop) &&
            Resolve(d->handle, "cuMemAlloc_v2", &d->MemAlloc) &&
            Resolve(d->handle, "cuMemFree_v2", &d->MemFree) &&
            Resolve(d->handle, "cuMemcpyDtoH_v2", &d->MemcpyDtoH) &&
            Resolve(d->handle, "cuMemcpyHtoD_v2", &d->MemcpyHtoD) &&
            Resolve(d->handle, "cuPointerGetAttribute", &d->PointerGetAttribute);
  Resolve(d->handle, "cuIpcGetMemHandle", &d->IpcGetMemHandle);
  // cuda.h has named the call's _v2 cuIpcOpenMemHandle since CUDA 11.
  if (!Resolve(d->handle, "cuIpcOpenMemHandle_v2", &d->IpcOpenMemHandle)) {
    Resolve(d->handle, "cuIpcOpenMemHandle", &d->IpcOpenMemHandle);
  }
  Resolve(d->handle, "cuIpcCloseMemHandle", &d->IpcCloseMemHandle);
  Resolve(d->handle, "cuStreamCreate", &d->StreamCreate);
  Resolve(d->handle, "cuStreamSynchronize", &d->StreamSynchronize);
  Resolve(d->handle, "cuMemcpyAsync", &d->MemcpyAsync);
  Resolve(d->handle, "cuMemHostAlloc", &d->MemHostAlloc);
  Resolve(d->handle, "cuMemFreeHost", &d->MemFreeHost);
  Resolve(d->handle, "cuGetErrorName", &d->GetErrorName);
  Resolve(d->handle, "cuGetErrorString", &d->GetErrorString);
  if (!ok) {
    *why = library + " lacks a driver API entry point the transport needs";
    rayaccel::plugin::CloseLibrary(d->handle);
    return nullptr;
  }
  if (CUresult r = d->Init(0); r != CUDA_SUCCESS) {
    *why = d->Error("cuInit", r);
    rayaccel::plugin::CloseLibrary(d->handle);
    return nullptr;
  }
  return d;
}

// The driver API as GpuMemory uses it: primary contexts pushed around each call.
class CudaRuntime : public plugin::GpuRuntime {
 public:
  explicit CudaRuntime(std::string library) : library_(std::move(library)) {}
  ~CudaRuntime() override {
    if (d_ == nullptr) return;
    for (const auto& [ordinal, context] : contexts_) d_->PrimaryCtxRelease(ordinal);
    rayaccel::plugin::CloseLibrary(d_->handle);
  }
  const char* name() const override { return "CUDA"; }
  const char* visible_variable() const override { return "CUDA_VISIBLE_DEVICES"; }

  bool Load(std::string* why) override {
    d_ = rayaccel::cuda::Load(library_, why);
    return d_ != nullptr;
  }

  std::map<std::string, int> Devices() override {
    std::map<std::string, int> out;
    int count = 0;
    if (d_->DeviceGetCount(&count) != CUDA_SUCCESS) return out;
    for (int i = 0; i < count; ++i) {
      CUdevice dev = 0;
      char bus[32] = {};
      if (d_->DeviceGet(&dev, i) == CUDA_SUCCESS &&
          d_->DeviceGetPCIBusId(bus, sizeof(bus), dev) == CUDA_SUCCESS) {
        out[bus] = i;
      }
    }
    return out;
  }

  bool Enter(int ordinal, std::string* why) override {
    CUcontext context = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      CUcontext& held = contexts_[ordinal];
      if (held == nullptr) {
        if (CUresult r = d_->PrimaryCtxRetain(&held, ordinal); r != CUDA_SUCCESS) {
          contexts_.erase(ordinal);
          *why = d_->Error("cuDevicePrimaryCtxRetain", r);
          return false;
        }
      }
      context = held;
    }
    if (CUresult r = d_->CtxPush(context); r != CUDA_SUCCESS) {
      *why = d_->Error("cuCtxPushCurrent", r);
      return false;
    }
    current_ = ordinal;
    return true;
  }

  bool Ipc() const {
    return d_->IpcGetMemHandle != nullptr && d_->IpcOpenMemHandle != nullptr &&
           d_->IpcCloseMemHandle != nullptr && d_->StreamCreate != nullptr &&
           d_->StreamSynchronize != nullptr && d_->MemcpyAsync != nullptr;
  }

  rayaccel_status IpcExport(const void* start, std::string* handle, std::string* why) override {
    if (!Ipc()) return plugin::GpuRuntime::IpcExport(start, handle, why);
    CUipcMemHandle h{};
    if (CUresult r = d_->IpcGetMemHandle(&h, reinterpret_cast<CUdeviceptr>(start));
        r != CUDA_SUCCESS) {
      *why = d_->Error("cuIpcGetMemHandle", r);
      return RAYACCEL_STATUS_UNSUPPORTED;
    }
    handle->assign(h.reserved, sizeof(h.reserved));
    return RAYACCEL_STATUS_OK;
  }

  rayaccel_status IpcOpen(const std::string& handle, void** p, std::string* why) override {
    if (!Ipc()) return plugin::GpuRuntime::IpcOpen(handle, p, why);
    CUipcMemHandle h{};
    if (handle.size() != sizeof(h.reserved)) {
      *why = "a CUDA IPC handle of " + std::to_string(handle.size()) + " bytes, not 64";
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
    CUdeviceptr at = 0;
    if (CUresult r = d_->IpcOpenMemHandle(&at, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        r != CUDA_SUCCESS) {
      *why = d_->Error("cuIpcOpenMemHandle", r);
      return RAYACCEL_STATUS_UNSUPPORTED;
    }
    *p = reinterpret_cast<void*>(at);  // NOLINT(performance-no-int-to-ptr): CUdeviceptr
    return RAYACCEL_STATUS_OK;
  }

  void IpcClose(void* p) override {
    if (Ipc()) d_->IpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(p));
  }

  // cuMemcpyAsync on a non-blocking stream of this device's, so the copy waits for none of
  // the application's work on the legacy default stream; then waits for the copy alone.
  rayaccel_status Copy(void* to, const void* from, uint64_t n, std::string* why) override {
    if (!Ipc()) return plugin::GpuRuntime::Copy(to, from, n, why);
    CUstream stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      CUstream& held = streams_[current_];
      if (held == nullptr) {
        if (CUresult r = d_->StreamCreate(&held, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
          streams_.erase(current_);
          *why = d_->Error("cuStreamCreate", r);
          return RAYACCEL_STATUS_INTERNAL;
        }
      }
      stream = held;
    }
    CUresult r = d_->MemcpyAsync(reinterpret_cast<CUdeviceptr>(to),
                                 reinterpret_cast<CUdeviceptr>(from), n, stream);
    if (r != CUDA_SUCCESS) {
      *why = d_->Error("cuMemcpyAsync", r);
      return RAYACCEL_STATUS_INTERNAL;
    }
    if (r = d_->StreamSynchronize(stream); r != CUDA_SUCCESS) {
      *why = d_->Error("cuStreamSynchronize", r);
      return RAYACCEL_STATUS_INTERNAL;
    }
    return RAYACCEL_STATUS_OK;
  }

  rayaccel_status HostAlloc(uint64_t n, void** p, std::string* why) override {
    if (d_->MemHostAlloc == nullptr || d_->MemFreeHost == nullptr) {
      return plugin::GpuRuntime::HostAlloc(n, p, why);
    }
    if (CUresult r = d_->MemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE); r != CUDA_SUCCESS) {
      *why = d_->Error("cuMemHostAlloc", r);
      return r == CUDA_ERROR_OUT_OF_MEMORY ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED
                                           : RAYACCEL_STATUS_INTERNAL;
    }
    return RAYACCEL_STATUS_OK;
  }

  void HostFree(void* p) override {
    if (d_->MemFreeHost != nullptr) d_->MemFreeHost(p);
  }

  void Leave() override {
    CUcontext popped = nullptr;
    d_->CtxPop(&popped);
  }

  rayaccel_status Find(const void* address, Allocation* out, std::string* why) override {
    const auto p = reinterpret_cast<CUdeviceptr>(address);
    unsigned type = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    if (CUresult r = d_->PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
        r != CUDA_SUCCESS) {
      *why = "not CUDA device memory (a host, freed or foreign pointer): " +
             d_->Error("cuPointerGetAttribute", r);
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    if (type != CU_MEMORYTYPE_DEVICE) {
      *why = "CUDA memory of type " + std::to_string(type) + ", not device memory";
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    if (d_->PointerGetAttribute(&out->ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) !=
            CUDA_SUCCESS ||
        d_->PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) != CUDA_SUCCESS ||
        d_->PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS) {
      *why = "the driver does not say which allocation holds the pointer";
      return RAYACCEL_STATUS_INVALID_ARGUMENT;
    }
    out->start = start;
    out->size = size;
    return RAYACCEL_STATUS_OK;
  }

  rayaccel_status Allocate(uint64_t n, void** p, std::string* why) override {
    CUdeviceptr at = 0;
    if (CUresult r = d_->MemAlloc(&at, n); r != CUDA_SUCCESS) {
      *why = d_->Error("cuMemAlloc", r);
      return r == CUDA_ERROR_OUT_OF_MEMORY ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED
                                           : RAYACCEL_STATUS_INTERNAL;
    }
    *p = reinterpret_cast<void*>(at);  // NOLINT(performance-no-int-to-ptr): CUdeviceptr
    return RAYACCEL_STATUS_OK;
  }

  void Free(void* p) override { d_->MemFree(reinterpret_cast<CUdeviceptr>(p)); }

  rayaccel_status ToHost(void* host, const void* device, uint64_t n, std::string* why) override {
    CUresult r = d_->MemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(device), n);
    if (r == CUDA_SUCCESS) return RAYACCEL_STATUS_OK;
    *why = d_->Error("cuMemcpyDtoH", r);
    return RAYACCEL_STATUS_INTERNAL;
  }

  rayaccel_status FromHost(void* device, const void* host, uint64_t n, std::string* why) override {
    CUresult r = d_->MemcpyHtoD(reinterpret_cast<CUdeviceptr>(device), host, n);
    if (r == CUDA_SUCCESS) return RAYACCEL_STATUS_OK;
    *why = d_->Error("cuMemcpyHtoD", r);
    return RAYACCEL_STATUS_INTERNAL;
  }

 private:
  const std::string library_;
  std::unique_ptr<Driver> d_;
  std::mutex mu_;                      // guards contexts_ and streams_
  std::map<int, CUcontext> contexts_;  // retained primary contexts, by ordinal
  std::map<int, CUstream> streams_;    // the transport's own, by ordinal
  static thread_local int current_;    // the ordinal Enter made current on this thread
};

thread_local int CudaRuntime::current_ = -1;

}  // namespace

std::unique_ptr<plugin::GpuMemory> MakeCudaMemory(std::string library, bool ipc,
                                                  std::function<plugin::GpuMemory::BusIds()> list) {
  return std::make_unique<plugin::GpuMemory>(std::make_unique<CudaRuntime>(std::move(library)),
                                             std::move(list), ipc);
}

}  // namespace rayaccel::cuda
