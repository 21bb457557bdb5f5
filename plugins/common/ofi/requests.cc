// Requests: their completion, batches' entries, flushes' and notifications' barriers, and
// the host's poll and abandon.
#include "common/ofi/requests.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "common/ofi/channels.h"
#include "common/ofi/progress.h"

namespace rayaccel::plugin::ofi {

// Requests.

static void MaybeFree(Request* r) {
  if (r->done && r->abandoned) {
    r->endpoint->requests.erase(r);
    delete r;
  }
}

void Complete(Request* r, rayaccel_status status, const std::string& why) {
  if (r->done) return;
  if (r->status == RAYACCEL_STATUS_OK && status != RAYACCEL_STATUS_OK) {
    r->status = status;
    r->why = why;
  }
  if (r->running > 0 || r->held) return;
  r->done = true;
  ++r->endpoint->activity;
  Connection* c = r->connection;
  r->connection = nullptr;
  if (c != nullptr && r->kind == Request::Kind::kTransfer) {
    c->transfers.erase(r->id);
    CheckBarriers(c);
  }
  MaybeFree(r);
}

void EntryDone(Request* r, uint32_t entry, rayaccel_status status, const std::string& why) {
  if (r->batch && entry < r->entry_status.size() && status != RAYACCEL_STATUS_OK &&
      r->entry_status[entry] == RAYACCEL_STATUS_OK) {
    r->entry_status[entry] = status;
  }
  if (r->running > 0) --r->running;
  Complete(r, status, why);
}

static void SendNotification(Connection* c, Request* r) {
  Endpoint* ep = c->endpoint;
  std::string m = Header(kNotification, c->token);
  m += r->payload;
  const bool sent = c->channel != nullptr && SendOn(ep, c->channel.get(), std::move(m));
  Complete(r, sent ? RAYACCEL_STATUS_OK : RAYACCEL_STATUS_PEER_LOST,
           sent ? "" : "the notification could not be sent");
}

void CheckBarriers(Connection* c) {
  while (!c->barriers.empty()) {
    Request* b = c->barriers.front();
    if (!c->transfers.empty() && c->transfers.begin()->first < b->mark) return;
    c->barriers.erase(c->barriers.begin());
    if (b->kind == Request::Kind::kNotify && c->failure == RAYACCEL_STATUS_OK) {
      SendNotification(c, b);
    } else {
      Complete(b, c->failure, c->failure_text);
    }
  }
}

rayaccel_status Poll(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    Endpoint* ep = r->endpoint;
    std::lock_guard<std::mutex> lock(ep->mu);
    if (!r->done) {
      if (Connection* c = r->connection; c != nullptr && c->channel != nullptr) {
        ProgressChannel(ep, c->channel.get());
      }
      if (!r->done) return RAYACCEL_STATUS_TIMEOUT;
    }
    if (r->batch && r->statuses_out != nullptr) {
      std::copy(r->entry_status.begin(), r->entry_status.end(), r->statuses_out);
    }
    const rayaccel_status s = r->status;
    const std::string why = r->why;
    ep->requests.erase(r);
    delete r;
    return s == RAYACCEL_STATUS_OK ? s : Fail(error, s, why);
  });
}

rayaccel_status Abandon(rayaccel_request* handle, rayaccel_error* error) {
  Request* r = Of(handle);
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return Guard(error, [&] {
    std::lock_guard<std::mutex> lock(r->endpoint->mu);
    r->abandoned = true;
    r->statuses_out = nullptr;
    MaybeFree(r);
    return RAYACCEL_STATUS_OK;
  });
}

}  // namespace rayaccel::plugin::ofi
