#include "common/ucx/ring.h"

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ucx/links.h"
#include "common/ucx/owner.h"
#include "common/ucx/requests.h"

namespace rayaccel::plugin::ucx {

namespace {

// Copies between this process and a reader: `mine[i]` into the reader's `theirs[i]`
// (`to_reader`) or back, each pair of one length. From kParallelCopyMin bytes up in as many
// parts as this host has CPUs for (at most kParallelCopyParts), each on a thread of its own:
// the kernel's copy between two processes pins each page first and runs at about half memcpy's
// speed on one CPU (5.6 GB/s against 11 for 64 MiB here), two at once at 7.7 to 9.7. A single
// range is cut in whole pages; many are parted at range boundaries by their bytes.
bool CopyWithReader(PeerProcess* reader, bool to_reader, std::vector<iovec> mine,
                    std::vector<iovec> theirs, std::string* why) {
  uint64_t total = 0;
  for (const iovec& v : mine) total += v.iov_len;
  static const uint32_t cpus = std::max(1u, std::thread::hardware_concurrency());
  const uint32_t parts = total < kParallelCopyMin ? 1 : std::min(cpus, kParallelCopyParts);
  if (parts > 1 && mine.size() == 1) {  // one range: cut it
    const uint64_t piece = (total / parts + 4095) & ~uint64_t{4095};
    std::vector<iovec> a, b;
    for (uint64_t at = 0; at < total; at += piece) {
      const uint64_t n = std::min(piece, total - at);
      a.push_back({static_cast<char*>(mine[0].iov_base) + at, n});
      b.push_back({static_cast<char*>(theirs[0].iov_base) + at, n});
    }
    mine.swap(a);
    theirs.swap(b);
  }
  // Groups [from, to) of ranges of about total / parts bytes each.
  std::vector<std::pair<size_t, size_t>> groups;
  size_t from = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    bytes += mine[i].iov_len;
    if (bytes * parts >= total * (groups.size() + 1) || i + 1 == mine.size()) {
      groups.emplace_back(from, i + 1);
      from = i + 1;
    }
  }
  auto copy = [&](size_t g, std::string* why) {
    const auto [first, last] = groups[g];
    return to_reader ? reader->Write(&mine[first], &theirs[first], last - first, why)
                     : reader->Read(&mine[first], &theirs[first], last - first, why);
  };
  std::vector<std::thread> threads;
  std::vector<std::string> whys(groups.size());
  std::vector<char> ok(groups.size(), 0);
  for (size_t g = 1; g < groups.size(); ++g) {
    threads.emplace_back([&, g] { ok[g] = copy(g, &whys[g]); });
  }
  if (!groups.empty()) ok[0] = copy(0, &whys[0]);
  for (std::thread& t : threads) t.join();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!ok[g]) {
      *why = whys[g];
      return false;
    }
  }
  return true;
}

// The owner's hold on regions while a ring copy runs outside the endpoint's lock: Deregister
// waits for it (memory.cc). Taken and given back under the lock.
struct RingHold {
  Ep* ep;
  std::vector<uint64_t> regions;
  void Take(uint64_t region) {
    ep->ring_holds[region]++;
    regions.push_back(region);
  }
  void GiveBack() {
    for (uint64_t id : regions) {
      if (auto it = ep->ring_holds.find(id); it != ep->ring_holds.end() && --it->second == 0) {
        ep->ring_holds.erase(it);
      }
    }
    regions.clear();
  }
};

