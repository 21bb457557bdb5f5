// Device memory through the transport: the CUDA plugin over the fake NVML and the fake CUDA
// driver (tests/fixtures/fake-cuda). Debian's UCX has no CUDA support, so the UCX helper stages
// device memory through host memory with the plugin's driver calls: these tests run that path
// on real UCX between two endpoints, and the driver's refusals.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "rayaccel/transport.h"
#include "support/child_process.h"
#include "support/test_support.h"
#include "support/transport_support.h"

namespace rayaccel {
namespace {

using ::rayaccel::testing::Done;
using ::rayaccel::testing::Pattern;
using ::rayaccel::testing::ScopedEnv;

// The fake driver, as a program of its own would use it: to fill device memory and read it
// back, and to allocate memory the transport did not.
struct Driver {
  using CUresult = int;
  void* handle = nullptr;
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*Retain)(void**, int) = nullptr;
  CUresult (*Push)(void*) = nullptr;
  CUresult (*Pop)(void**) = nullptr;
  CUresult (*Alloc)(unsigned long long*, size_t) = nullptr;
  CUresult (*Free)(unsigned long long) = nullptr;
  CUresult (*HtoD)(unsigned long long, const void*, size_t) = nullptr;
  CUresult (*DtoH)(void*, unsigned long long, size_t) = nullptr;

  bool Load() {
    handle = dlopen(RAYACCEL_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return false;
    auto get = [&](const char* name, auto* out) {
      *out = reinterpret_cast<std::remove_pointer_t<decltype(out)>>(dlsym(handle, name));
      return *out != nullptr;
    };
    return get("cuInit", &Init) && get("cuDevicePrimaryCtxRetain", &Retain) &&
           get("cuCtxPushCurrent_v2", &Push) && get("cuCtxPopCurrent_v2", &Pop) &&
           get("cuMemAlloc_v2", &Alloc) && get("cuMemFree_v2", &Free) &&
           get("cuMemcpyHtoD_v2", &HtoD) && get("cuMemcpyDtoH_v2", &DtoH) && Init(0) == 0;
  }
  // Runs `f` with CUDA device `ordinal`'s primary context current.
  template <typename F>
  CUresult On(int ordinal, F f) {
    void* ctx = nullptr;
    if (CUresult r = Retain(&ctx, ordinal); r != 0) return r;
    Push(ctx);
    CUresult r = f();
    Pop(&ctx);
    return r;
  }
  void Upload(void* device, const std::vector<char>& bytes) {
    ASSERT_EQ(
        On(0,
           [&] { return HtoD(reinterpret_cast<uintptr_t>(device), bytes.data(), bytes.size()); }),
        0);
  }
  std::vector<char> Download(const void* device, size_t n) {
    std::vector<char> out(n);
    EXPECT_EQ(On(0, [&] { return DtoH(out.data(), reinterpret_cast<uintptr_t>(device), n); }), 0);
    return out;
  }
};

// A transport of `plugin` from the build's plugins, configured with `config`.
std::unique_ptr<Transport> OpenPlugin(const std::string& plugin,
                                      std::map<std::string, std::string> config) {
  TransportOptions o;
  o.plugin = plugin;
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.config = std::move(config);
  return testing::OpenTransport(o);
}

class CudaDeviceMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = std::make_unique<ScopedEnv>("FAKE_NVML_FIXTURE",
                                       RAYACCEL_FIXTURES_DIR "/fake-nvml/dgx-h100.json");
    ASSERT_TRUE(driver_.Load()) << dlerror();
    owner_ = Open();
    reader_ = Open();
    ASSERT_NE(owner_, nullptr);
    ASSERT_NE(reader_, nullptr);
  }
  static std::unique_ptr<Transport> Open() {
    return OpenPlugin("cuda",
                      {{"nvml_library", RAYACCEL_FAKE_NVML}, {"cuda_library", RAYACCEL_FAKE_CUDA}});
  }
  std::unique_ptr<ScopedEnv> env_;
  Driver driver_;
  std::unique_ptr<Transport> owner_, reader_;
};

