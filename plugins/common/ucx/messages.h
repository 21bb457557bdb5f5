// Every message an endpoint receives, in one handler: its fields read and checked for shape, a
// malformed one dropped and counted, then applied (or queued for after progress); and the sends
// nobody waits for.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_MESSAGES_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_MESSAGES_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// The parameters of a send whose completion `done` handles; `eager` for small messages that
// need no rendezvous.
ucp_request_param_t SendParams(ucp_send_nbx_callback_t done, void* user_data, bool eager);

// Sends a message that nobody waits for; its bytes live until UCX is done with them. Caller
// holds mu, outside UCX callbacks. `eager` for a small one; a large one UCX may rendezvous.
void SendMessage(ucp_ep_h uep, unsigned id, std::string header, std::string bytes,
                 bool eager = true);

// One handler for every message: checks its shape and applies it. A malformed message from a
// peer is dropped with a log line; a large one a peer pushed at us is released unread. Runs
// inside progress, mu held.
ucs_status_t OnMessage(Ep* ep, Ep::Fabric* fabric, unsigned id, const void* header,
                       size_t header_length, void* data, size_t length,
                       const ucp_am_recv_param_t* param);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_MESSAGES_H_