// A request's copies, once checked: made with the lock let go (so that the owner's progress
// thread, its notifications and other readers' requests go on meanwhile), its regions held.
uint32_t CopyUnlocked(
    Ep* ep, std::unique_lock<std::mutex>& lock,
    // A copy, taken with the lock held: the peer may go while it is let go.
    std::shared_ptr<PeerProcess> reader,  // NOLINT(performance-unnecessary-value-param)
    bool to_reader, RingHold* hold, std::vector<iovec> mine, std::vector<iovec> theirs) {
  lock.unlock();
  std::string why;
  const bool ok = CopyWithReader(reader.get(), to_reader, std::move(mine), std::move(theirs), &why);
  lock.lock();
  hold->GiveBack();
  if (ok) return RAYACCEL_STATUS_OK;
  LogTo(ep, RAYACCEL_LOG_WARN,
        std::string("a ring copy ") + (to_reader ? "to" : "from") + " a reader failed: " + why);
  return RAYACCEL_STATUS_INTERNAL;
}

// A single READ or WRITE of the reader's: inline in the slot (under the lock: at most
// kRingInlineMax bytes), or copied by the kernel between the region and the reader's address.
uint32_t ServeTransfer(Ep* ep, std::unique_lock<std::mutex>& lock, Peer* p, const RingCall& call,
                       char* data) {
  Region* region = nullptr;
  rayaccel_status st = CheckRange(ep, call.region, call.offset, call.length, &region);
  if (st != RAYACCEL_STATUS_OK) return st;
  if (!region->host) return RAYACCEL_STATUS_INVALID_ARGUMENT;  // device memory goes by message
  char* at = static_cast<char*>(region->base) + call.offset;
  const bool read = call.op == RingOp::kRead;
  if (call.address == 0) {
    if (call.length > kRingSlotData) return RAYACCEL_STATUS_INVALID_ARGUMENT;
    if (read) {
      CopyMemory(data, at, call.length);
    } else {
      CopyMemory(at, data, call.length);
    }
    return RAYACCEL_STATUS_OK;
  }
  RingHold hold{ep, {}};
  hold.Take(call.region);
  return CopyUnlocked(ep, lock, p->process, read, &hold, {{at, call.length}},
                      {{InPeer(call.address), call.length}});
}

// A batch's ranges: copied out of the slot first (the reader may change it), then each checked
// and all moved at once; each range's status goes back at the start of the slot (4 bytes each),
// INTERNAL for every range that was to move if the copy failed.
uint32_t ServeRanges(Ep* ep, std::unique_lock<std::mutex>& lock, Peer* p, const RingCall& call,
                     char* data) {
  if (call.count == 0 || call.count > kRingMaxRanges) return RAYACCEL_STATUS_INVALID_ARGUMENT;
  std::vector<RingRange> in(call.count);
  std::memcpy(in.data(), data, call.count * sizeof(RingRange));
  std::vector<rayaccel_status> st(call.count);
  std::vector<iovec> mine, theirs;
  RingHold hold{ep, {}};
  for (uint32_t i = 0; i < call.count; ++i) {
    Region* region = nullptr;
    st[i] = CheckRange(ep, in[i].region, in[i].offset, in[i].length, &region);
    if (st[i] == RAYACCEL_STATUS_OK && !region->host) st[i] = RAYACCEL_STATUS_INVALID_ARGUMENT;
    if (st[i] != RAYACCEL_STATUS_OK) continue;
    if (hold.regions.empty() || hold.regions.back() != in[i].region) hold.Take(in[i].region);
    mine.push_back({static_cast<char*>(region->base) + in[i].offset, in[i].length});
    theirs.push_back({InPeer(in[i].address), in[i].length});
  }
  if (!mine.empty() && CopyUnlocked(ep, lock, p->process, call.op == RingOp::kReadRanges, &hold,
                                    std::move(mine), std::move(theirs)) != RAYACCEL_STATUS_OK) {
    for (rayaccel_status& s : st) {
      if (s == RAYACCEL_STATUS_OK) s = RAYACCEL_STATUS_INTERNAL;
    }
  }
  Writer w;
  for (rayaccel_status s : st) w.U32(static_cast<uint32_t>(s));
  std::memcpy(data, w.str().data(), w.str().size());
  return RAYACCEL_STATUS_OK;
}