// Every pairing of host and device memory, read and written, small (one eager message) and
// large (rendezvous), lands byte for byte.
TEST_F(CudaDeviceMemory, DeviceToDeviceAndEveryMixMoveTheBytes) {
  for (size_t size : {size_t{8}, size_t{4} << 20}) {
    SCOPED_TRACE(size);
    auto remote_dev = owner_->Allocate(size, MemoryKind::kDevice, 2);
    auto local_dev = reader_->Allocate(size, MemoryKind::kDevice, 5);
    ASSERT_TRUE(remote_dev.ok()) << remote_dev.status();
    ASSERT_TRUE(local_dev.ok()) << local_dev.status();
    std::vector<char> remote_host(size), local_host(size);
    auto remote_host_region = owner_->Register(remote_host.data(), size);
    auto local_host_region = reader_->Register(local_host.data(), size);
    ASSERT_TRUE(remote_host_region.ok() && local_host_region.ok());
    const std::vector<char> want = Pattern(size, 3);
    driver_.Upload(remote_dev->data, want);
    auto conn = reader_->Connect(owner_->address());
    ASSERT_TRUE(conn.ok()) << conn.status();
    const std::string dev_desc = *owner_->Describe(remote_dev->region);
    const std::string host_desc = *owner_->Describe(*remote_host_region);

    // Device to device, and device to host.
    ASSERT_TRUE(Done(reader_->Read(*conn, local_dev->region, 0, dev_desc, 0, size)).ok());
    EXPECT_EQ(driver_.Download(local_dev->data, size), want);
    ASSERT_TRUE(Done(reader_->Read(*conn, *local_host_region, 0, dev_desc, 0, size)).ok());
    EXPECT_EQ(local_host, want);

    // Host to device, read and written; device to device written, at an offset.
    // Into the registered buffers themselves (assigning a new vector would move them away).
    const std::vector<char> remote_want = Pattern(size, 41);
    std::copy(remote_want.begin(), remote_want.end(), remote_host.begin());
    ASSERT_TRUE(Done(reader_->Read(*conn, local_dev->region, 0, host_desc, 0, size)).ok());
    EXPECT_EQ(driver_.Download(local_dev->data, size), remote_host);
    const std::vector<char> local_want = Pattern(size, 77);
    std::copy(local_want.begin(), local_want.end(), local_host.begin());
    ASSERT_TRUE(Done(reader_->Write(*conn, *local_host_region, 0, dev_desc, 0, size)).ok());
    EXPECT_EQ(driver_.Download(remote_dev->data, size), local_host);
    const std::vector<char> tail = Pattern(size / 2, 101);
    driver_.Upload(local_dev->data, Pattern(size, 101));
    ASSERT_TRUE(
        Done(reader_->Write(*conn, local_dev->region, 0, dev_desc, size / 2, size / 2)).ok());
    std::vector<char> now = driver_.Download(remote_dev->data, size);
    EXPECT_TRUE(std::equal(now.begin() + size / 2, now.end(), tail.begin()));
    EXPECT_TRUE(std::equal(now.begin(), now.begin() + size / 2, local_host.begin()));

    // The owner still decides: a range past its region is refused, a gone region is stale.
    EXPECT_TRUE(absl::IsInvalidArgument(
        Done(reader_->Read(*conn, local_dev->region, 0, dev_desc, 1, size))));
    ASSERT_TRUE(owner_->Deregister(remote_dev->region).ok());
    EXPECT_TRUE(IsStale(Done(reader_->Read(*conn, local_dev->region, 0, dev_desc, 0, size))));
    ASSERT_TRUE(reader_->Deregister(local_dev->region).ok());
    ASSERT_TRUE(owner_->Deregister(*remote_host_region).ok());
    ASSERT_TRUE(reader_->Deregister(*local_host_region).ok());
    ASSERT_TRUE(reader_->Close(*conn).ok());
  }
}

// What the driver says of memory handed in is the answer, with its reason.
TEST_F(CudaDeviceMemory, PointersTheDriverDoesNotVouchForAreRefused) {
  std::vector<char> host(4096);
  absl::Status s = owner_->Register(host.data(), host.size(), MemoryKind::kDevice, 0).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("not CUDA device memory"), std::string::npos) << s;
  EXPECT_NE(s.message().find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << s;

  unsigned long long p = 0;
  ASSERT_EQ(driver_.On(1, [&] { return driver_.Alloc(&p, 1 << 20); }), 0);
  void* on_gpu1 = reinterpret_cast<void*>(p);
  // Memory of CUDA device 1 named as plugin device 0's.
  s = owner_->Register(on_gpu1, 4096, MemoryKind::kDevice, 0).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("memory of CUDA device 1, not of device 0"), std::string::npos) << s;
  // Inside the allocation, and past its end.
  EXPECT_TRUE(
      owner_->Register(static_cast<char*>(on_gpu1) + 4096, 4096, MemoryKind::kDevice, 1).ok());
  s = owner_->Register(static_cast<char*>(on_gpu1) + 4096, 1 << 20, MemoryKind::kDevice, 1)
          .status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("run past the end of their 1048576-byte allocation"),
            std::string::npos)
      << s;
  // Freed.
  ASSERT_EQ(driver_.On(1, [&] { return driver_.Free(p); }), 0);
  s = owner_->Register(on_gpu1, 4096, MemoryKind::kDevice, 1).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;

  // No such device; more than the GPU holds.
  s = owner_->Allocate(4096, MemoryKind::kDevice, 99).status();
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("device 99 is not a GPU whose memory"), std::string::npos) << s;
  s = owner_->Allocate(uint64_t{200} << 30, MemoryKind::kDevice, 0).status();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("CUDA_ERROR_OUT_OF_MEMORY (out of memory)"), std::string::npos) << s;
}

