// Channels: a libfabric endpoint with its own completion queue and address vector, one per
// connection on each side and a listener per endpoint; posting sends and RMA, deferring what
// the provider cannot take yet.
#include "common/ofi/channels.h"

#include <memory>
#include <string>
#include <utility>

#include "common/ofi/progress.h"

namespace rayaccel::plugin::ofi {

// Channels.

void CloseFid(fid_t f) {
  if (f != nullptr) fi_close(f);
}

void CloseChannel(Channel* ch) {
  if (ch == nullptr) return;
  // The peer's address goes first: rxm then closes its connection and ends what is queued on
  // it (closing an endpoint with transfers queued to a stopped peer crashed inside rxm).
  if (ch->remove_peer && ch->av != nullptr && ch->peer != FI_ADDR_UNSPEC) {
    fi_addr_t peer = ch->peer;
    fi_av_remove(ch->av, &peer, 1, 0);
    ch->peer = FI_ADDR_UNSPEC;
  }
  CloseFid(ch->ep != nullptr ? &ch->ep->fid : nullptr);
  CloseFid(ch->av != nullptr ? &ch->av->fid : nullptr);
  CloseFid(ch->cq != nullptr ? &ch->cq->fid : nullptr);
  ch->ep = nullptr, ch->av = nullptr, ch->cq = nullptr;
  ch->deferred.clear();
  for (Op* op : ch->ops) {
    if (op->kind == Op::Kind::kRma && op->local != nullptr) --op->local->local_uses;
    delete op;
  }
  ch->ops.clear();
}

void Retire(Endpoint* ep, std::unique_ptr<Channel> ch) {
  if (ch == nullptr) return;
  ch->connection = nullptr;
  ch->peer_record = nullptr;
  ch->retired = true;
  for (Op* op : ch->deferred) {
    if (op->local != nullptr) --op->local->local_uses;
    ch->ops.erase(op);
    delete op;
  }
  ch->deferred.clear();
  for (Op* op : ch->ops) op->request = nullptr;
  if (ch->remove_peer && ch->av != nullptr && ch->peer != FI_ADDR_UNSPEC) {
    fi_addr_t peer = ch->peer;
    fi_av_remove(ch->av, &peer, 1, 0);
    ch->peer = FI_ADDR_UNSPEC;
  }
  ep->retired.push_back(std::move(ch));
}

ssize_t PostReceive(Channel* ch) {
  auto* op = new Op;
  op->kind = Op::Kind::kReceive;
  op->channel = ch;
  op->bytes.resize(kMessageBytes);
  ssize_t rc =
      fi_recv(ch->ep, op->bytes.data(), op->bytes.size(), nullptr, FI_ADDR_UNSPEC, &op->context);
  if (rc != 0) {
    delete op;
    return rc;
  }
  ch->ops.insert(op);
  return 0;
}

std::unique_ptr<Channel> OpenChannel(Endpoint* ep, size_t receives, std::string* why) {
  auto ch = std::make_unique<Channel>();
  ch->remove_peer = ep->provider.find("ofi_rxm") != std::string::npos;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.wait_obj = FI_WAIT_FD;  // so that the progress thread can sleep until work comes
  cq_attr.size = 1024;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_MAP;
  av_attr.count = 4;
  int rc = fi_cq_open(ep->domain, &cq_attr, &ch->cq, nullptr);
  if (rc != 0) {  // a provider without wait objects: polled
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(ep->domain, &cq_attr, &ch->cq, nullptr);
  } else if (fi_control(&ch->cq->fid, FI_GETWAIT, &ch->wait_fd) != 0) {
    ch->wait_fd = -1;
  }
  if (rc == 0) rc = fi_av_open(ep->domain, &av_attr, &ch->av, nullptr);
  if (rc == 0) rc = fi_endpoint(ep->domain, ep->info, &ch->ep, nullptr);
  if (rc == 0) rc = fi_ep_bind(ch->ep, &ch->cq->fid, FI_TRANSMIT | FI_RECV);
  if (rc == 0) rc = fi_ep_bind(ch->ep, &ch->av->fid, 0);
  if (rc == 0) rc = fi_enable(ch->ep);
  if (rc == 0) {
    char name[kMaxFabricAddress];
    size_t length = sizeof(name);
    rc = fi_getname(&ch->ep->fid, name, &length);
    if (rc == 0) ch->address.assign(name, length);
  }
  for (size_t i = 0; rc == 0 && i < receives; ++i) rc = static_cast<int>(PostReceive(ch.get()));
  if (rc != 0) {
    *why = "opening a libfabric endpoint on " + ep->provider + ": " + ErrorText(rc);
    CloseChannel(ch.get());
    return nullptr;
  }
  return ch;
}

bool SetPeer(Channel* ch, const std::string& address, std::string* why) {
  fi_addr_t at = FI_ADDR_UNSPEC;
  int n = fi_av_insert(ch->av, address.data(), 1, &at, 0, nullptr);
  if (n != 1) {
    *why = "the peer's fabric address does not insert (" + ErrorText(n < 0 ? n : FI_EINVAL) + ")";
    return false;
  }
  ch->peer = at;
  return true;
}

ssize_t TryPost(Channel* ch, Op* op) {
  if (op->kind == Op::Kind::kSend) {
    return fi_send(ch->ep, op->bytes.data(), op->bytes.size(), nullptr, ch->peer, &op->context);
  }
  return op->read ? fi_read(ch->ep, op->at, op->length, op->desc, ch->peer, op->remote_address,
                            op->rkey, &op->context)
                  : fi_write(ch->ep, op->at, op->length, op->desc, ch->peer, op->remote_address,
                             op->rkey, &op->context);
}

ssize_t Post(Channel* ch, Op* op) {
  if (ch == nullptr || ch->ep == nullptr || ch->peer == FI_ADDR_UNSPEC) return -FI_ENOTCONN;
  op->channel = ch;
  if (ch->deferred.empty()) {
    const ssize_t rc = TryPost(ch, op);
    if (rc != 0 && rc != -FI_EAGAIN) return rc;
    if (rc == 0) {
      ch->ops.insert(op);
      return 0;
    }
  }
  ch->ops.insert(op);
  ch->deferred.push_back(op);
  return 0;
}

bool SendOn(Endpoint* /*ep*/, Channel* ch, std::string bytes) {
  auto* op = new Op;
  op->kind = Op::Kind::kSend;
  op->bytes = std::move(bytes);
  if (Post(ch, op) == 0) return true;
  delete op;
  return false;
}

std::string Header(MessageType type, uint64_t token) {
  Writer w;
  w.U16(type).U16(kWireVersion).U64(token);
  return std::move(w.str());
}

}  // namespace rayaccel::plugin::ofi
