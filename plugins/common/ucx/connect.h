// The reader's connections: connect (hello, challenge, proof, welcome) and close.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_CONNECT_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_CONNECT_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// Ends a connection of ours: what is in flight may finish (within the peer timeout), the rest
// fails, then both endpoints go. Caller holds mu.
void EndConnection(Ep* ep, Conn* c, bool say_bye);

rayaccel_status Connect(rayaccel_transport_endpoint* handle, rayaccel_blob peer,
                        rayaccel_connection** out, rayaccel_error* error);

rayaccel_status Close(rayaccel_connection* handle, rayaccel_error* error);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_CONNECT_H_