// `rayaccel transfer --memory device:N` on both sides, two processes: every read and write is
// verified (through the command's own host copies), whichever side's memory is the GPU's.
TEST_F(CudaDeviceMemory, TransferCommandMovesDeviceMemoryBetweenProcesses) {
  const std::string dir = testing::MakeTempDir("transfer-device");
  const std::vector<std::string> plugin = {
      "--plugin",      "cuda",
      "--plugin-path", RAYACCEL_PLUGIN_DIR,
      "--config",      std::string("nvml_library=") + RAYACCEL_FAKE_NVML,
      "--config",      std::string("cuda_library=") + RAYACCEL_FAKE_CUDA};
  std::vector<std::string> serve = {"transfer", "--serve", "--memory",     "device:2",
                                    "--size",   "1MiB",    "--token-file", dir + "/token"};
  serve.insert(serve.end(), plugin.begin(), plugin.end());
  pid_t server = testing::Spawn(RAYACCEL_CLI, serve, dir + "/server.out", dir + "/server.err");
  ASSERT_TRUE(testing::WaitForFile(dir + "/token"));
  for (const char* memory : {"device:5", "host"}) {
    for (const char* op : {"read", "write"}) {
      std::vector<std::string> client = {RAYACCEL_CLI, "transfer", "--token-file", dir + "/token",
                                         "--memory",   memory,     "--op",         op,
                                         "--iters",    "3",        "--size",       "1MiB"};
      client.insert(client.end(), plugin.begin(), plugin.end());
      testing::CommandResult r = testing::Run(client);
      EXPECT_EQ(r.exit_code, 0) << memory << " " << op << ": " << r.out << r.err;
      EXPECT_NE(r.out.find("verified"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("device:5 memory") != std::string::npos,
                std::string(memory) == "device:5")
          << r.out;
    }
  }
  EXPECT_EQ(testing::Stop(server), 0) << testing::Lines(dir + "/server.err").size();
  // Each write the server checked in its own device memory.
  int verified = 0;
  for (const std::string& line : testing::Lines(dir + "/server.out")) {
    if (line.find("\"verified\": true") != std::string::npos) ++verified;
    EXPECT_EQ(line.find("\"verified\": false"), std::string::npos) << line;
  }
  EXPECT_EQ(verified, 2);
  // CUDA_VISIBLE_DEVICES=3,2 renumbers the GPUs for CUDA (GPU 2 is CUDA's device 1), not for
  // NVML: device 2 is still the plugin's GPU 2, found by its PCI bus id; GPU 0 is not visible.
  {
    const std::string token = dir + "/token-visible";
    std::vector<std::string> args = {"transfer", "--serve", "--memory",     "device:2",
                                     "--size",   "64KiB",   "--token-file", token};
    args.insert(args.end(), plugin.begin(), plugin.end());
    testing::ScopedEnv visible("CUDA_VISIBLE_DEVICES", "3,2");
    pid_t renumbered = testing::Spawn(RAYACCEL_CLI, args, dir + "/visible.out", dir + "/v.err");
    ASSERT_TRUE(testing::WaitForFile(token));
    std::vector<std::string> client = {RAYACCEL_CLI, "transfer", "--token-file", token,
                                       "--memory",   "device:3", "--iters",      "2"};
    client.insert(client.end(), plugin.begin(), plugin.end());
    testing::CommandResult r = testing::Run(client);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("verified (device:3 memory)"), std::string::npos) << r.out;
    client[5] = "device:0";
    r = testing::Run(client);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.err.find("is not among the GPUs CUDA shows this process"), std::string::npos)
        << r.err;
    EXPECT_EQ(testing::Stop(renumbered), 0);
  }
  // No device memory to give: the reason, and a failure.
  std::vector<std::string> bad = {RAYACCEL_CLI, "transfer", "--serve", "--memory", "device:99"};
  bad.insert(bad.end(), plugin.begin(), plugin.end());
  testing::CommandResult r = testing::Run(bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("device 99 is not a GPU whose memory"), std::string::npos) << r.err;
}

