#include "cuda/cuda_memory.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>

namespace rayaccel::cuda {

// The driver API's types and values (cuda.h), for the calls made here.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
constexpr int CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11;
constexpr int CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12;
constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;

struct CudaMemory::Driver {
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
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*GetErrorString)(CUresult, const char**) = nullptr;

  // "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", the driver's own words.
  std::string Error(const char* call, CUresult r) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (GetErrorName == nullptr || GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
    if (GetErrorString == nullptr || GetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
    std::string out =
        std::string(call) + ": " + (name != nullptr ? name : "CUresult " + std::to_string(r));
    if (text != nullptr) out += std::string(" (") + text + ")";
    return out;
  }
};

namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

template <typename F>
bool Resolve(void* handle, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  return *out != nullptr;
}

// Loads the driver and initializes it, or says why not.
std::unique_ptr<CudaMemory::Driver> Load(const std::string& library, std::string* why) {
  auto d = std::make_unique<CudaMemory::Driver>();
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
  Resolve(d->handle, "cuGetErrorName", &d->GetErrorName);
  Resolve(d->handle, "cuGetErrorString", &d->GetErrorString);
  if (!ok) {
    *why = library + " lacks a driver API entry point the transport needs";
    dlclose(d->handle);
    return nullptr;
  }
  if (CUresult r = d->Init(0); r != CUDA_SUCCESS) {
    *why = d->Error("cuInit", r);
    dlclose(d->handle);
    return nullptr;
  }
  return d;
}

}  // namespace

CudaMemory::~CudaMemory() {
  if (driver_ == nullptr) return;
  for (const auto& [ordinal, context] : contexts_) driver_->PrimaryCtxRelease(ordinal);
  dlclose(driver_->handle);
  delete driver_;
}

void CudaMemory::SetDevices(BusIds bus_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, id] : bus_ids) id = Lower(id);
  bus_ids_ = std::move(bus_ids);
}

std::string CudaMemory::BusIdOf(uint32_t device) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = bus_ids_.find(device); it != bus_ids_.end()) return it->second;
  }
  SetDevices(list_());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = bus_ids_.find(device);
  return it == bus_ids_.end() ? "" : it->second;
}

