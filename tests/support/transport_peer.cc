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
//     and exits 0 at end of input.
//
//   rayaccel_transport_peer raw OUT
//     Speaks UCX itself to the owner whose OUT file is given, as an attacker that holds no key:
//     RMA get and put aimed at the canary (UCX's software get and put, which serve any address
//     where the owner enables RMA), and the transport's own transfer messages with made-up
//     tokens. Prints "leaked" if any canary byte came back, else "nothing".
#include <sys/mman.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rayaccel/transport.h"

namespace {

constexpr size_t kPage = 4096;
constexpr unsigned char kCanary = 0xC5;

uint64_t Fnv(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
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
      mmap(nullptr, 5 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* canary = static_cast<unsigned char*>(
      mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (area == MAP_FAILED || canary == MAP_FAILED) return 1;
  unsigned char* a = area + kPage;
  unsigned char* b = area + 3 * kPage;
  std::memset(a, 'A', kPage);
  std::memset(b, 'B', kPage);
  std::memset(canary, kCanary, kPage);
  for (int g : {0, 2, 4}) mprotect(area + g * kPage, kPage, PROT_NONE);
  auto ra = (*t)->Register(a, kPage);
  auto rb = (*t)->Register(b, kPage);
  auto alloc = (*t)->Allocate(kPage);
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
      for (size_t i = 0; i < kPage; ++i) intact = intact && canary[i] == kCanary;
      std::cout << "canary " << (intact ? "ok" : "changed") << " a " << Fnv(a, kPage) << " b "
                << Fnv(b, kPage) << std::endl;
    } else if (line == "dereg-a") {
      absl::Status s = (*t)->Deregister(*ra);
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
  // The transport's own messages, with tokens no handshake gave out.
  for (unsigned id = 9; id <= 13; ++id) {
    std::string header(40, '\x01');
    wait(ucp_am_send_nbx(ep, id, header.data(), header.size(), junk.data(), junk.size(), &none));
  }
  for (int i = 0; i < 1000; ++i) ucp_worker_progress(worker);
  std::cout << (leaked ? "leaked" : "nothing") << std::endl;
  std::_Exit(0);  // without closing: a peer that vanishes
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "owner") {
    int timeout_ms = 0;
    if (args.size() >= 4) (void)absl::SimpleAtoi(args[3], &timeout_ms);
    return Owner(args[1], args.size() >= 3 ? args[2] : "", timeout_ms);
  }
  if (args.size() == 2 && args[0] == "raw") return Raw(args[1]);
  std::cerr << "usage: rayaccel_transport_peer owner OUT [KEY_FILE [PEER_TIMEOUT_MS]] | raw OUT\n";
  return 2;
}
