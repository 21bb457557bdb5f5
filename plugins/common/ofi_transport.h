// A complete transport table over libfabric, for any plugin, beside the UCX helper
// (ucx_transport.h): one-sided READ and WRITE (fi_read, fi_write) between registered host
// memory, notifications, lost peers, and deregistration that readers confirm. A plugin offers
// it through transport_fabric.h, which chooses UCX or libfabric per endpoint.
//
// libfabric.so.1 (or the library EndpointOptions::library names) is loaded with dlopen when
// the first endpoint opens, so a plugin still loads, and discovers, on a host without it
// (open_endpoint then fails with UNAVAILABLE). The provider is libfabric's own choice, as its
// users expect: FI_PROVIDER (tcp, shm, efa, ...) narrows it. The wire, and what the provider
// enforces, are in docs/transport.md ("The libfabric helper").
#ifndef RAYACCEL_PLUGINS_COMMON_OFI_TRANSPORT_H_
#define RAYACCEL_PLUGINS_COMMON_OFI_TRANSPORT_H_

#include <string>

#include "rayaccel/plugin.h"

namespace rayaccel::plugin::ofi {

struct EndpointOptions {
  const rayaccel_host_api* host = nullptr;  // for log lines; may be null
  // The libfabric to load; empty: libfabric.so.1. The first endpoint of the process loads
  // it; later ones must name the same.
  std::string library;
};

rayaccel_status OpenEndpoint(rayaccel_endpoint_args* args, const EndpointOptions& options,
                             rayaccel_error* error);

// Every hook but open_endpoint.
rayaccel_transport_api Table(rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*,
                                                              rayaccel_error*));

}  // namespace rayaccel::plugin::ofi

#endif  // RAYACCEL_PLUGINS_COMMON_OFI_TRANSPORT_H_
