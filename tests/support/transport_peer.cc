// The other process of the transport's attack tests.
//
//   rayaccel_transport_peer owner OUT [KEY_FILE [PEER_TIMEOUT_MS]]
//     Opens a sim transport endpoint and registers two 4 KiB regions, A and B, each between
//     PROT_NONE guard pages (any access outside them kills this process), plus one the plugin
//     allocates; keeps a canary page it never registers. Writes to OUT, one per line: the
//     address, A's, B's and the allocated region's descriptors (web-safe base64), the
//     canary's address and A's address (hex). Then answers commands on stdin:
//       check      -> "canary ok|changed a <fnv> b <fnv>"
//       dereg-a    -> "ok" once A is deregistered
//       fill-alloc -> "ok" once the allocated region holds 'C' throughout
//       alloc      -> "alloc <fnv>" of the allocated region
//       dereg-alloc -> "ok" once the allocated region is deregistered
//     and exits 0 at end of input.
//
//   rayaccel_transport_peer cuda-reader IN KEY_FILE PEER_TIMEOUT_MS [CONFIG=VALUE...]
//     A reader of CUDA device memory on the CUDA plugin over the fake NVML and fake CUDA driver
//     (FAKE_NVML_FIXTURE from the environment): IN holds the owner's address and descriptors,
//     one per line (web-safe base64). Reads into and writes from a device buffer of its own
//     on the plugin's device 5, as large as the largest region. Commands on stdin:
//       read I         -> "path P fnv F": descriptor I read whole, F the bytes' FNV-1a
//       write I SEED   -> "path P fnv F": its buffer filled from SEED, written to I whole
//     and "error STATUS" when a transfer fails.
//
//   rayaccel_transport_peer looping-reader OUT KEY_FILE
//     A reader of the owner whose OUT file is given, as an application mid-work when it is
//     stopped or killed: on "start" it reads A whole into a buffer of its own, answers
//     "looping", then writes the buffer back to A and reads A again, without end (A keeps its
//     bytes whatever instant it dies at).
//
//   rayaccel_transport_peer kv-decode IN KEY_FILE LOOP
//     A decode process of the KV-cache pattern: IN holds the prefill's address and its
//     regions' descriptors, one per line (web-safe base64), each region of whole 16 KiB
//     blocks. On "pull" it reads every block of every region, last block first within each
//     region (into memory of its own, as one batch), issues the notification "pulled", then
//     waits for the batch and answers "landed F", F the FNV-1a of what landed, or "error
//     STATUS". With LOOP 1, "pull" answers "pulling" at once and pulls again and again until
//     killed.
//
//   rayaccel_transport_peer raw OUT
//     Speaks UCX itself to the owner whose OUT file is given, as an attacker that holds no key:
//     RMA get and put aimed at the canary (UCX's software get and put, which serve any address
//     where the owner enables RMA), and the transport's own transfer messages with made-up
//     tokens. Prints "leaked" if any canary byte came back, else "nothing".
#include <dlfcn.h>
#include <sys/mman.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "rayaccel/transport.h"

