// The C interface to the transport helpers (transport_helpers.h): transport_fabric.h's table
// and endpoint, with options a C plugin can fill.
#include "transport_helpers.h"

#include <string>

#include "transport_fabric.h"

extern "C" rayaccel_status rayaccel_transport_helper_open_endpoint(
    rayaccel_endpoint_args* args, const rayaccel_transport_helper_options* options,
    rayaccel_error* error) {
  using rayaccel::plugin::ucx::DeviceMemory;
  rayaccel::plugin::ucx::EndpointOptions ucx_options{DeviceMemory::kNone, nullptr, nullptr, {}};
  std::string fabric;
  // Fields the caller's struct holds (an older caller's is shorter).
  if (options != nullptr &&
      RAYACCEL_HAS_FIELD(options, rayaccel_transport_helper_options, fabric) &&
      options->fabric != nullptr) {
    fabric = options->fabric;
  }
  if (options != nullptr &&
      RAYACCEL_HAS_FIELD(options, rayaccel_transport_helper_options, ucx_library) &&
      options->ucx_library != nullptr) {
    ucx_options.ucx_library = options->ucx_library;
  }
  return rayaccel::plugin::fabric::OpenEndpoint(args, fabric, ucx_options, error);
}

extern "C" rayaccel_transport_api rayaccel_transport_helper_table(
    rayaccel_status (*open_endpoint)(rayaccel_endpoint_args*, rayaccel_error*)) {
  return rayaccel::plugin::fabric::Table(open_endpoint);
}
