// Descriptors and addresses from a peer, against a live connected pair of the sim plugin's
// UCX transport in this process: every input becomes a READ or WRITE through a descriptor
// whose fields and plugin bytes the input chose (checksum recomputed, so it reaches the
// plugin and the owner), alone or in a batch with genuine entries (the owner's chunks), or a
// connect to an address whose framing the input damaged. Nothing
// may crash, hang, or move a byte outside a live region: the owner's two regions sit between
// guard pages, and a canary page it never registers must keep its bytes.
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "rayaccel/transport.h"
#include "transport/descriptor.h"

namespace {

constexpr size_t kPage = 4096;

struct Pair {
  std::unique_ptr<rayaccel::Transport> owner, reader;
  rayaccel::Transport::ConnectionId conn = 0;
  rayaccel::Transport::RegionId local = 0;
  std::string descriptors[2];
  unsigned char* canary = nullptr;
  unsigned char* local_bytes = nullptr;
};

std::unique_ptr<rayaccel::Transport> Open() {
  rayaccel::TransportOptions o;
  o.plugin = "sim";
  o.search_path = {RAYACCEL_PLUGIN_DIR};
  o.peer_timeout = absl::Seconds(2);
  o.key = std::string(32, 'f');
  auto t = rayaccel::Transport::Open(o);
  if (!t.ok()) std::abort();
  return *std::move(t);
}

Pair& Live() {
  static Pair* pair = [] {
    setenv("UCX_TLS", "tcp", 0);  // the fabric whose bounds UCX does not enforce itself
    auto* p = new Pair;
    p->owner = Open();
    p->reader = Open();
    auto* area = static_cast<unsigned char*>(
        mmap(nullptr, 6 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (int g : {0, 2, 4}) mprotect(area + g * kPage, kPage, PROT_NONE);
    p->canary = area + 5 * kPage;
    std::memset(p->canary, 0xC5, kPage);
    for (int i = 0; i < 2; ++i) {
      auto r = p->owner->Register(area + (1 + 2 * i) * kPage, kPage);
      if (!r.ok()) std::abort();
      p->descriptors[i] = *p->owner->Describe(*r);
    }
    p->local_bytes = static_cast<unsigned char*>(std::calloc(4, kPage));
    p->local = *p->reader->Register(p->local_bytes, 4 * kPage);
    auto c = p->reader->Connect(p->owner->address());
    if (!c.ok()) std::abort();
    p->conn = *c;
    // Closed before LeakSanitizer looks at the process on exit: with UCX's threads still
    // running, its scan of the stopped process crashes.
    std::atexit([] {
      pair->reader.reset();
      pair->owner.reset();
    });
    return p;
  }();
  return *pair;
}

uint32_t U32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t{p[3]} << 24; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  Pair& pair = Live();
  if (data[0] % 4 == 3) {
    // An address: the genuine one with a window of its framing overwritten, or cut short.
    std::string address = pair.owner->address();
    const size_t at = data[1] % 24, n = std::min<size_t>(size - 16, 8);
    address.replace(at, n, reinterpret_cast<const char*>(data + 16), n);
    if (data[2] & 1) address.resize(U32(data + 4) % (address.size() + 1));
    auto c = pair.reader->Connect(address);
    if (c.ok()) (void)pair.reader->Close(*c);
    return 0;
  }
  auto genuine = rayaccel::transport::Decode(pair.descriptors[data[1] & 1]);
  rayaccel::DescriptorInfo info = genuine->info;
  std::string payload(genuine->payload);
  info.length = (data[2] & 1) ? U32(data + 4) : info.length;
  if (data[2] & 2) info.region = data[3];
  if (data[2] & 4) info.endpoint ^= data[3];
  for (size_t i = 16; i + 1 < size; i += 2) payload[data[i] % payload.size()] ^= data[i + 1];
  if (data[2] & 8) payload.resize(data[3] % (payload.size() + 8), '\0');
  auto forged = rayaccel::transport::Encode(info, payload);
  if (!forged.ok()) return 0;
  const uint64_t offset = U32(data + 8) % (3 * kPage);
  const uint64_t length = 1 + U32(data + 12) % (2 * kPage);
  if (data[0] % 4 == 2) {
    // A batch: the forged entry between genuine ones, READs or WRITEs as data[3] says.
    std::vector<rayaccel::TransferEntry> entries = {
        {pair.local, 0, pair.descriptors[0], 0, 64},
        {pair.local, kPage, *forged, offset, length},
        {pair.local, 3 * kPage, pair.descriptors[1], kPage - 16, 16}};
    auto b = data[3] & 1 ? pair.reader->WriteBatch(pair.conn, entries)
                         : pair.reader->ReadBatch(pair.conn, entries);
    if (b.ok() && absl::IsDeadlineExceeded(b->Wait(absl::Now() + absl::Seconds(10)))) std::abort();
    if (b.ok() && (!b->entry(0).ok() || !b->entry(2).ok())) std::abort();  // genuine ones land
  } else {
    auto r = data[0] % 2 == 0
                 ? pair.reader->Read(pair.conn, pair.local, 0, *forged, offset, length)
                 : pair.reader->Write(pair.conn, pair.local, 0, *forged, offset, length);
    if (r.ok() && absl::IsDeadlineExceeded(r->Wait(absl::Now() + absl::Seconds(10)))) std::abort();
  }
  for (size_t i = 0; i < kPage; ++i) {
    if (pair.canary[i] != 0xC5) std::abort();  // the owner's unregistered memory changed
  }
  return 0;
}