namespace {

// A region, and each guard around it: 16 KiB, so that an owner on this host copies a whole
// region into its reader rather than send it (kSameHostCopyMin in plugins/common/ucx/handles.h).
constexpr size_t kUnit = 16 << 10;
constexpr unsigned char kCanary = 0xC5;

uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The allocated region, touched between transfers that the reader orders through its commands
// (the other process, which ThreadSanitizer does not see: tests/sanitizers/tsan.supp).
void FillAllocated(void* data) { std::memset(data, 'C', kUnit); }
uint64_t FingerprintAllocated(const void* data) {
  return Fnv(static_cast<const unsigned char*>(data), kUnit);
}

int Owner(const std::string& out, const std::string& key_file, int timeout_ms) {
  rayaccel::TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.key_file = key_file;
  if (timeout_ms > 0) o.peer_timeout = absl::Milliseconds(timeout_ms);
  auto t = rayaccel::Transport::Open(o);
  if (!t.ok()) {
    std::cerr << t.status() << "\n";
    return 1;
  }
  // guard | A | guard | B | guard
  auto* area = static_cast<unsigned char*>(
      mmap(nullptr, 5 * kUnit, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* canary = static_cast<unsigned char*>(
      mmap(nullptr, kUnit, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (area == MAP_FAILED || canary == MAP_FAILED) return 1;
  unsigned char* a = area + kUnit;
  unsigned char* b = area + 3 * kUnit;
  std::memset(a, 'A', kUnit);
  std::memset(b, 'B', kUnit);
  std::memset(canary, kCanary, kUnit);
  for (int g : {0, 2, 4}) mprotect(area + g * kUnit, kUnit, PROT_NONE);
  auto ra = (*t)->Register(a, kUnit);
  auto rb = (*t)->Register(b, kUnit);
  auto alloc = (*t)->Allocate(kUnit);
  if (!ra.ok() || !rb.ok() || !alloc.ok()) return 1;
  {
    std::ofstream f(out + ".tmp");
    f << absl::WebSafeBase64Escape((*t)->address()) << "\n"
      << absl::WebSafeBase64Escape(*(*t)->Describe(*ra)) << "\n"
      << absl::WebSafeBase64Escape(*(*t)->Describe(*rb)) << "\n"
      << absl::WebSafeBase64Escape(*(*t)->Describe(alloc->region)) << "\n"
      << absl::StrCat(absl::Hex(reinterpret_cast<uintptr_t>(canary))) << "\n"
      << absl::StrCat(absl::Hex(reinterpret_cast<uintptr_t>(a))) << "\n";
  }
  std::rename((out + ".tmp").c_str(), out.c_str());
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "check") {
      bool intact = true;
      for (size_t i = 0; i < kUnit; ++i) intact = intact && canary[i] == kCanary;
      std::cout << "canary " << (intact ? "ok" : "changed") << " a " << Fnv(a, kUnit) << " b "
                << Fnv(b, kUnit) << std::endl;
    } else if (line == "dereg-a") {
      absl::Status s = (*t)->Deregister(*ra);
      std::cout << (s.ok() ? "ok" : s.ToString()) << std::endl;
    } else if (line == "fill-alloc") {
      FillAllocated(alloc->data);
      std::cout << "ok" << std::endl;
    } else if (line == "alloc") {
      std::cout << "alloc " << FingerprintAllocated(alloc->data) << std::endl;
    } else if (line == "dereg-alloc") {
      absl::Status s = (*t)->Deregister(alloc->region);
      std::cout << (s.ok() ? "ok" : s.ToString()) << std::endl;
    }
  }
  return 0;
}

// Reads the owner's network data worker's UCX address from its transport address: after the
// 16-byte header, three (length, bytes) fields: shared-memory data, network data, control
// (docs/transport.md).
bool NetworkWorkerAddress(const std::string& address, std::string* network) {
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      v |= static_cast<uint32_t>(static_cast<uint8_t>(address[at + i])) << (8 * i);
    }
    return v;
  };
  size_t at = 16;
  for (int field = 0; field < 3; ++field) {
    if (at + 4 > address.size()) return false;
    uint32_t n = u32(at);
    if (at + 4 + n > address.size()) return false;
    if (field == 1) *network = address.substr(at + 4, n);
    at += 4 + n;
  }
  return !network->empty();
}

int Raw(const std::string& owner_out) {
  std::ifstream f(owner_out);
  std::string address_b64, skip, canary_hex;
  std::getline(f, address_b64);
  for (int i = 0; i < 3; ++i) std::getline(f, skip);
  std::getline(f, canary_hex);
  std::string address, data_address;
  uint64_t canary = 0;
  if (!absl::WebSafeBase64Unescape(address_b64, &address) ||
      !NetworkWorkerAddress(address, &data_address) || !absl::SimpleHexAtoi(canary_hex, &canary)) {
    std::cerr << "cannot read " << owner_out << "\n";
    return 1;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  if (ucp_init(&params, nullptr, &context) != UCS_OK) return 1;
  ucp_worker_params_t wp{};
  if (ucp_worker_create(context, &wp, &worker) != UCS_OK) return 1;
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(data_address.data());
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) return 1;

  // A key of our own memory, unpacked for the owner's endpoint: UCX's software get and put
  // carry only the address, so on an owner that enabled RMA this reads anything there.
  std::vector<unsigned char> local(64, 0);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = local.data();
  mp.length = local.size();
  ucp_mem_h memh = nullptr;
  void* packed = nullptr;
  size_t packed_size = 0;
  ucp_rkey_h rkey = nullptr;
  if (ucp_mem_map(context, &mp, &memh) != UCS_OK ||
      ucp_rkey_pack(context, memh, &packed, &packed_size) != UCS_OK ||
      ucp_ep_rkey_unpack(ep, packed, &rkey) != UCS_OK) {
    std::cerr << "cannot make a key\n";
    return 1;
  }
  auto wait = [&](ucs_status_ptr_t r) {
    if (r == nullptr || UCS_PTR_IS_ERR(r)) return;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(r) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker);
    }
    // Left in flight when the owner never answers; the process exits next.
  };
  ucp_request_param_t none{};
  wait(ucp_get_nbx(ep, local.data(), local.size(), canary, rkey, &none));
  bool leaked = false;
  for (unsigned char c : local) leaked = leaked || c == kCanary;
  std::vector<unsigned char> junk(64, 0x11);
  wait(ucp_put_nbx(ep, junk.data(), junk.size(), canary, rkey, &none));
  // The transport's own messages, with tokens no handshake gave out: transfers (9 to 13) and
  // batches (19 to 22), framed as the owner reads them (token, request, count) and not.
  for (unsigned id : {9u, 10u, 11u, 12u, 13u, 19u, 20u, 21u, 22u}) {
    std::string header(40, '\x01');
    wait(ucp_am_send_nbx(ep, id, header.data(), header.size(), junk.data(), junk.size(), &none));
    std::string framed(20, '\x01');
    framed[16] = 2;  // two ranges
    framed[17] = framed[18] = framed[19] = 0;
    std::vector<unsigned char> ranges(48, 0);  // region 0 and 1, offset 0, 16 bytes
    ranges[8 * 2] = 16, ranges[24] = 1, ranges[24 + 16] = 16;
    wait(
        ucp_am_send_nbx(ep, id, framed.data(), framed.size(), ranges.data(), ranges.size(), &none));
  }
  for (int i = 0; i < 1000; ++i) ucp_worker_progress(worker);
  std::cout << (leaked ? "leaked" : "nothing") << std::endl;
  std::_Exit(0);  // without closing: a peer that vanishes
}

