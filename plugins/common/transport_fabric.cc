#include "transport_fabric.h"

#include <cstdlib>

#include "plugin_util.h"
#include "transport_handles.h"

namespace rayaccel::plugin::fabric {
namespace {

// Each hook goes to the helper whose handle it is given. A handle the host passes came from
// this table's open_endpoint, so it is one of the helpers'.
rayaccel_status CloseEndpoint(rayaccel_transport_endpoint* ep, rayaccel_error* error) {
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return ep->helper->close_endpoint(ep, error);
}

rayaccel_status RegisterMemory(rayaccel_register_args* args, rayaccel_error* error) {
  if (args == nullptr || args->endpoint == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "register_memory needs an endpoint");
  }
  return args->endpoint->helper->register_memory(args, error);
}

rayaccel_status DeregisterMemory(rayaccel_memory_region* region, rayaccel_error* error) {
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return region->helper->deregister_memory(region, error);
}

rayaccel_status PackDescriptor(rayaccel_memory_region* region, const rayaccel_blob_sink* sink,
                               rayaccel_error* error) {
  if (region == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no region");
  return region->helper->pack_descriptor(region, sink, error);
}

rayaccel_status Connect(rayaccel_transport_endpoint* ep, rayaccel_blob peer,
                        rayaccel_connection** out, rayaccel_error* error) {
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return ep->helper->connect(ep, peer, out, error);
}

rayaccel_status Transfer(rayaccel_transfer_args* args, rayaccel_error* error) {
  if (args == nullptr || args->connection == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "transfer needs a connection");
  }
  return args->connection->helper->transfer(args, error);
}

rayaccel_status Notify(rayaccel_notify_args* args, rayaccel_error* error) {
  if (args == nullptr || args->connection == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "notify needs a connection");
  }
  return args->connection->helper->notify(args, error);
}

rayaccel_status Flush(rayaccel_connection* c, rayaccel_request** out, rayaccel_error* error) {
  if (c == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no connection");
  return c->helper->flush(c, out, error);
}

rayaccel_status Poll(rayaccel_request* r, rayaccel_error* error) {
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return r->helper->poll(r, error);
}

rayaccel_status Abandon(rayaccel_request* r, rayaccel_error* error) {
  if (r == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no request");
  return r->helper->abandon(r, error);
}

rayaccel_status Wait(rayaccel_transport_endpoint* ep, uint32_t timeout_ms, rayaccel_error* error) {
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return ep->helper->wait(ep, timeout_ms, error);
}

rayaccel_status GetNotifications(rayaccel_transport_endpoint* ep, const rayaccel_blob_sink* sink,
                                 rayaccel_error* error) {
  if (ep == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no endpoint");
  return ep->helper->get_notifications(ep, sink, error);
}

rayaccel_status Close(rayaccel_connection* c, rayaccel_error* error) {
  if (c == nullptr) return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "no connection");
  return c->helper->close(c, error);
}

rayaccel_status TransferBatch(rayaccel_transfer_batch_args* args, rayaccel_error* error) {
  if (args == nullptr || args->connection == nullptr) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, "transfer_batch needs a connection");
  }
  return args->connection->helper->transfer_batch(args, error);
}

}  // namespace

bool Choose(const std::string& configured, Fabric* out, std::string* why) {
  std::string name = configured;
  const char* from = "transport_fabric";
  if (name.empty()) {
    const char* env = std::getenv("RAYACCEL_TRANSPORT_FABRIC");
    name = env != nullptr ? env : "";
    from = "RAYACCEL_TRANSPORT_FABRIC";
  }
  if (name.empty() || name == "ucx") {
    *out = Fabric::kUcx;
    return true;
  }
  if (name == "libfabric" || name == "ofi") {
    *out = Fabric::kLibfabric;
    return true;
  }
  *why = std::string(from) + " is \"" + name + "\": ucx or libfabric";
  return false;
}

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const std::string& configured,
                             const ucx::EndpointOptions& ucx_options, rayaccel_error* error) {
  Fabric fabric = Fabric::kUcx;
  std::string why;
  if (!Choose(configured, &fabric, &why)) {
    return Fail(error, RAYACCEL_STATUS_INVALID_ARGUMENT, why);
  }
  if (fabric == Fabric::kUcx) return ucx::OpenEndpoint(args, ucx_options, error);
  ofi::EndpointOptions options;
  options.host = ucx_options.host;
  return ofi::OpenEndpoint(args, options, error);
}

rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*)) {
  rayaccel_transport_api t{};
  t.struct_size = sizeof(t);
  t.open_endpoint = open_endpoint;
  t.close_endpoint = CloseEndpoint;
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

}  // namespace rayaccel::plugin::fabric
