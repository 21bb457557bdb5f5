// Channels: a libfabric endpoint with its own completion queue and address vector, one per
// connection on each side and a listener per endpoint; posting sends and RMA, deferring what
// the provider cannot take yet.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_CHANNELS_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_CHANNELS_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

void CloseFid(fid_t f);

// Closes a channel's libfabric objects; every operation still posted on it is over, so its
// records go (an RMA's request is told by the caller, who failed the connection first).
void CloseChannel(Channel* ch);

// Ends a channel's connection: the peer's address goes (rxm closes its connection to it, so
// nothing more moves), its operations are no request's any more, and it closes once they
// have come back (ProgressAll).
void Retire(Endpoint* ep, std::unique_ptr<Channel> ch);

ssize_t PostReceive(Channel* ch);

std::unique_ptr<Channel> OpenChannel(Endpoint* ep, size_t receives, std::string* why);

// Inserts the other side's fabric address (already verified under the key).
bool SetPeer(Channel* ch, const std::string& address, std::string* why);

ssize_t TryPost(Channel* ch, Op* op);

// Posts a send or an RMA. One the provider cannot take now (FI_EAGAIN: a connection still
// being made, a full queue) waits in the channel's queue, in order, for the next progress.
// 0: the channel owns the operation; otherwise the caller still does, and the error says why.
ssize_t Post(Channel* ch, Op* op);

// Sends one message; its bytes live in the operation until it completes.
bool SendOn(Endpoint* ep, Channel* ch, std::string bytes);

std::string Header(MessageType type, uint64_t token);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_CHANNELS_H_
