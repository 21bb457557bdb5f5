/*
 * The transport helpers for a plugin written in C (C99): a whole transport table over UCX or
 * libfabric (authentication with the shared key, owner-checked transfers, notifications,
 * lost peers, deregistration readers confirm), host memory only. Installed as
 * <rayaccel/transport_helpers.h>, with the static libraries of CMake's
 * rayaccel::transport_fabric (find_package(rayaccel COMPONENTS plugin ucx_transport)) or
 * pkg-config's rayaccel-transport. A C++ plugin, or one whose devices' memory moves too,
 * uses ucx_transport.h and transport_fabric.h instead.
 *
 * In a plugin (examples/plugin-transport-c/transport_plugin.c is whole):
 *
 *   static rayaccel_status acme_open_endpoint(rayaccel_endpoint_args *args,
 *                                             rayaccel_error *error) {
 *     rayaccel_transport_helper_options options = {sizeof(options), NULL, NULL};
 *     options.fabric = args->instance->fabric;  // the plugin's `transport_fabric` config
 *     return rayaccel_transport_helper_open_endpoint(args, &options, error);
 *   }
 *   ...
 *   transport = rayaccel_transport_helper_table(acme_open_endpoint);  // once
 *
 * Since 1.3 (the shared key): the plugin negotiates a minor version of at least 3.
 */
#ifndef RAYACCEL_TRANSPORT_HELPERS_H_
#define RAYACCEL_TRANSPORT_HELPERS_H_

#include "rayaccel/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rayaccel_transport_helper_options {
  size_t struct_size; /* sizeof(rayaccel_transport_helper_options) */
  /* "ucx", "libfabric", or NULL or "": RAYACCEL_TRANSPORT_FABRIC's, else UCX. The host's
   * choice reaches a plugin as its config key `transport_fabric` (the conformance suite's
   * `--config transport_fabric=libfabric`, rayaccel::TransportOptions::fabric). */
  const char *fabric;
  /* The libucp to load (a site's UCX built with CUDA support, say); NULL or "": libucp.so.0.
   * The first endpoint of the process loads it; later ones must name the same. */
  const char *ucx_library;
} rayaccel_transport_helper_options;

/* What a plugin's open_endpoint calls: opens an endpoint of the fabric `options` chooses.
 * `options` may be NULL (the defaults); its strings are read during the call only. An unknown
 * fabric is INVALID_ARGUMENT naming it; a host without the fabric's library, UNAVAILABLE. */
rayaccel_status rayaccel_transport_helper_open_endpoint(
    rayaccel_endpoint_args *args, const rayaccel_transport_helper_options *options,
    rayaccel_error *error);

/* The helpers' whole table with `open_endpoint` (the plugin's, calling the function above) in
 * its place; every other hook goes to the helper that opened the endpoint it is given. Keep
 * the result for as long as the library is loaded (a static) and point the plugin's table's
 * `transport` at it, with RAYACCEL_CAP_TRANSPORT. */
rayaccel_transport_api rayaccel_transport_helper_table(
    rayaccel_status (*open_endpoint)(rayaccel_endpoint_args *args, rayaccel_error *error));

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RAYACCEL_TRANSPORT_HELPERS_H_ */