std::unique_ptr<rayaccel::Transport> OpenReader(const std::string& key_file) {
  rayaccel::TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.key_file = key_file;
  auto t = rayaccel::Transport::Open(o);
  if (!t.ok()) {
    std::cerr << t.status() << "\n";
    return nullptr;
  }
  return *std::move(t);
}

int LoopingReader(const std::string& owner_out, const std::string& key_file) {
  std::ifstream f(owner_out);
  std::string address_b64, a_b64, address, a;
  std::getline(f, address_b64);
  std::getline(f, a_b64);
  if (!absl::WebSafeBase64Unescape(address_b64, &address) ||
      !absl::WebSafeBase64Unescape(a_b64, &a)) {
    return 1;
  }
  auto t = OpenReader(key_file);
  if (t == nullptr) return 1;
  std::vector<unsigned char> buffer(kUnit);
  auto region = t->Register(buffer.data(), buffer.size());
  auto conn = t->Connect(address);
  if (!region.ok() || !conn.ok()) return 1;
  std::string line;
  if (!std::getline(std::cin, line) || line != "start") return 1;
  auto wait = [](absl::StatusOr<rayaccel::Request> r) {
    return r.ok() ? r->Wait(absl::Now() + absl::Seconds(30)) : r.status();
  };
  absl::Status s = wait(t->Read(*conn, *region, 0, a, 0, kUnit));
  std::cout << (s.ok() ? "looping" : "error " + s.ToString()) << std::endl;
  while (s.ok()) {
    s = wait(t->Write(*conn, *region, 0, a, 0, kUnit));
    if (s.ok()) s = wait(t->Read(*conn, *region, 0, a, 0, kUnit));
  }
  return 1;
}

