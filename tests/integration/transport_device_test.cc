// Device memory through the transport: the CUDA plugin over the fake NVML and the fake CUDA
// driver (tests/fixtures/fake-cuda). Debian's UCX has no CUDA support, so the UCX helper moves
// device memory itself: between two processes of one host, the reader maps the owner's memory
// (CUDA IPC) and copies device to device; otherwise it stages it through host memory with the
// plugin's driver calls. These tests run both on real UCX between real endpoints, the
// mappings' invalidation, and the driver's refusals.
#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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
  CUresult (*IpcGet)(void*, unsigned long long) = nullptr;
  CUresult (*IpcOpen)(unsigned long long*, std::array<char, 64>, unsigned) = nullptr;
  // The fake's own: the largest host copy since the last call; live cuMemHostAlloc buffers.
  size_t (*LargestCopy)() = nullptr;
  size_t (*HostAllocations)() = nullptr;

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
           get("cuMemcpyHtoD_v2", &HtoD) && get("cuMemcpyDtoH_v2", &DtoH) &&
           get("cuIpcGetMemHandle", &IpcGet) && get("cuIpcOpenMemHandle_v2", &IpcOpen) &&
           get("fake_cuda_largest_copy", &LargestCopy) &&
           get("fake_cuda_host_allocations", &HostAllocations) && Init(0) == 0;
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