// The same through the ROCm plugin over its KFD capture and the fake HIP runtime
// (tests/fixtures/fake-hip): eight MI210s, HIP's ordinals the plugin's indices.
class RocmDeviceMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = std::make_unique<ScopedEnv>("FAKE_HIP_FIXTURE",
                                       RAYACCEL_FIXTURES_DIR "/fake-hip/mi210-xgmi-pcie.json");
    hip_ = dlopen(RAYACCEL_FAKE_HIP, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(hip_, nullptr) << dlerror();
    set_device_ = reinterpret_cast<int (*)(int)>(dlsym(hip_, "hipSetDevice"));
    malloc_ = reinterpret_cast<int (*)(void**, size_t)>(dlsym(hip_, "hipMalloc"));
    memcpy_ = reinterpret_cast<int (*)(void*, const void*, size_t, int)>(dlsym(hip_, "hipMemcpy"));
    ASSERT_TRUE(set_device_ && malloc_ && memcpy_);
    owner_ = Open();
    reader_ = Open();
    ASSERT_NE(owner_, nullptr);
    ASSERT_NE(reader_, nullptr);
  }
  static std::unique_ptr<Transport> Open() {
    return OpenPlugin("rocm",
                      {{"kfd_topology_dir", RAYACCEL_FIXTURES_DIR "/rocm-kfd/topo-mi210-xgmi-pcie"},
                       {"hip_library", RAYACCEL_FAKE_HIP}});
  }
  std::unique_ptr<ScopedEnv> env_;
  void* hip_ = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*memcpy_)(void*, const void*, size_t, int) = nullptr;
  std::unique_ptr<Transport> owner_, reader_;
};

TEST_F(RocmDeviceMemory, DeviceToDeviceMovesTheBytesAndTheRuntimeRefusesWhatItDoesNotHold) {
  constexpr size_t kSize = 4 << 20;
  constexpr int kHostToDevice = 1, kDeviceToHost = 2;
  auto remote = owner_->Allocate(kSize, MemoryKind::kDevice, 2);
  auto local = reader_->Allocate(kSize, MemoryKind::kDevice, 7);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ASSERT_TRUE(local.ok()) << local.status();
  const std::vector<char> want = Pattern(kSize, 9);
  ASSERT_EQ(memcpy_(remote->data, want.data(), kSize, kHostToDevice), 0);
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok()) << conn.status();
  const std::string desc = *owner_->Describe(remote->region);
  ASSERT_TRUE(Done(reader_->Read(*conn, local->region, 0, desc, 0, kSize)).ok());
  std::vector<char> got(kSize);
  ASSERT_EQ(memcpy_(got.data(), local->data, kSize, kDeviceToHost), 0);
  EXPECT_EQ(got, want);
  const std::vector<char> back = Pattern(kSize, 23);
  ASSERT_EQ(memcpy_(local->data, back.data(), kSize, kHostToDevice), 0);
  ASSERT_TRUE(Done(reader_->Write(*conn, local->region, 0, desc, 0, kSize)).ok());
  ASSERT_EQ(memcpy_(got.data(), remote->data, kSize, kDeviceToHost), 0);
  EXPECT_EQ(got, back);

  std::vector<char> host(4096);
  absl::Status s = owner_->Register(host.data(), host.size(), MemoryKind::kDevice, 0).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("not HIP device memory"), std::string::npos) << s;
  EXPECT_NE(s.message().find("hipErrorInvalidValue"), std::string::npos) << s;
  void* on_gpu3 = nullptr;
  ASSERT_EQ(set_device_(3), 0);
  ASSERT_EQ(malloc_(&on_gpu3, 1 << 16), 0);
  s = owner_->Register(on_gpu3, 4096, MemoryKind::kDevice, 4).status();
  EXPECT_NE(s.message().find("memory of HIP device 3, not of device 4"), std::string::npos) << s;
  s = owner_->Register(on_gpu3, 1 << 17, MemoryKind::kDevice, 3).status();
  EXPECT_NE(s.message().find("run past the end of their 65536-byte allocation"), std::string::npos)
      << s;
  EXPECT_TRUE(owner_->Register(on_gpu3, 1 << 16, MemoryKind::kDevice, 3).ok());
  s = owner_->Allocate(uint64_t{100} << 30, MemoryKind::kDevice, 0).status();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("hipMalloc: hipErrorOutOfMemory (out of memory)"), std::string::npos)
      << s;
}

// No HIP runtime on the host: device memory is refused with the reason, host memory moves.
TEST(RocmWithoutHip, DeviceMemoryIsUnsupportedWithTheReason) {
  std::unique_ptr<Transport> t = OpenPlugin(
      "rocm", {{"kfd_topology_dir", RAYACCEL_FIXTURES_DIR "/rocm-kfd/topo-mi210-xgmi-pcie"},
               {"hip_library", "/no/libamdhip64.so"}});
  ASSERT_NE(t, nullptr);
  absl::Status s = t->Allocate(4096, MemoryKind::kDevice, 0).status();
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_NE(s.message().find("cannot load the HIP runtime"), std::string::npos) << s;
  std::vector<char> host(4096);
  EXPECT_TRUE(t->Register(host.data(), host.size()).ok());
}

}  // namespace
}  // namespace rayaccel
