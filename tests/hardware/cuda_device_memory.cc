// Registers GPU memory through the CUDA plugin's transport on a real NVIDIA host, and prints
// what the plugin answers: a region the driver vouched for (moved by UCX where it was built
// with CUDA support, else through CUDA IPC or staged), or a clear Unimplemented without the
// driver's calls; then the in-process cuMemcpyDtoD baseline (bench/compare_device_copy.sh). GPU memory comes from the CUDA driver API (libcuda.so.1, loaded at
// run time), so this builds without the CUDA toolkit; without a driver it says so and exits 0.
//
// usage: rayaccel_hw_cuda_memory [PLUGIN_PATH_DIR]
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "rayaccel/transport.h"

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): the driver API's own type

struct Driver {
  CUresult (*Init)(unsigned int) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*CtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*MemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*MemFree)(CUdeviceptr) = nullptr;
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*CtxSynchronize)() = nullptr;
};

template <typename F>
bool Bind(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("skip: no CUDA driver (%s)\n", dlerror());
    return 0;
  }
  Driver cu;
  if (!Bind(lib, "cuInit", &cu.Init) || !Bind(lib, "cuDeviceGet", &cu.DeviceGet) ||
      !Bind(lib, "cuDevicePrimaryCtxRetain", &cu.PrimaryCtxRetain) ||
      !Bind(lib, "cuCtxSetCurrent", &cu.CtxSetCurrent) ||
      !Bind(lib, "cuMemAlloc_v2", &cu.MemAlloc) || !Bind(lib, "cuMemFree_v2", &cu.MemFree) ||
      !Bind(lib, "cuMemcpyDtoD_v2", &cu.MemcpyDtoD) ||
      !Bind(lib, "cuCtxSynchronize", &cu.CtxSynchronize)) {
    std::printf("fail: libcuda.so.1 lacks a driver API entry point\n");
    return 1;
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUdeviceptr memory = 0;
  const size_t kBytes = 64u << 20;
  CUresult r = cu.Init(0);
  if (r == 0) r = cu.DeviceGet(&device, 0);
  if (r == 0) r = cu.PrimaryCtxRetain(&context, device);
  if (r == 0) r = cu.CtxSetCurrent(context);
  if (r == 0) r = cu.MemAlloc(&memory, kBytes);
  if (r != 0) {
    std::printf("fail: CUDA driver API error %d\n", r);
    return 1;
  }
  std::printf("cuMemAlloc: %zu bytes of GPU 0 memory\n", kBytes);

  rayaccel::TransportOptions options;
  options.plugin = "cuda";
  if (argc > 1) options.search_path = {argv[1]};
  auto transport = rayaccel::Transport::Open(options);
  if (!transport.ok()) {
    std::printf("fail: open the cuda plugin's transport: %s\n",
                std::string(transport.status().message()).c_str());
    return 1;
  }
  auto region =
      (*transport)
          ->Register(reinterpret_cast<void*>(memory), kBytes, rayaccel::MemoryKind::kDevice, 0);
  std::printf("register GPU memory: %s\n", region.status().ToString().c_str());
  auto staging = (*transport)->Allocate(kBytes, rayaccel::MemoryKind::kDevice, 0);
  std::printf("allocate GPU memory: %s\n", staging.status().ToString().c_str());
  if (region.ok()) (void)(*transport)->Deregister(*region);
  if (staging.ok()) (void)(*transport)->Deregister(staging->region);
  transport->reset();
  cu.MemFree(memory);

  // The baseline the transport's device-to-device figures are read against: cuMemcpyDtoD of
  // the same size within one process, 8 B to 1 GiB (best of 20 after 3 warm-up copies).
  for (size_t size = 8; size <= (size_t{1} << 30); size *= 8) {
    CUdeviceptr a = 0, b = 0;
    if (cu.MemAlloc(&a, size) != 0 || cu.MemAlloc(&b, size) != 0) break;
    double best = 1e30;
    for (int i = 0; i < 23; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      cu.MemcpyDtoD(b, a, size);
      cu.CtxSynchronize();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 3 && s < best) best = s;
    }
    std::printf("cuMemcpyDtoD %zu bytes: %.2f GB/s, %.2f us\n", size,
                static_cast<double>(size) / best / 1e9, best * 1e6);
    cu.MemFree(a);
    cu.MemFree(b);
  }
  // Ok, or refused with Unimplemented and a reason: anything else is a bug in the plugin.
  const bool sane = region.ok() || absl::IsUnimplemented(region.status());
  return sane ? 0 : 1;
}