// One request of reader `token`'s ring, on the ring's thread. Checked under the endpoint's lock
// as a message is; copies of any size made with it let go and their regions held, so that
// Deregister waits for them and, once it returned, no request reaches the region. A reader this
// owner no longer admits, or has not heard from within the peer timeout (it may have given up
// on this owner), is served nothing.
uint32_t ServeRing(Ep* ep, uint64_t token, const RingCall& call, char* data) {
  std::unique_lock<std::mutex> lock(ep->mu);
  Peer* p = PeerByToken(ep, token);
  if (p == nullptr || p->failed || !p->authenticated || p->process == nullptr ||
      Clock::now() > p->deadline) {
    return RAYACCEL_STATUS_PEER_LOST;
  }
  switch (call.op) {
    case RingOp::kRead:
    case RingOp::kWrite:
      return ServeTransfer(ep, lock, p, call, data);
    case RingOp::kReadRanges:
    case RingOp::kWriteRanges:
      return ServeRanges(ep, lock, p, call, data);
  }
  return RAYACCEL_STATUS_INVALID_ARGUMENT;
}

// What a reader takes from the owner's word: the statuses an owner gives, and PEER_LOST.
rayaccel_status RingStatus(uint32_t status) {
  return status == RAYACCEL_STATUS_PEER_LOST ? RAYACCEL_STATUS_PEER_LOST : OwnerStatus(status);
}

// What a ring request's failure says.
const char* RingText(rayaccel_status st) {
  return st == RAYACCEL_STATUS_PEER_LOST ? "the owner no longer serves this reader"
                                         : RefusalText(st);
}

// Request `r`, the oldest on `c`'s ring, answered with `status`: its bytes (an inline READ) or
// its ranges' statuses land, its slot is free, and it completes. Caller holds mu.
void Land(Ep* ep, Conn* c, Request* r, uint32_t status) {
  c->ring_requests.pop_front();
  ep->ring_waiting--;
  rayaccel_status st = RingStatus(status);
  const char* slot = c->ring->data(r->ring_n);
  if (st == RAYACCEL_STATUS_OK && r->ring_inline) CopyMemory(r->local, slot, r->length);
  if (st == RAYACCEL_STATUS_OK && !r->chunk.empty()) {
    Reader in(slot, r->chunk.size() * 4);
    for (Request::ChunkEntry& e : r->chunk) e.status = OwnerStatus(in.U32());
  }
  c->ring->Take(r->ring_n);
  if (st == RAYACCEL_STATUS_OK) st = r->shared_part;
  Complete(r, st, RingText(st));
  MaybeFree(r);
}

void DrainRing(Ep* ep, Conn* c) {
  while (!c->ring_requests.empty()) {
    Request* r = c->ring_requests.front();
    uint32_t status = 0;
    if (!c->ring->Done(r->ring_n, &status)) return;
    Land(ep, c, r, status);
  }
}

// A request on `c`'s ring, numbered as a transfer so that flushes and notifications wait for it.
// Caller holds mu.
Request* NewRingRequest(Ep* ep, Conn* c, rayaccel_transfer_op op, uint32_t n) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
  r->id = c->next_id++;
  r->same_host = true;
  r->ring_n = n;
  ep->requests[r] = true;
  c->transfers[r->id] = r;
  c->ring_requests.push_back(r);
  ep->ring_waiting++;
  return r;
}

}  // namespace

// --- The owner's side

// The endpoint's published regions, made on first use while the same-host paths are on.
static PublishedRegions* Published(Ep* ep) {
  if (ep->published == nullptr && ep->same_host_copy && ep->request_rings) {
    std::string why;
    ep->published = PublishedRegions::Create(&why);
    if (ep->published == nullptr) {  // READs keep the ring
      LogTo(ep, RAYACCEL_LOG_DEBUG, "host regions are not published to readers: " + why);
    }
  }
  return ep->published.get();
}

void PublishRegion(Ep* ep, const Region* region) {
  if (!region->host || region->staged) return;
  if (PublishedRegions* table = Published(ep))
    table->Publish(region->id, region->base, region->length);
}