// Every pairing of host and device memory, read and written, small (one eager message), large
// (rendezvous) and larger than a staged piece (4 MiB; four pieces in flight at a time, the last one
// short), lands byte for byte.
TEST_F(CudaDeviceMemory, DeviceToDeviceAndEveryMixMoveTheBytes) {
  for (size_t size : {size_t{8}, size_t{4} << 20, (size_t{16} << 20) + 4098}) {
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

    // Device to device, and device to host; through host memory a piece at a time.
    driver_.LargestCopy();
    ASSERT_TRUE(Done(reader_->Read(*conn, local_dev->region, 0, dev_desc, 0, size)).ok());
    EXPECT_LE(driver_.LargestCopy(), size_t{4} << 20);
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
  // Pieces went through page-locked memory the endpoints keep, and give back when they close.
  EXPECT_GT(driver_.HostAllocations(), 0u);
  owner_.reset();
  reader_.reset();
  EXPECT_EQ(driver_.HostAllocations(), 0u) << "page-locked host memory outlived its endpoints";
}

// A connection closed while a staged transfer's pieces are still to go ends the transfer, whole
// or failed, never hung; a transport closed with one in flight ends it (its Request says so
// afterwards) and frees everything.
TEST_F(CudaDeviceMemory, ClosingUnderAPiecedTransferEndsIt) {
  constexpr size_t kSize = size_t{64} << 20;
  auto remote = owner_->Allocate(kSize, MemoryKind::kDevice, 2);
  auto local = reader_->Allocate(kSize, MemoryKind::kDevice, 5);
  ASSERT_TRUE(remote.ok() && local.ok());
  const std::string d = *owner_->Describe(remote->region);
  for (bool write : {false, true}) {
    auto conn = reader_->Connect(owner_->address());
    ASSERT_TRUE(conn.ok()) << conn.status();
    auto r = write ? reader_->Write(*conn, local->region, 0, d, 0, kSize)
                   : reader_->Read(*conn, local->region, 0, d, 0, kSize);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(reader_->Close(*conn).ok());
    absl::Status s = r->Wait(absl::Now() + absl::Seconds(20));
    EXPECT_TRUE(s.ok() || absl::IsUnavailable(s)) << s;
  }
  auto conn = reader_->Connect(owner_->address());
  ASSERT_TRUE(conn.ok());
  auto last = reader_->Read(*conn, local->region, 0, d, 0, kSize);
  ASSERT_TRUE(last.ok());
  reader_.reset();  // with the read in flight: it ends with its transport
  EXPECT_TRUE(absl::IsUnavailable(last->Wait(absl::Now() + absl::Seconds(1))))
      << last->Wait(absl::Now());
  owner_.reset();
  EXPECT_EQ(driver_.HostAllocations(), 0u);
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
      // Two processes of one host: the server's GPU memory is mapped, whatever the client's.
      EXPECT_NE(r.out.find("path device-ipc"), std::string::npos) << r.out;
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

uint64_t Fnv(const std::vector<char>& v) {
  uint64_t h = 1469598103934665603ull;
  for (char c : v) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// A reader of CUDA device memory in another process (tests/support/transport_peer.cc
// cuda-reader) against regions of this process: what it reads and writes, and how.
class CudaIpc : public CudaDeviceMemory {
 protected:
  void SetUp() override {
    CudaDeviceMemory::SetUp();
    dir_ = testing::MakeTempDir("cuda-ipc");
    key_ = dir_ + "/key";
    std::ofstream(key_) << std::string(32, 'k');
    chmod(key_.c_str(), 0600);
    owner_ = OpenWithKey();
    ASSERT_NE(owner_, nullptr);
  }
  std::unique_ptr<Transport> OpenWithKey(std::map<std::string, std::string> extra = {}) {
    TransportOptions o;
    o.plugin = "cuda";
    o.search_path = {RAYACCEL_PLUGIN_DIR};
    o.key_file = key_;
    o.peer_timeout = absl::Milliseconds(1500);
    o.config = {{"nvml_library", RAYACCEL_FAKE_NVML}, {"cuda_library", RAYACCEL_FAKE_CUDA}};
    for (auto& [k, v] : extra) o.config[k] = v;
    return testing::OpenTransport(o);
  }
  // A reader in another process, given this owner's address and `descriptors`.
  std::unique_ptr<testing::PipedChild> StartReader(const std::vector<std::string>& descriptors,
                                                   std::vector<std::string> config = {}) {
    const std::string in = dir_ + "/regions-" + std::to_string(readers_++);
    std::ofstream f(in);
    f << absl::WebSafeBase64Escape(owner_->address()) << "\n";
    for (const std::string& d : descriptors) f << absl::WebSafeBase64Escape(d) << "\n";
    f.close();
    std::vector<std::string> args = {"cuda-reader", in, key_, "1500"};
    args.insert(args.end(), config.begin(), config.end());
    return std::make_unique<testing::PipedChild>(RAYACCEL_TRANSPORT_PEER, args);
  }
  std::string dir_, key_;
  int readers_ = 0;
};

// A whole allocation is mapped and copied device to device, both ways; a part of one, whose
// mapping would reach the rest of the allocation, is staged; so is everything with
// device_ipc=false on the reader's side.
TEST_F(CudaIpc, WholeAllocationsMoveDeviceToDeviceAndTheRestIsStaged) {
  constexpr size_t kSize = 1 << 20;
  auto whole = owner_->Allocate(kSize, MemoryKind::kDevice, 2);
  ASSERT_TRUE(whole.ok()) << whole.status();
  unsigned long long p = 0;
  ASSERT_EQ(driver_.On(3, [&] { return driver_.Alloc(&p, 2 * kSize); }), 0);
  auto part = owner_->Register(reinterpret_cast<void*>(p), kSize, MemoryKind::kDevice, 3);
  ASSERT_TRUE(part.ok()) << part.status();
  const std::vector<char> want = Pattern(kSize, 9);
  driver_.Upload(whole->data, want);
  driver_.Upload(reinterpret_cast<void*>(p), want);
  auto reader = StartReader({*owner_->Describe(whole->region), *owner_->Describe(*part)});
  ASSERT_GT(reader->pid(), 0);

  EXPECT_EQ(reader->Ask("read 1"), absl::StrCat("path device-ipc fnv ", Fnv(want)));
  EXPECT_EQ(reader->Ask("read 2"), absl::StrCat("path staged fnv ", Fnv(want)));
  // A write lands in the owner's memory; the reader's answer carries its own bytes' hash.
  std::string answer = reader->Ask("write 1 5");
  ASSERT_EQ(answer.rfind("path device-ipc fnv ", 0), 0u) << answer;
  EXPECT_EQ(absl::StrCat(Fnv(driver_.Download(whole->data, kSize))), answer.substr(20));
  answer = reader->Ask("write 2 6");
  ASSERT_EQ(answer.rfind("path staged fnv ", 0), 0u) << answer;
  EXPECT_EQ(absl::StrCat(Fnv(driver_.Download(reinterpret_cast<void*>(p), kSize))),
            answer.substr(16));

  auto staged_reader = StartReader({*owner_->Describe(whole->region)}, {"device_ipc=false"});
  answer = staged_reader->Ask("read 1");
  EXPECT_EQ(answer.rfind("path staged fnv ", 0), 0u) << answer;

  // Gone, for both: the mapping was closed when the owner asked, and STALE follows.
  ASSERT_TRUE(owner_->Deregister(whole->region).ok());
  EXPECT_EQ(reader->Ask("read 1").rfind("error FAILED_PRECONDITION", 0), 0u);
  EXPECT_EQ(staged_reader->Ask("read 1").rfind("error FAILED_PRECONDITION", 0), 0u);
  ASSERT_TRUE(owner_->Deregister(*part).ok());
  EXPECT_TRUE(reader->Alive());
  ASSERT_EQ(driver_.On(3, [&] { return driver_.Free(p); }), 0);
}

// A reader that holds a mapping and stops (SIGSTOP, a frozen VM) cannot hold the owner's
// deregistration past the peer timeout: it is declared lost, and the owner carries on.
TEST_F(CudaIpc, AStoppedReaderHoldingAMappingIsDeclaredLost) {
  auto region = owner_->Allocate(4096, MemoryKind::kDevice, 1);
  auto other = owner_->Allocate(4096, MemoryKind::kDevice, 1);
  ASSERT_TRUE(region.ok() && other.ok());
  auto reader = StartReader({*owner_->Describe(region->region)});
  ASSERT_EQ(reader->Ask("read 1").rfind("path device-ipc", 0), 0u);
  ASSERT_TRUE(testing::StopAndWait(reader->pid()));
  const absl::Time start = absl::Now();
  EXPECT_TRUE(owner_->Deregister(region->region).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1000));  // it waited for the reader first
  ASSERT_EQ(kill(reader->pid(), SIGCONT), 0);
  // Continued, the reader finds itself dropped; the owner serves a new one.
  EXPECT_EQ(reader->Ask("read 1").rfind("error", 0), 0u);
  auto next = StartReader({*owner_->Describe(other->region)});
  EXPECT_EQ(next->Ask("read 1").rfind("path device-ipc", 0), 0u);
}

// Descriptors forged for the reader (by a confused program or whoever handed them over) map
// nothing the owner does not serve as mapped: a staged region flagged mappable is staged, a
// length that is not the region's is staged and bounded by the owner, a region never given is
// refused, a deregistered one is stale, and the genuine mapping is untouched by any of them.
TEST_F(CudaIpc, ForgedDescriptorsMapNothingTheOwnerDoesNotServe) {
  constexpr size_t kSize = 1 << 16;
  auto whole = owner_->Allocate(kSize, MemoryKind::kDevice, 2);
  auto gone = owner_->Allocate(kSize, MemoryKind::kDevice, 2);
  ASSERT_TRUE(whole.ok() && gone.ok());
  unsigned long long p = 0;
  ASSERT_EQ(driver_.On(3, [&] { return driver_.Alloc(&p, 2 * kSize); }), 0);
  auto part = owner_->Register(reinterpret_cast<void*>(p), kSize, MemoryKind::kDevice, 3);
  ASSERT_TRUE(part.ok()) << part.status();
  const std::vector<char> want = Pattern(kSize, 3), want_part = Pattern(kSize, 4);
  driver_.Upload(whole->data, want);
  driver_.Upload(reinterpret_cast<void*>(p), want_part);
  const std::string genuine = *owner_->Describe(whole->region);
  auto lengths = [](uint64_t n) {
    return [n](DescriptorInfo& i, testing::Payload& d) { i.length = n, d.Set64(24, n); };
  };
  const std::vector<std::string> descriptors = {
      genuine,
      testing::Forge(genuine, lengths(2 * kSize)),
      testing::Forge(genuine, lengths(kSize / 2)),
      testing::Forge(*owner_->Describe(*part),
                     [](DescriptorInfo&, testing::Payload& d) { d.bytes[6] |= 1; }),  // mappable
      testing::Forge(genuine, [](DescriptorInfo& i,
                                 testing::Payload& d) { i.region = 999, d.Set64(16, 999); }),
      *owner_->Describe(gone->region),
  };
  for (const std::string& d : descriptors) ASSERT_FALSE(d.empty());
  ASSERT_TRUE(owner_->Deregister(gone->region).ok());
  auto reader = StartReader(descriptors);
  ASSERT_GT(reader->pid(), 0);

  const std::string mapped = absl::StrCat("path device-ipc fnv ", Fnv(want));
  EXPECT_EQ(reader->Ask("read 1"), mapped);
  for (const char* verb : {"read 2", "write 2 7"}) {
    EXPECT_EQ(reader->Ask(verb).rfind("error INVALID_ARGUMENT", 0), 0u) << verb;
  }
  EXPECT_EQ(reader->Ask("read 3"),
            absl::StrCat("path staged fnv ",
                         Fnv(std::vector<char>(want.begin(), want.begin() + kSize / 2))));
  EXPECT_EQ(reader->Ask("read 4"), absl::StrCat("path staged fnv ", Fnv(want_part)));
  EXPECT_EQ(reader->Ask("read 5").rfind("error INVALID_ARGUMENT", 0), 0u);
  EXPECT_EQ(reader->Ask("read 6").rfind("error FAILED_PRECONDITION", 0), 0u);
  EXPECT_EQ(reader->Ask("read 1"), mapped);
  EXPECT_EQ(driver_.Download(whole->data, kSize), want) << "a forged write landed";
  EXPECT_TRUE(reader->Alive());
  ASSERT_TRUE(owner_->Deregister(*part).ok());
  ASSERT_EQ(driver_.On(3, [&] { return driver_.Free(p); }), 0);
}

// The fake driver refuses what the real one refuses: a handle opened in the process that
// exported it, and bytes that are no handle.
TEST_F(CudaDeviceMemory, FakeDriverRefusesIpcAsTheDriverDoes) {
  unsigned long long p = 0;
  ASSERT_EQ(driver_.On(0, [&] { return driver_.Alloc(&p, 4096); }), 0);
  std::array<char, 64> handle{};
  ASSERT_EQ(driver_.On(0, [&] { return driver_.IpcGet(handle.data(), p); }), 0);
  unsigned long long mapped = 0;
  EXPECT_EQ(driver_.On(0, [&] { return driver_.IpcOpen(&mapped, handle, 1); }),
            201);  // CUDA_ERROR_INVALID_CONTEXT
  std::array<char, 64> junk{};
  junk.fill('x');
  EXPECT_EQ(driver_.On(0, [&] { return driver_.IpcOpen(&mapped, junk, 1); }),
            1);  // CUDA_ERROR_INVALID_VALUE
  EXPECT_EQ(driver_.On(0, [&] { return driver_.IpcGet(handle.data(), p + 64); }), 1);
  ASSERT_EQ(driver_.On(0, [&] { return driver_.Free(p); }), 0);
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

// Two processes through `rayaccel transfer`: HIP IPC maps the server's GPU memory, device to
// device, and with device_ipc=false on the client it is staged; both verified.
TEST_F(RocmDeviceMemory, TransferCommandMapsDeviceMemoryBetweenProcesses) {
  const std::string dir = testing::MakeTempDir("transfer-rocm");
  const std::vector<std::string> plugin = {
      "--plugin",
      "rocm",
      "--plugin-path",
      RAYACCEL_PLUGIN_DIR,
      "--config",
      std::string("kfd_topology_dir=") + RAYACCEL_FIXTURES_DIR + "/rocm-kfd/topo-mi210-xgmi-pcie",
      "--config",
      std::string("hip_library=") + RAYACCEL_FAKE_HIP};
  std::vector<std::string> serve = {"transfer", "--serve", "--memory",     "device:1",
                                    "--size",   "1MiB",    "--token-file", dir + "/token"};
  serve.insert(serve.end(), plugin.begin(), plugin.end());
  pid_t server = testing::Spawn(RAYACCEL_CLI, serve, dir + "/server.out", dir + "/server.err");
  ASSERT_TRUE(testing::WaitForFile(dir + "/token"));
  for (const char* ipc : {"true", "false"}) {
    for (const char* op : {"read", "write"}) {
      std::vector<std::string> client = {
          RAYACCEL_CLI, "transfer", "--token-file", dir + "/token",
          "--memory",   "device:6", "--op",         op,
          "--iters",    "2",        "--config",     std::string("device_ipc=") + ipc};
      client.insert(client.end(), plugin.begin(), plugin.end());
      testing::CommandResult r = testing::Run(client);
      EXPECT_EQ(r.exit_code, 0) << ipc << " " << op << ": " << r.out << r.err;
      EXPECT_NE(r.out.find("verified (device:6 memory)"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find(std::string(ipc) == "true" ? "path device-ipc" : "path staged"),
                std::string::npos)
          << r.out;
    }
  }
  EXPECT_EQ(testing::Stop(server), 0);
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
