// An endpoint: its UCX contexts and workers, its message handlers, its address; wait and
// notifications; teardown; the helper's table of hooks.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/ucx/batch.h"
#include "common/ucx/connect.h"
#include "common/ucx/handles.h"
#include "common/ucx/links.h"
#include "common/ucx/memory.h"
#include "common/ucx/messages.h"
#include "common/ucx/progress.h"
#include "common/ucx/requests.h"
#include "common/ucx/ring.h"
#include "common/ucx/transfer.h"

namespace rayaccel::plugin::ucx {

// Control messages' handlers take the endpoint; data messages' the fabric they arrived on.
template <unsigned kId>
ucs_status_t ControlHandler(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param) {
  return OnMessage(static_cast<Ep*>(arg), nullptr, kId, header, header_length, data, length, param);
}

template <unsigned kId>
ucs_status_t DataHandler(void* arg, const void* header, size_t header_length, void* data,
                         size_t length, const ucp_am_recv_param_t* param) {
  auto* fabric = static_cast<Ep::Fabric*>(arg);
  return OnMessage(fabric->endpoint, fabric, kId, header, header_length, data, length, param);
}

static void DestroyEndpoint(Ep* ep) {
  if (ep->progress.joinable()) {
    uint64_t one = 1;
    (void)!write(ep->stop_fd, &one, sizeof(one));
    ep->progress.join();
  }
  {
    // The rings' threads serve under the lock: stopped and joined before it is taken for good.
    std::lock_guard<std::mutex> lock(ep->mu);
    for (auto& [token, p] : ep->peers) StopRing(ep, p.get());
  }
  JoinStoppedRings(ep);
  if (ep->stop_fd >= 0) close(ep->stop_fd);
  std::lock_guard<std::mutex> lock(ep->mu);
  if (ep->control != nullptr) {
    for (auto& [token, c] : ep->connections) EndConnection(ep, c, /*say_bye=*/false);
    for (auto& [token, p] : ep->peers) ClosePeer(ep, p.get());
    ep->peers.clear();
    // Every remote endpoint hears that this one is gone, so its connections fail at once.
    for (auto& [uuid, link] : ep->links) {
      if (link->failed) continue;
      Writer w;
      w.U64(ep->uuid).U32(kClosing);
      SendMessage(link->control, kGoodbye, {}, std::move(w.str()));
      link->failed = true;
    }
    CloseLinks(ep);
    for (int i = 0; i < 64 && ProgressWorkers(ep) != 0; ++i) {
    }
  }
  ep->peers.clear();
  for (auto& [id, region] : ep->regions.TakeAll()) {
    UnmapRegion(ep, region);
    delete region;
  }
  for (Ep::Fabric& f : ep->fabrics) {
    if (f.worker != nullptr) Lib().ucp_worker_destroy(f.worker);
  }
  if (ep->control != nullptr) Lib().ucp_worker_destroy(ep->control);
  for (auto& [token, c] : ep->connections) delete c;
  for (auto& [r, unused] : ep->requests) delete r;
  for (Ep::Fabric& f : ep->fabrics) {
    if (f.context != nullptr) Lib().ucp_cleanup(f.context);
  }
}

static rayaccel_status CloseEndpointHook(rayaccel_transport_endpoint* handle,
                                         rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    DestroyEndpoint(ep);
    delete ep;
    return RAYACCEL_STATUS_OK;
  });
}

