// Progress: what UCX callbacks queued goes out after progress returns; the owner answers
// handshakes; heartbeats go, and silent peers are declared lost; the progress thread.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_PROGRESS_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_PROGRESS_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

void SendReadyNotifications(Ep* ep);

// Drops an owner's record of a reader; a refusal is said first. The link stays.
void ClosePeer(Ep* ep, Peer* p);

// Declares the remote endpoint of `link` lost: it was silent for the peer timeout.
void DeclareLost(Ep* ep, Link* link);

// Answers queued hellos, admits readers that proved the key, sends heartbeats and declares
// silent peers lost, and closes what failed. Runs after ucp_worker_progress returns, because
// UCX endpoints may not be created or closed inside its callbacks.
void ServeControl(Ep* ep);

// Caller holds mu. Returns whether UCX did anything. Bounded, so that a flood of messages
// cannot keep the endpoint's lock forever.
bool Progress(Ep* ep);

void ProgressThread(Ep* ep);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_PROGRESS_H_
