// Links: this endpoint's UCX endpoints to a remote endpoint, shared by every connection and
// peer record between the two; a failed link fails its users. Lookups and refusal logging.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_LINKS_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_LINKS_H_

#include "common/ucx/handles.h"

namespace rayaccel::plugin::ucx {

// The connection is dead for good: every request on it fails with `status`, and its mappings
// close. Safe inside UCX callbacks. Caller holds mu.
void FailConnection(Conn* c, rayaccel_status status, std::string why);

// The remote endpoint is gone (or no longer trusted): every connection to it fails and every
// record of its readers is dropped; the link's UCX endpoints close after progress returns.
// Safe inside UCX callbacks. Caller holds mu.
void FailLink(Link* link, const std::string& why);

unsigned ProgressData(Ep* ep);

unsigned ProgressWorkers(Ep* ep);

// A worker's UCX address; empty for no worker.
ucs_status_t WorkerAddress(ucp_worker_h worker, std::string* out);

Link* LinkTo(Ep* ep, uint64_t uuid);

// A new link to the endpoint `uuid`, with its control endpoint; its data endpoint comes when
// needed (EnsureData). Null when UCX cannot reach the address. Caller holds mu, outside UCX
// callbacks.
Link* OpenLink(Ep* ep, uint64_t uuid, const void* control_address, ucs_status_t* status);

// The link's data endpoint: on the local fabric when UCX reaches the peer's local worker (its
// own worker through self, or a same-host peer over shared memory where the operator named
// it), else on the network fabric. An empty address: the peer has no such fabric.
ucs_status_t EnsureData(Ep* ep, Link* link, const std::string& local, const std::string& network);

// Closes links that failed (forcibly: UCX cancels what is in flight on them) and links no
// handshake succeeded over that nobody uses (with UCX's goodbye, bounded). Caller holds mu,
// outside UCX callbacks.
void CloseLinks(Ep* ep);

ucp_ep_h ControlOf(const Link* link);

ucp_ep_h DataOf(const Link* link);

Conn* ConnectionByToken(Ep* ep, uint64_t token);

Peer* PeerByToken(Ep* ep, uint64_t token);

// An admitted reader, or null (with the stray counted and logged once).
Peer* AdmittedPeer(Ep* ep, uint64_t token);

void NoteRefused(Ep* ep, const std::string& why);

// This host, as an owner and a reader compare it: the kernel's boot id ("" where /proc has
// none, and nothing is mapped). Kept in a plain array: a progress thread may read it while the
// process exits, and a heap string would be orphaned when the plugin is unloaded.
std::string_view BootId();

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_LINKS_H_