void OfferRing(Ep* ep, Peer* p, Writer* welcome) {
  if (p->process == nullptr || !ep->same_host_copy || !ep->request_rings ||
      ep->rings >= kMaxRings) {
    return;
  }
  std::string why;
  p->ring = RingOwner::Create(&why);
  if (p->ring == nullptr) {
    LogTo(ep, RAYACCEL_LOG_DEBUG, "no request ring for a reader on this host: " + why);
    return;
  }
  ep->rings++;
  const uint64_t token = p->token;
  p->ring->Start(
      [ep, token](const RingCall& call, char* data) { return ServeRing(ep, token, call, data); },
      RingSpin());
  const SharedMemory& m = p->ring->memory();
  welcome->U32(static_cast<uint32_t>(m.fd())).U64(m.device()).U64(m.inode()).U64(m.length());
  if (PublishedRegions* table = Published(ep)) {
    const SharedMemory& t = table->memory();
    welcome->U32(static_cast<uint32_t>(t.fd())).U64(t.device()).U64(t.inode()).U64(t.length());
  }
}

void StopRing(Ep* ep, Peer* p) {
  if (p->ring == nullptr) return;
  p->ring->Stop();
  ep->stopped_rings.push_back(std::move(p->ring));
  ep->rings--;
}

void JoinStoppedRings(Ep* ep) {
  std::vector<std::unique_ptr<RingOwner>> stopped;
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    stopped.swap(ep->stopped_rings);
  }
  stopped.clear();  // joins each thread, now free to take the lock and end
}

// --- The reader's side

void MapRing(Ep* ep, Conn* c, const SharedFileOffer& offer, const SharedFileOffer* published) {
  if (!c->same_host || !ep->request_rings) return;
  std::string why;
  std::unique_ptr<RingReader> ring = RingReader::Map(c->owner_pid, static_cast<int>(offer.fd),
                                                     offer.device, offer.inode, offer.length, &why);
  if (ring == nullptr) {
    LogTo(ep, RAYACCEL_LOG_DEBUG, "the owner's request ring is not used: " + why);
    return;
  }
  c->ring = std::move(ring);
  if (published == nullptr) return;
  std::unique_ptr<PublishedRegionsReader> table =
      PublishedRegionsReader::Map(c->owner_pid, static_cast<int>(published->fd), published->device,
                                  published->inode, published->length, &why);
  if (table == nullptr) {
    LogTo(ep, RAYACCEL_LOG_DEBUG, "the owner's published regions are not used: " + why);
    return;
  }
  c->published = std::move(table);
}

std::shared_ptr<PublishedRegionsReader> ReadsDirectly(Conn* c, uint64_t bytes) {
  if (c->failure != RAYACCEL_STATUS_OK || c->published == nullptr || c->ring == nullptr ||
      bytes <= kRingInlineMax || bytes >= kParallelCopyMin) {
    return nullptr;
  }
  const Clock::time_point now = Clock::now();
  const bool sparse = now - c->last_read > kReadBurstGap;
  c->last_read = now;
  if (!c->ring->OwnerAsleep()) return nullptr;
  // Up to kReadsDirectlyAlways, a READ in a burst wakes the owner instead (once: it then spins
  // while the burst lasts), whose copy is quicker there than the reader's with its checks.
  if (bytes < kReadsDirectlyAlways && !sparse) return nullptr;
  return c->published;
}

void ReadDirectly(const PublishedRegionsReader& published, std::vector<DirectRead>* reads) {
  std::vector<PublishedRegionsReader::Range> ranges;
  std::vector<iovec> mine;
  std::vector<size_t> which;
  for (size_t i = 0; i < reads->size(); ++i) {
    DirectRead& d = (*reads)[i];
    PublishedRegionsReader::Range range;
    if (!published.Find(d.region, d.offset, d.length, &range)) continue;
    ranges.push_back(range);
    mine.push_back({d.local, d.length});
    which.push_back(i);
  }
  if (ranges.empty()) return;
  std::unique_ptr<bool[]> ok(new bool[ranges.size()]);
  published.Copy(ranges.data(), mine.data(), ranges.size(), ok.get());
  for (size_t j = 0; j < ranges.size(); ++j) (*reads)[which[j]].done = ok[j];
}

