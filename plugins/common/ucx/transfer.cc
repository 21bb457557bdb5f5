// The reader's transfers: one READ or WRITE (whole, in pieces when staged, or copied by an
// owner on this host), flush and notify.
#include "common/ucx/transfer.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "common/ucx/links.h"
#include "common/ucx/mappings.h"
#include "common/ucx/memory.h"
#include "common/ucx/progress.h"
#include "common/ucx/requests.h"
#include "common/ucx/ring.h"

namespace rayaccel::plugin::ucx {

bool OwnerCopies(const Conn* c, const Region* local, const RemoteRegion& remote) {
  return c->same_host && c->link != nullptr && local->host && (remote.flags & kHostMemory) != 0;
}
static bool CopiedOnHost(const Conn* c, const Region* local, const RemoteRegion& remote,
                         uint64_t length) {
  return OwnerCopies(c, local, remote) && c->link->fabric == kNetwork && length >= kSameHostCopyMin;
}

rayaccel_status StartPieceLocked(Ep* ep, Conn* c, const rayaccel_transfer_args& a,
                                 const RemoteRegion& remote, uint64_t skip, uint64_t length,
                                 Request* group, rayaccel_request** out, Staging outgoing,
                                 rayaccel_error* error) {
  char* local = static_cast<char*>(Of(a.local)->base) + a.local_offset + skip;
  if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
  if (remote.owner != c->peer_uuid) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                "the descriptor belongs to another peer than this connection's");
  }
  if (DataOf(c->link) == nullptr) {
    return Fail(error, RAYACCEL_STATUS_PEER_LOST, "the connection has no data path");
  }
  const int fabric = c->link->fabric;
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = a.op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
  r->local = local;
  r->length = length;
  r->memh = Of(a.local)->memh[fabric];
  r->staged = Of(a.local)->staged;
  r->device = Of(a.local)->device;
  r->staging = std::move(outgoing);
  r->abandoned = group != nullptr;  // a piece: freed once it ends
  const void* send_from =
      r->staged && r->kind == Request::Kind::kWrite ? r->staging.data() : r->local;
  r->id = c->next_id++;
  r->same_host = CopiedOnHost(c, Of(a.local), remote, length);
  Writer w;
  w.U64(c->token).U64(r->id).U64(remote.id).U64(a.remote_offset + skip).U64(length);
  if (r->same_host) w.U64(reinterpret_cast<uintptr_t>(r->local));
  r->header = std::move(w.str());
  ep->requests[r] = true;
  c->transfers[r->id] = r;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = TransferSent;
  p.user_data = r;
  ucs_status_ptr_t started;
  if (r->kind == Request::Kind::kRead || r->same_host) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    started = Lib().ucp_am_send_nbx(DataOf(c->link), r->kind == Request::Kind::kRead ? kGet : kPut,
                                    r->header.data(), r->header.size(), nullptr, 0, &p);
  } else {
    if (!r->staged) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = Of(a.local)->memh[fabric];
    }
    if (r->length <= kEagerMax && fabric == kNetwork) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_EAGER;
    }
    started = Lib().ucp_am_send_nbx(DataOf(c->link), kPut, r->header.data(), r->header.size(),
                                    send_from, r->length, &p);
  }
  if (!Started(r, started, "transfer")) {
    rayaccel_status s = r->status;
    std::string why = r->why;
    ep->requests.erase(r);
    delete r;
    return Fail(error, s, why);
  }
  if (group != nullptr) {  // counted only once it went out
    r->group = group;
    group->pieces_in_flight++;
  } else {
    *out = r;
  }
  if (started == nullptr) MaybeCompleteWrite(r);
  return RAYACCEL_STATUS_OK;
}

// A whole transfer (no group): a staged write's copy outside the endpoint's lock, so that it
// holds up no peer the endpoint serves, then the transfer under it.
static rayaccel_status StartPiece(Ep* ep, Conn* c, const rayaccel_transfer_args& a,
                                  const RemoteRegion& remote, rayaccel_request** out,
                                  rayaccel_error* error) {
  Staging outgoing;
  if (rayaccel_status st = StageOutgoing(ep, a, 0, a.length, &outgoing, error);
      st != RAYACCEL_STATUS_OK) {
    return st;
  }
  std::lock_guard<std::mutex> lock(ep->mu);
  return StartPieceLocked(ep, c, a, remote, 0, a.length, nullptr, out, std::move(outgoing), error);
}

