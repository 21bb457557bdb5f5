// `rayaccel sink`: the raylet's end of publishing, standalone, printing each applied update
// and, with --http, serving the cluster's web view. Stands in for a raylet in tests, demos and
// the README walkthrough.
#ifndef RAYACCEL_CLI_SINK_COMMAND_H_
#define RAYACCEL_CLI_SINK_COMMAND_H_

#include <string>

#include "rpc/server.h"

namespace rayaccel::cli {

// Serves until SIGINT or SIGTERM; returns the process exit code.
// `own_node_id`: the node this sink stands in for (RayletSink); empty: a sink of many nodes.
// `http`: tcp://HOST:PORT for the cluster's web view and metrics; empty: none.
int RunSink(const rpc::ServerOptions& server, bool json, const std::string& own_node_id,
            const std::string& http);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_SINK_COMMAND_H_