bool RingTransfer(Ep* ep, Conn* c, rayaccel_transfer_args* a, const RemoteRegion& remote,
                  rayaccel_status* status, rayaccel_error* error) {
  const bool read = a->op == RAYACCEL_TRANSFER_READ;
  char* local = static_cast<char*>(Of(a->local)->base) + a->local_offset;
  if (read && remote.owner == c->peer_uuid) {
    // The owner's thread asleep: the range copied here, from where it published the region,
    // rather than wake it; the owner's way where the table says no.
    std::shared_ptr<PublishedRegionsReader> published;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      // A READ of what fits a slot stays on the ring: with the owner awake, 0.7 us against
      // the kernel copy's 2.7 here, and one that woke it keeps it awake for those that follow.
      published = ReadsDirectly(c, a->length);
    }
    std::vector<DirectRead> reads = {{remote.id, a->remote_offset, a->length, local, false}};
    if (published != nullptr) ReadDirectly(*published, &reads);
    if (reads[0].done) {
      if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) a->path = RAYACCEL_PATH_SAME_HOST;
      a->request = nullptr;
      *status = RAYACCEL_STATUS_OK;
      return true;
    }
  }
  const bool in_slot = a->length <= kRingInlineMax;
  std::shared_ptr<RingReader> ring;
  Request* r = nullptr;
  uint32_t n = 0;
  // A shared READ: the owner, awake on another CPU, copies the first `asked` bytes while this
  // thread copies the rest from the region the owner published, two CPUs at one READ. The
  // rest is kept only if the owner's answer for the first part is OK (which says it ran, so
  // no look here at whether it is stopped) and the region held still under the copy.
  std::shared_ptr<PublishedRegionsReader> shared;
  PublishedRegionsReader::Range rest{};
  uint64_t asked = a->length;
  {
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) {
      *status = Fail(error, c->failure, c->failure_text);
      return true;
    }
    if (c->ring == nullptr || !c->ring->Next(&n)) return false;
    if (remote.owner != c->peer_uuid) {
      *status = Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                     "the descriptor belongs to another peer than this connection's");
      return true;
    }
    ring = c->ring;
    const uint64_t half = (a->length / 2) & ~uint64_t{4095};
    if (read && a->length >= kSharedReadMin && a->length < kParallelCopyMin &&
        c->published != nullptr && ring->OwnerAwakeElsewhere() &&
        c->published->Find(remote.id, a->remote_offset + half, a->length - half, &rest)) {
      shared = c->published;
      asked = half;
    }
    if (!read && in_slot) CopyMemory(ring->data(n), local, a->length);
    r = NewRingRequest(ep, c, a->op, n);
    r->local = local;
    r->length = asked;
    r->ring_inline = read && in_slot;
    ring->Post(n, {read ? RingOp::kRead : RingOp::kWrite, 0, remote.id, a->remote_offset, asked,
                   in_slot ? 0 : reinterpret_cast<uintptr_t>(local)});
  }
  if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) a->path = RAYACCEL_PATH_SAME_HOST;
  rayaccel_status rest_status = RAYACCEL_STATUS_OK;
  if (shared != nullptr) {
    switch (shared->CopyServed(rest, {local + asked, a->length - asked})) {
      case PublishedRegionsReader::Kept::kYes:
        break;
      case PublishedRegionsReader::Kept::kOwnerGone:
        rest_status = RAYACCEL_STATUS_PEER_LOST;
        break;
      case PublishedRegionsReader::Kept::kWithdrawn:  // deregistered during the READ
        rest_status = RAYACCEL_STATUS_STALE;
        break;
      case PublishedRegionsReader::Kept::kNotMapped:  // as the owner's own copy would fail
        rest_status = RAYACCEL_STATUS_INTERNAL;
        break;
    }
  }
  // The answer usually comes within microseconds: waited for here, without the lock, so that
  // the transfer ends within the call.
  ring->Await(n, kRingReaderSpin);
  std::lock_guard<std::mutex> lock(ep->mu);
  if (rest_status != RAYACCEL_STATUS_OK) {
    if (!r->done) {
      r->shared_part = rest_status;                // applied when its answer lands
    } else if (r->status == RAYACCEL_STATUS_OK) {  // landed meanwhile; not yet the caller's
      r->status = rest_status;
      r->why = RingText(rest_status);
    }
  }
  if (c->ring == ring) DrainRing(ep, c);
  *status = RAYACCEL_STATUS_OK;
  if (r->done && r->status == RAYACCEL_STATUS_OK) {
    ep->requests.erase(r);
    delete r;
    a->request = nullptr;
  } else {
    a->request = r;  // a refusal, or an owner still copying: Wait says
  }
  return true;
}

