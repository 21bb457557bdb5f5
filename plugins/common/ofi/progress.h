// Progress: each channel's completions, messages routed to the reader's or the owner's side,
// heartbeats and silent peers, the progress thread.
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_PROGRESS_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_PROGRESS_H_

#include "common/ofi/handles.h"

namespace rayaccel::plugin::ofi {

// Reads the channel's completions and handles them. The channel may be closed by what it
// handles (a connection failing): then it stops.
void ProgressChannel(Endpoint* ep, Channel* ch);

// One pass over every channel. Caller holds mu.
// Whether a retired channel still has sends or transfers out.
bool Draining(const Channel* ch);

void ProgressAll(Endpoint* ep);

// Sleeps until a channel's provider has work, the endpoint stops, or `limit` passes. With a
// channel that has no wait object, sleeps for `fallback` instead. Caller holds the lock; it
// is released while asleep.
void Sleep(Endpoint* ep, std::unique_lock<std::mutex>& lock, milliseconds limit,
           std::chrono::microseconds fallback);

// Answers peers while the application is not calling in. libfabric's software providers make
// progress only when called (FI_PROGRESS_MANUAL), the owner's side of a one-sided transfer
// included: back to back for a while after something happened, then asleep on the completion
// queues' wait objects (their providers' sockets) until there is work, a heartbeat is due, or
// 5 ms have passed.
void ProgressThread(Endpoint* ep);

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_PROGRESS_H_