static rayaccel_status Wait(rayaccel_transport_endpoint* handle, uint32_t timeout_ms,
                            rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return Guard(error, [&] {
    Clock::time_point start = Clock::now();
    Clock::time_point deadline = start + milliseconds(timeout_ms);
    auto pause = std::chrono::microseconds(0);
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      seen = ep->activity;
    }
    while (true) {
      // Activity since the call began counts, also what the progress thread handled.
      std::unique_lock<std::mutex> lock(ep->mu);
      if (Progress(ep) || ep->activity != seen) return RAYACCEL_STATUS_OK;
      Clock::time_point now = Clock::now();
      if (now >= deadline) return RAYACCEL_STATUS_TIMEOUT;
      // Spin briefly (a transfer usually ends within microseconds), then back off to 1 ms,
      // woken early when the progress thread handles something (a reply it took first).
      if (now - start > std::chrono::microseconds(50)) {
        pause = std::min(std::chrono::microseconds(1000),
                         std::max(std::chrono::microseconds(20), pause * 2));
        // A request waiting on an owner's ring is woken by the owner's answer, not by the
        // progress thread.
        const Clock::duration nap = std::min<Clock::duration>(pause, deadline - now);
        if (!SleepOnRing(ep, lock, nap)) ep->progressed.wait_for(lock, nap);
        if (ep->activity != seen) return RAYACCEL_STATUS_OK;
      }
    }
  });
}