bool StartRingChunkLocked(Ep* ep, Conn* c, Request* batch, rayaccel_transfer_op op,
                          const std::vector<ChunkItem>& items) {
  uint32_t n = 0;
  if (c->ring == nullptr || items.size() > kRingMaxRanges || !c->ring->Next(&n)) return false;
  auto* ranges = reinterpret_cast<RingRange*>(c->ring->data(n));
  Request* r = NewRingRequest(ep, c, op, n);
  r->abandoned = true;  // the batch's: freed once it ends
  for (size_t i = 0; i < items.size(); ++i) {
    const ChunkItem& item = items[i];
    RingRange range{item.region, item.offset, item.length, reinterpret_cast<uintptr_t>(item.local)};
    std::memcpy(&ranges[i], &range, sizeof(range));
    r->chunk.push_back({item.entry, item.local, item.length, RAYACCEL_STATUS_OK});
    r->length += item.length;
  }
  r->batch = batch;
  batch->parts_running++;
  c->ring->Post(n, {op == RAYACCEL_TRANSFER_READ ? RingOp::kReadRanges : RingOp::kWriteRanges,
                    static_cast<uint32_t>(items.size()), 0, 0, 0, 0});
  return true;
}

void AwaitRingChunks(Ep* ep, Conn* c, std::unique_lock<std::mutex>& lock) {
  if (c->ring == nullptr || c->ring_requests.empty()) return;
  std::shared_ptr<RingReader> ring = c->ring;
  const uint32_t last = c->ring_requests.back()->ring_n;
  lock.unlock();
  ring->Await(last, kRingReaderSpin);
  lock.lock();
  if (c->ring == ring) DrainRing(ep, c);
}

void DrainRings(Ep* ep) {
  if (ep->ring_waiting == 0) return;
  for (auto& [token, c] : ep->connections) {
    if (!c->ring_requests.empty() && c->ring != nullptr) DrainRing(ep, c);
  }
}

void DropRing(Ep* ep, Conn* c) {
  ep->ring_waiting -= static_cast<uint32_t>(c->ring_requests.size());
  c->ring_requests.clear();  // still in c->transfers, which the caller fails
  c->ring.reset();
  c->published.reset();
}

bool SleepOnRing(Ep* ep, std::unique_lock<std::mutex>& lock, Clock::duration timeout) {
  if (ep->ring_waiting == 0) return false;
  for (auto& [token, c] : ep->connections) {
    if (c->ring_requests.empty() || c->ring == nullptr) continue;
    std::shared_ptr<RingReader> ring = c->ring;
    const uint32_t n = c->ring_requests.front()->ring_n;
    lock.unlock();
    ring->Sleep(n, std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    lock.lock();
    return true;
  }
  return false;
}

}  // namespace rayaccel::plugin::ucx
