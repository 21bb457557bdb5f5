// The reader's transfers: one READ or WRITE (whole, in pieces when staged, or copied by an
// owner on this host), flush and notify.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_TRANSFER_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_TRANSFER_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// Whether the owner copies between `local` and `remote` itself, told where in this process
// (same_host_copy.h; CopyPut, ServeGets, CopyRanges): host memory on both sides, the owner on
// this host and able to reach this process (its welcome says), over the network fabric (UCX's
// shared memory carries messages as fast as the kernel copies); for a transfer of its own,
// `length` enough that a system call costs less than carrying the bytes in messages (a
// batch's chunk is one system call for all its ranges). Caller holds mu.
bool OwnerCopies(const Conn* c, const Region* local, const RemoteRegion& remote);

// Starts bytes [skip, skip + length) of transfer `a` on `c`: the whole transfer (group null,
// its request in *out) or one piece of `group`, with `outgoing` a staged write's bytes.
// Caller holds mu.
rayaccel_status StartPieceLocked(Ep* ep, Conn* c, const rayaccel_transfer_args& a,
                                 const RemoteRegion& remote, uint64_t skip, uint64_t length,
                                 Request* group, rayaccel_request** out, Staging outgoing,
                                 rayaccel_error* error);

// Issues `group`'s next pieces, up to kPiecesInFlight, while all is well. Caller holds mu. A
// staged write's next piece leaves the device here, with the lock held: 4 MiB at the bus's
// speed, the price of keeping only a few pieces' host memory in use.
void IssuePieces(Request* group);

rayaccel_status Transfer(rayaccel_transfer_args* a, rayaccel_error* error);

rayaccel_status Notify(rayaccel_notify_args* a, rayaccel_error* error);

rayaccel_status Flush(rayaccel_connection* handle, rayaccel_request** out, rayaccel_error* error);

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_TRANSFER_H_