rayaccel_status CudaMemory::Push(uint32_t device, int* ordinal, std::string* why) {
  const std::string bus = BusIdOf(device);
  std::lock_guard<std::mutex> lock(mu_);
  if (driver_ == nullptr && unavailable_.empty()) {
    std::unique_ptr<Driver> d = Load(library_, &unavailable_);
    if (d != nullptr) {
      int count = 0;
      if (CUresult r = d->DeviceGetCount(&count); r != CUDA_SUCCESS) count = 0;
      for (int i = 0; i < count; ++i) {
        CUdevice dev = 0;
        char bus[32] = {};
        if (d->DeviceGet(&dev, i) == CUDA_SUCCESS &&
            d->DeviceGetPCIBusId(bus, sizeof(bus), dev) == CUDA_SUCCESS) {
          ordinals_[Lower(bus)] = i;
        }
      }
      driver_ = d.release();
    }
  }
  if (driver_ == nullptr) {  // the memory kind cannot be reached on this host
    *why = unavailable_;
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  if (bus.empty()) {
    *why = "device " + std::to_string(device) +
           " is not a GPU whose memory this plugin copies (a MIG instance, a GPU NVML no "
           "longer lists, or no device of this plugin)";
    return RAYACCEL_STATUS_UNSUPPORTED;
  }
  auto found = ordinals_.find(bus);
  if (found == ordinals_.end()) {
    *why = "GPU " + bus + " (device " + std::to_string(device) +
           ") is not among the GPUs CUDA shows this process (CUDA_VISIBLE_DEVICES)";
    return RAYACCEL_STATUS_INVALID_ARGUMENT;
  }
  *ordinal = found->second;
  CUcontext& context = contexts_[*ordinal];
  if (context == nullptr) {
    if (CUresult r = driver_->PrimaryCtxRetain(&context, *ordinal); r != CUDA_SUCCESS) {
      contexts_.erase(*ordinal);
      *why = driver_->Error("cuDevicePrimaryCtxRetain", r);
      return RAYACCEL_STATUS_UNAVAILABLE;
    }
  }
  if (CUresult r = driver_->CtxPush(context); r != CUDA_SUCCESS) {
    *why = driver_->Error("cuCtxPushCurrent", r);
    return RAYACCEL_STATUS_UNAVAILABLE;
  }
  return RAYACCEL_STATUS_OK;
}

void CudaMemory::Pop() {
  CUcontext popped = nullptr;
  driver_->CtxPop(&popped);
}

rayaccel_status CudaMemory::Check(const void* address, uint64_t length, uint32_t device,
                                  std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Push(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  const auto p = reinterpret_cast<CUdeviceptr>(address);
  unsigned type = 0;
  int owner = -1;
  CUdeviceptr start = 0;
  size_t size = 0;
  rayaccel_status status = RAYACCEL_STATUS_INVALID_ARGUMENT;
  if (CUresult r = driver_->PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
      r != CUDA_SUCCESS) {
    *why = "not CUDA device memory (a host, freed or foreign pointer): " +
           driver_->Error("cuPointerGetAttribute", r);
  } else if (type != CU_MEMORYTYPE_DEVICE) {
    *why = "CUDA memory of type " + std::to_string(type) + ", not device memory";
  } else if (CUresult r =
                 driver_->PointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
             r != CUDA_SUCCESS) {
    *why = driver_->Error("cuPointerGetAttribute", r);
  } else if (owner != ordinal) {
    *why = "memory of CUDA device " + std::to_string(owner) + ", not of device " +
           std::to_string(device) + " (CUDA device " + std::to_string(ordinal) + ")";
  } else if (driver_->PointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) !=
                 CUDA_SUCCESS ||
             driver_->PointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) !=
                 CUDA_SUCCESS) {
    *why = "the driver does not say where the allocation ends";
  } else if (p - start > size || length > size - (p - start)) {
    *why = std::to_string(length) + " bytes at offset " + std::to_string(p - start) +
           " run past the end of their " + std::to_string(size) + "-byte allocation";
  } else {
    status = RAYACCEL_STATUS_OK;
  }
  Pop();
  return status;
}

rayaccel_status CudaMemory::Allocate(uint32_t device, uint64_t length, void** address,
                                     std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Push(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  CUdeviceptr p = 0;
  CUresult r = driver_->MemAlloc(&p, length);
  Pop();
  if (r != CUDA_SUCCESS) {
    *why = driver_->Error("cuMemAlloc", r);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? RAYACCEL_STATUS_RESOURCE_EXHAUSTED
                                         : RAYACCEL_STATUS_INTERNAL;
  }
  *address = reinterpret_cast<void*>(p);  // NOLINT(performance-no-int-to-ptr): CUdeviceptr
  return RAYACCEL_STATUS_OK;
}

void CudaMemory::Free(void* address, uint32_t device) {
  int ordinal = 0;
  std::string why;
  if (Push(device, &ordinal, &why) != RAYACCEL_STATUS_OK) return;
  driver_->MemFree(reinterpret_cast<CUdeviceptr>(address));
  Pop();
}

rayaccel_status CudaMemory::ToHost(void* host, const void* device_memory, uint64_t length,
                                   uint32_t device, std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Push(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  CUresult r = driver_->MemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(device_memory), length);
  Pop();
  if (r == CUDA_SUCCESS) return RAYACCEL_STATUS_OK;
  *why = driver_->Error("cuMemcpyDtoH", r);
  return RAYACCEL_STATUS_INTERNAL;
}

rayaccel_status CudaMemory::FromHost(void* device_memory, const void* host, uint64_t length,
                                     uint32_t device, std::string* why) {
  int ordinal = 0;
  if (rayaccel_status st = Push(device, &ordinal, why); st != RAYACCEL_STATUS_OK) return st;
  CUresult r = driver_->MemcpyHtoD(reinterpret_cast<CUdeviceptr>(device_memory), host, length);
  Pop();
  if (r == CUDA_SUCCESS) return RAYACCEL_STATUS_OK;
  *why = driver_->Error("cuMemcpyHtoD", r);
  return RAYACCEL_STATUS_INTERNAL;
}

}  // namespace rayaccel::cuda