static rayaccel_status GetNotifications(rayaccel_transport_endpoint* handle,
                                        const rayaccel_blob_sink* sink, rayaccel_error* error) {
  Ep* ep = Of(handle);
  if (ep == nullptr || sink == nullptr || sink->put == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "get_notifications needs a sink");
  }
  return Guard(error, [&] {
    std::deque<std::string> got;
    {
      std::lock_guard<std::mutex> lock(ep->mu);
      Progress(ep);
      got = ep->notifications.TakeAll();
    }
    for (const std::string& n : got) {
      rayaccel_status s =
          sink->put(sink->host_context, {reinterpret_cast<const uint8_t*>(n.data()), n.size()});
      if (s == RAYACCEL_STATUS_RESOURCE_EXHAUSTED || s == RAYACCEL_STATUS_ABORTED) return s;
    }
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error) {
  if (rayaccel_status s = CheckOpenArgs(args, error); s != RAYACCEL_STATUS_OK) return s;
  return Guard(error, [&] {
    std::string mismatch;
    const Ucp& ucp = LoadUcp(options.ucx_library, &mismatch);
    if (!ucp.error.empty()) return Fail(error, RAYACCEL_STATUS_UNAVAILABLE, ucp.error);
    if (!mismatch.empty()) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, mismatch);
    auto ep = std::make_unique<Ep>();
    ep->options = options;
    if (options.device_ops != nullptr) {
      ep->pinned = std::make_shared<rayaccel::plugin::ucx::PinnedPool>(options.device_ops);
    }
    ep->key.assign(reinterpret_cast<const char*>(args->key.data), args->key.size);
    ep->uuid = RandomId();
    ep->peer_timeout_ms =
        args->peer_timeout_ms != 0 ? args->peer_timeout_ms : kDefaultPeerTimeoutMs;
    auto fail = [&](const char* what, ucs_status_t s) {
      DestroyEndpoint(ep.get());
      return FailUcs(error, what, s);
    };

    const Transports tls = SplitTransports(std::getenv("UCX_TLS"));
    if (tls.local.empty() && tls.network.empty()) {
      DestroyEndpoint(ep.get());
      return Fail(error, RAYACCEL_STATUS_UNSUPPORTED,
                  "UCX_TLS leaves no transport but cma, which aborts the process when a peer dies "
                  "mid-transfer (UCX 1.13); add posix,sysv or tcp");
    }
    ep->shared_memory = tls.shared_memory;
    ep->same_host_copy = SameHostCopyEnabled();
    ep->request_rings = RingEnabled();
    if (tls.shared_memory) {
      static std::once_flag warned;
      std::call_once(warned, [&] {
        LogTo(ep.get(), RAYACCEL_LOG_WARN,
              "UCX_TLS names shared memory (posix, sysv): a peer on this host that dies "
              "mid-transfer can leave this endpoint's shared-memory queue stuck "
              "(docs/transport.md); TCP is used otherwise");
      });
    }
    ucs_status_t s = UCS_OK;
    const std::string* fabric_tls[2] = {&tls.local, &tls.network};
    for (Ep::Fabric& f : ep->fabrics) {
      f.endpoint = ep.get();
      f.index = static_cast<int>(&f - ep->fabrics);
      if (fabric_tls[f.index]->empty()) continue;
      ucp_config_t* config = nullptr;
      s = ucp.ucp_config_read(nullptr, nullptr, &config);
      if (s != UCS_OK) return fail("ucp_config_read", s);
      ucp.ucp_config_modify(config, "TLS", fabric_tls[f.index]->c_str());
      // The peer timeout sets UCX's keepalive, unless the operator set UCX_KEEPALIVE_INTERVAL.
      if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
        uint32_t interval = std::max<uint32_t>(100, ep->peer_timeout_ms / 3);
        ucp.ucp_config_modify(config, "KEEPALIVE_INTERVAL",
                              (std::to_string(interval) + "ms").c_str());
      }
      ucp_params_t params{};
      params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
      // Active messages only. UCX's RMA feature would let any connected worker read and write
      // anywhere in this process over its software-emulated get and put (TCP, shared memory
      // without CMA): UCX checks no bounds there. Without it, the only bytes a peer reaches
      // are the ones this endpoint's handlers choose to send or receive, inside a live region.
      params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
      params.name = "rayaccel";
      s = ucp.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &f.context);
      ucp.ucp_config_release(config);
      if (s != UCS_OK) return fail("ucp_init", s);
      ucp_context_attr_t attr{};
      attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
      if (ucp.ucp_context_query(f.context, &attr) == UCS_OK) ep->memory_types |= attr.memory_types;
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call runs under ep->mu
    for (Ep::Fabric& f : ep->fabrics) {
      if (f.context == nullptr) continue;
      s = ucp.ucp_worker_create(f.context, &wp, &f.worker);
      if (s != UCS_OK) return fail("ucp_worker_create", s);
    }
    // Control on the network fabric's context (TCP offers UCX's peer-failure handling), else on
    // shared memory's.
    ucp_context_h control = ep->fabrics[kNetwork].context != nullptr ? ep->fabrics[kNetwork].context
                                                                     : ep->fabrics[kLocal].context;
    s = ucp.ucp_worker_create(control, &wp, &ep->control);
    if (s != UCS_OK) return fail("ucp_worker_create", s);
    ucp_am_recv_callback_t control_handlers[] = {
        ControlHandler<kHello>,   ControlHandler<kChallenge>, ControlHandler<kProof>,
        ControlHandler<kWelcome>, ControlHandler<kRefused>,   ControlHandler<kPing>,
        ControlHandler<kPong>,    ControlHandler<kBye>};
    ucp_am_recv_callback_t data_handlers[] = {DataHandler<kNotify>, DataHandler<kGet>,
                                              DataHandler<kGetReply>, DataHandler<kPut>,
                                              DataHandler<kPutAck>};
    static_assert(sizeof(control_handlers) / sizeof(control_handlers[0]) == kNotify - kHello);
    static_assert(sizeof(data_handlers) / sizeof(data_handlers[0]) == kPutAck - kNotify + 1);
    auto set_handler = [&](ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void* arg) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
      hp.id = id;
      hp.flags = UCP_AM_FLAG_WHOLE_MSG;
      hp.cb = cb;
      hp.arg = arg;
      return ucp.ucp_worker_set_am_recv_handler(worker, &hp);
    };
    for (unsigned id = kHello; id < kNotify && s == UCS_OK; ++id) {
      s = set_handler(ep->control, id, control_handlers[id - kHello], ep.get());
    }
    if (s == UCS_OK) s = set_handler(ep->control, kGoodbye, ControlHandler<kGoodbye>, ep.get());
    ucp_am_recv_callback_t mapping_handlers[] = {ControlHandler<kMapAsk>, ControlHandler<kMapReply>,
                                                 ControlHandler<kUnmap>, ControlHandler<kUnmapped>};
    static_assert(sizeof(mapping_handlers) / sizeof(mapping_handlers[0]) ==
                  kUnmapped - kMapAsk + 1);
    for (unsigned id = kMapAsk; id <= kUnmapped && s == UCS_OK; ++id) {
      s = set_handler(ep->control, id, mapping_handlers[id - kMapAsk], ep.get());
    }
    ucp_am_recv_callback_t batch_handlers[] = {DataHandler<kGetBatch>, DataHandler<kGetBatchReply>,
                                               DataHandler<kPutBatch>, DataHandler<kPutBatchAck>};
    static_assert(sizeof(batch_handlers) / sizeof(batch_handlers[0]) ==
                  kPutBatchAck - kGetBatch + 1);
    for (Ep::Fabric& f : ep->fabrics) {
      for (unsigned id = kGetBatch; f.worker != nullptr && id <= kPutBatchAck && s == UCS_OK;
           ++id) {
        s = set_handler(f.worker, id, batch_handlers[id - kGetBatch], &f);
      }
    }
    for (Ep::Fabric& f : ep->fabrics) {
      for (unsigned id = kNotify; f.worker != nullptr && id <= kPutAck && s == UCS_OK; ++id) {
        s = set_handler(f.worker, id, data_handlers[id - kNotify], &f);
      }
    }
    if (s != UCS_OK) return fail("ucp_worker_set_am_recv_handler", s);
    // The address: both data workers' (either may be missing), then the control worker's.
    Writer w;
    w.U32(kAddressMagic).U16(kWireVersion).U16(0).U64(ep->uuid);
    for (ucp_worker_h worker :
         {ep->fabrics[kLocal].worker, ep->fabrics[kNetwork].worker, ep->control}) {
      std::string address;
      s = WorkerAddress(worker, &address);
      if (s != UCS_OK) return fail("ucp_worker_get_address", s);
      w.U32(static_cast<uint32_t>(address.size())).Bytes(address.data(), address.size());
    }
    // Signed with the key: a reader parses the worker addresses only of an endpoint that has it.
    const Mac signature = MacOf(ep->key, kAddressLabel, w.str());
    w.Bytes(signature.data(), signature.size());
    if (w.str().size() > RAYACCEL_TRANSPORT_MAX_BLOB) {
      DestroyEndpoint(ep.get());
      return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED,
                  "UCX's worker address is larger than an address may be (narrow UCX_TLS)");
    }
    rayaccel_status put =
        args->address->put(args->address->host_context,
                           {reinterpret_cast<const uint8_t*>(w.str().data()), w.str().size()});
    if (put != RAYACCEL_STATUS_OK) {
      DestroyEndpoint(ep.get());
      return Fail(error, put, "the host refused the endpoint's address");
    }
    ep->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (ep->stop_fd < 0) {
      DestroyEndpoint(ep.get());
      return Fail(error, RAYACCEL_STATUS_RESOURCE_EXHAUSTED, "eventfd failed");
    }
    ep->next_heartbeat = Clock::now();
    ep->progress = std::thread(ProgressThread, ep.get());
    args->endpoint = ep.release();
    return RAYACCEL_STATUS_OK;
  });
}

rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*)) {
  rayaccel_transport_api t{};
  t.struct_size = sizeof(t);
  t.open_endpoint = open_endpoint;
  t.close_endpoint = CloseEndpointHook;
  t.register_memory = RegisterMemory;
  t.deregister_memory = DeregisterMemory;
  t.pack_descriptor = PackDescriptor;
  t.connect = Connect;
  t.transfer = Transfer;
  t.notify = Notify;
  t.flush = Flush;
  t.poll = Poll;
  t.abandon = Abandon;
  t.wait = Wait;
  t.get_notifications = GetNotifications;
  t.close = Close;
  t.transfer_batch = TransferBatch;
  return t;
}

const rayaccel_transport_api* Hooks() {
  static const rayaccel_transport_api hooks = Table(nullptr);
  return &hooks;
}

}  // namespace rayaccel::plugin::ucx