int KvDecode(const std::string& in, const std::string& key_file, bool loop) {
  constexpr uint64_t kBlock = 16 << 10;
  std::ifstream f(in);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) {
    std::string raw;
    if (!absl::WebSafeBase64Unescape(line, &raw)) return 1;
    lines.push_back(raw);
  }
  if (lines.size() < 2) return 1;
  auto t = OpenReader(key_file);
  if (t == nullptr) return 1;
  std::vector<std::vector<unsigned char>> memory;
  std::vector<rayaccel::TransferEntry> entries;
  for (size_t i = 1; i < lines.size(); ++i) {
    auto info = rayaccel::Transport::Inspect(lines[i]);
    if (!info.ok() || info->length % kBlock != 0) return 1;
    memory.emplace_back(info->length, 0);
    auto region = t->Register(memory.back().data(), info->length);
    if (!region.ok()) return 1;
    for (uint64_t at = info->length; at >= kBlock; at -= kBlock) {
      entries.push_back({*region, at - kBlock, lines[i], at - kBlock, kBlock});
    }
  }
  auto conn = t->Connect(lines[0]);
  if (!conn.ok()) return 1;
  for (std::string command; std::getline(std::cin, command);) {
    if (command != "pull") continue;
    if (loop) std::cout << "pulling" << std::endl;
    do {
      for (auto& m : memory) std::fill(m.begin(), m.end(), 0);
      auto batch = t->ReadBatch(*conn, entries);
      auto notify = batch.ok() ? t->Notify(*conn, "pulled") : batch.status();
      absl::Status s = batch.ok() ? batch->Wait(absl::Now() + absl::Seconds(60)) : batch.status();
      if (s.ok()) s = notify.ok() ? notify->Wait(absl::Now() + absl::Seconds(60)) : notify.status();
      if (!s.ok()) {
        std::cout << "error " << s << std::endl;
        break;
      }
      uint64_t h = 1469598103934665603ull;
      for (const auto& m : memory) {
        for (unsigned char c : m) h = (h ^ c) * 1099511628211ull;
      }
      if (!loop) std::cout << "landed " << h << std::endl;
    } while (loop);
  }
  return 0;
}

}  // namespace