void IssuePieces(Request* group) {
  if (group->issuing) return;  // a piece that ended while its group issues
  group->issuing = true;
  Ep* ep = group->endpoint;
  const rayaccel_transfer_args& a = group->whole;
  while (group->reply == RAYACCEL_STATUS_OK && group->next_piece < a.length &&
         group->pieces_in_flight < kPiecesInFlight) {
    Conn* c = group->connection;
    if (c == nullptr) {
      group->reply = RAYACCEL_STATUS_PEER_LOST;
      group->first_why = "the connection was closed";
      break;
    }
    const uint64_t at = group->next_piece, n = std::min(kStagedPiece, a.length - at);
    char text[512] = {};
    rayaccel_error e{sizeof(e), text, sizeof(text)};
    Staging outgoing;
    rayaccel_status st = StageOutgoing(ep, a, at, n, &outgoing, &e);
    if (st == RAYACCEL_STATUS_OK) {
      st =
          StartPieceLocked(ep, c, a, group->remote, at, n, group, nullptr, std::move(outgoing), &e);
    }
    if (st != RAYACCEL_STATUS_OK) {
      group->reply = st;
      group->first_why = text;
      break;
    }
    group->next_piece = at + n;
  }
  group->issuing = false;
}

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckTransferArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    RemoteRegion remote;
    if (!ParseDescriptor(a->remote_descriptor, &remote)) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "malformed UCX descriptor");
    }
    if (Of(a->local)->endpoint != ep) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                  "the local region belongs to another endpoint");
    }
    // The reader's own checks catch mistakes early; the owner's decide.
    if (a->local_offset > Of(a->local)->length ||
        a->length > Of(a->local)->length - a->local_offset || a->remote_offset > remote.length ||
        a->length > remote.length - a->remote_offset) {
      return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "the range lies outside a region");
    }
    // The owner's memory, on this host: mapped and copied here (a device's, or host memory the
    // owner's helper allocated).
    if (MayMap(ep, Of(a->local), remote)) {
      Mapping* m = nullptr;
      rayaccel_status st = RAYACCEL_STATUS_OK;
      std::string why;
      {
        std::lock_guard<std::mutex> lock(ep->mu);
        // What the owner already sent is read first: a device mapping it revoked is not used. A
        // host mapping needs no such care: the owner's memory stays until the reader says it
        // closed the mapping, and what it frees then is no longer the owner's.
        if (!HostMapped(remote)) Progress(ep);
        if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
        if (remote.owner != c->peer_uuid) {
          return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT,
                      "the descriptor belongs to another peer than this connection's");
        }
        if (c->may_map && (!HostMapped(remote) || c->same_host)) {
          m = MappingFor(ep, c, remote, &st, &why);
        }
      }
      if (st != RAYACCEL_STATUS_OK) return Fail(error, st, why);
      if (m != nullptr) return CopyMapped(ep, c, a, remote.id, m, error);
    }
    const bool staged = Of(a->local)->staged || (remote.flags & kStagedByOwner) != 0;
    // Host memory here and the owner's, not mapped: on the owner's request ring where it offered
    // one (the connection's same-host proof), else by message.
    if (!staged && Of(a->local)->host && (remote.flags & kHostMemory) != 0 && c->same_host) {
      rayaccel_status st = RAYACCEL_STATUS_OK;
      if (RingTransfer(ep, c, a, remote, &st, error)) return st;
    }
    if (RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) {
      // The owner's side as its descriptor says: a forged flag misreports only the forger's own.
      a->path = staged ? RAYACCEL_PATH_STAGED : RAYACCEL_PATH_FABRIC;
    }
    if (!staged || a->length <= kStagedPiece) {
      rayaccel_status st = StartPiece(ep, c, *a, remote, &a->request, error);
      if (st == RAYACCEL_STATUS_OK && Of(a->request)->same_host &&
          RAYACCEL_HAS_FIELD(a, rayaccel_transfer_args, path)) {
        a->path = RAYACCEL_PATH_SAME_HOST;
      }
      return st;
    }
    // Staged and large: pieces, a few in flight at a time, so that one piece's copy to or from
    // the device overlaps the others' time on the fabric, in both processes, and only those
    // few pieces' host memory is in use. The group completes when its last piece has, with
    // the first failure.
    auto* group = new Request();
    group->endpoint = ep;
    group->connection = c;
    group->kind = a->op == RAYACCEL_TRANSFER_READ ? Request::Kind::kRead : Request::Kind::kWrite;
    group->is_group = true;
    group->whole = *a;
    group->whole.struct_size = sizeof(group->whole);
    group->remote = remote;
    group->held = true;  // until this call returns it
    std::lock_guard<std::mutex> lock(ep->mu);
    ep->requests[group] = true;
    IssuePieces(group);
    if (group->next_piece == 0) {  // nothing went out
      rayaccel_status st = group->reply;
      std::string why = group->first_why;
      ep->requests.erase(group);
      delete group;
      return Fail(error, st, why);
    }
    group->held = false;
    MaybeCompleteGroup(group);
    a->request = group;
    return RAYACCEL_STATUS_OK;
  });
}

// A flush or a notification: waits for the connection's transfers issued before it.
static Request* Barrier(Ep* ep, Conn* c, Request::Kind kind) {
  auto* r = new Request();
  r->endpoint = ep;
  r->connection = c;
  r->kind = kind;
  r->mark = c->next_id;
  ep->requests[r] = true;
  c->barriers.push_back(r);
  CheckBarriers(c);
  return r;
}

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error) {
  if (rayaccel_status s = CheckNotifyArgs(a, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    Conn* c = Of(a->connection);
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    // The message goes once every transfer issued before it has completed: the owner
    // acknowledged each write after it landed, and each read's bytes are here.
    Request* r = Barrier(ep, c, Request::Kind::kNotify);
    r->payload.assign(reinterpret_cast<const char*>(a->message.data), a->message.size);
    SendReadyNotifications(ep);
    a->request = r;
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status Flush(rayaccel_connection* handle, rayaccel_request** out, rayaccel_error* error) {
  Conn* c = Of(handle);
  if (c == nullptr || out == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "flush needs a connection");
  }
  return Guard(error, [&] {
    Ep* ep = c->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (c->failure != RAYACCEL_STATUS_OK) return Fail(error, c->failure, c->failure_text);
    if (c->transfers.empty()) {
      *out = nullptr;
      return RAYACCEL_STATUS_OK;
    }
    *out = Barrier(ep, c, Request::Kind::kFlush);
    return RAYACCEL_STATUS_OK;
  });
}

}  // namespace rayaccel::plugin::ucx