// The fake CUDA driver, as the reader uses it to fill and read its own device buffer: the
// library the plugin loaded (the same path), so the same memory.
struct FakeCuda {
  using CUresult = int;
  CUresult (*Retain)(void**, int) = nullptr;
  CUresult (*Push)(void*) = nullptr;
  CUresult (*Pop)(void**) = nullptr;
  CUresult (*HtoD)(unsigned long long, const void*, size_t) = nullptr;  // NOLINT(runtime/int)
  CUresult (*DtoH)(void*, unsigned long long, size_t) = nullptr;        // NOLINT(runtime/int)
  bool Load() {
    void* h = dlopen(RAYACCEL_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    auto get = [&](const char* name, auto* out) {
      *out = reinterpret_cast<std::remove_pointer_t<decltype(out)>>(dlsym(h, name));
      return *out != nullptr;
    };
    return h != nullptr && get("cuDevicePrimaryCtxRetain", &Retain) &&
           get("cuCtxPushCurrent_v2", &Push) && get("cuCtxPopCurrent_v2", &Pop) &&
           get("cuMemcpyHtoD_v2", &HtoD) && get("cuMemcpyDtoH_v2", &DtoH);
  }
  template <typename F>
  bool On(F f) {
    void* ctx = nullptr;
    if (Retain(&ctx, 0) != 0 || Push(ctx) != 0) return false;
    bool ok = f() == 0;
    Pop(&ctx);
    return ok;
  }
};

int CudaReader(const std::vector<std::string>& args) {
  std::ifstream in(args[1]);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    std::string bytes;
    if (!absl::WebSafeBase64Unescape(line, &bytes)) return 1;
    lines.push_back(bytes);
  }
  FakeCuda cuda;
  int timeout_ms = 0;
  if (lines.size() < 2 || !cuda.Load() || !absl::SimpleAtoi(args[3], &timeout_ms)) return 1;
  rayaccel::TransportOptions o;
  o.plugin = "cuda";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.key_file = args[2];
  o.peer_timeout = absl::Milliseconds(timeout_ms);
  o.config = {{"nvml_library", RAYACCEL_FAKE_NVML}, {"cuda_library", RAYACCEL_FAKE_CUDA}};
  for (size_t i = 4; i < args.size(); ++i) {
    const size_t eq = args[i].find('=');
    if (eq != std::string::npos) o.config[args[i].substr(0, eq)] = args[i].substr(eq + 1);
  }
  auto t = rayaccel::Transport::Open(o);
  if (!t.ok()) {
    std::cerr << t.status() << "\n";
    return 1;
  }
  uint64_t size = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    auto info = rayaccel::Transport::Inspect(lines[i]);
    if (!info.ok()) return 1;
    size = std::max(size, info->length);
  }
  auto buffer = (*t)->Allocate(size, rayaccel::MemoryKind::kDevice, 5);
  auto conn = (*t)->Connect(lines[0]);
  if (!buffer.ok() || !conn.ok()) {
    std::cerr << buffer.status() << " " << conn.status() << "\n";
    return 1;
  }
  const auto device = reinterpret_cast<uintptr_t>(buffer->data);
  std::vector<unsigned char> host(size);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    size_t index = 0;
    int seed = 0;
    if (w.size() < 2 || !absl::SimpleAtoi(w[1], &index) || index == 0 || index >= lines.size() ||
        (w[0] == "write" && (w.size() != 3 || !absl::SimpleAtoi(w[2], &seed)))) {
      std::cout << "error usage" << std::endl;
      continue;
    }
    const uint64_t n = rayaccel::Transport::Inspect(lines[index])->length;
    if (w[0] == "write") {
      for (uint64_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(seed + i * 13);
      cuda.On([&] { return cuda.HtoD(device, host.data(), n); });
    }
    auto r = w[0] == "write" ? (*t)->Write(*conn, buffer->region, 0, lines[index], 0, n)
                             : (*t)->Read(*conn, buffer->region, 0, lines[index], 0, n);
    absl::Status s = r.ok() ? r->Wait(absl::Now() + absl::Seconds(20)) : r.status();
    if (!s.ok()) {
      std::cout << "error " << s << std::endl;
      continue;
    }
    cuda.On([&] { return cuda.DtoH(host.data(), device, n); });
    std::cout << "path " << rayaccel::TransferPathName(r->path()) << " fnv " << Fnv(host.data(), n)
              << std::endl;
  }
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "owner") {
    int timeout_ms = 0;
    if (args.size() >= 4) (void)absl::SimpleAtoi(args[3], &timeout_ms);
    return Owner(args[1], args.size() >= 3 ? args[2] : "", timeout_ms);
  }
  if (args.size() == 2 && args[0] == "raw") return Raw(args[1]);
  if (args.size() == 3 && args[0] == "looping-reader") return LoopingReader(args[1], args[2]);
  if (args.size() == 4 && args[0] == "kv-decode") return KvDecode(args[1], args[2], args[3] == "1");
  if (args.size() >= 4 && args[0] == "cuda-reader") return CudaReader(args);
  std::cerr << "usage: rayaccel_transport_peer owner OUT [KEY_FILE [PEER_TIMEOUT_MS]] | raw OUT\n";
  return 2;
}
