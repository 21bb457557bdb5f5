// How a NodeSnapshot is shown, by the CLI and by the web view alike: human tables, the link
// grid, DOT and SVG pictures, and the stable JSON of docs/cli.md.
#ifndef RAYACCEL_PRESENT_RENDER_H_
#define RAYACCEL_PRESENT_RENDER_H_

#include <map>
#include <string>

#include "rayaccel/snapshot.h"

namespace rayaccel::present {

std::string DiscoverJson(const NodeSnapshot& snapshot);
std::string DiscoverText(const NodeSnapshot& snapshot);

std::string PluginsJson(const NodeSnapshot& snapshot);
std::string PluginsText(const NodeSnapshot& snapshot);

// `resources --json` prints the object alone, compact: usable as RAY_OVERRIDE_RESOURCES.
std::string ResourcesJson(const RayView& ray);
std::string ResourcesText(const RayView& ray);

// 'text' quoted for a POSIX shell.
std::string ShellQuote(const std::string& text);

// The arguments `ray start` takes today: --num-gpus for GPU (ray start refuses GPU inside
// --resources), --resources for the rest, --labels as k=v pairs; shell-quoted, one line.
std::string RayStartArgs(const RayView& ray);

// `rayaccel topo`: a matrix like `nvidia-smi topo -m` over every device of every family, with
// CPU affinity, NUMA affinity and nearest NIC columns and a legend; JSON; Graphviz.
std::string TopoText(const NodeSnapshot& snapshot);
std::string TopoJson(const NodeSnapshot& snapshot);
std::string TopoDot(const NodeSnapshot& snapshot);
// A picture: devices on a circle grouped by NUMA node (with CPUs and nearest NICs), each pair's
// best link as a chord coloured by kind, unhealthy devices in red, a legend of link kinds with
// counts and bandwidth, and the domains. SVG, self-contained.
std::string TopoSvg(const NodeSnapshot& snapshot);

// `rayaccel telemetry`: each device's sample (unknown fields "-"), then what a plugin's driver
// cannot say and why, and each plugin's failure; JSON: the same, unknown fields left out.
std::string TelemetryText(const NodeSnapshot& snapshot, const Telemetry& telemetry);
std::string TelemetryJson(const NodeSnapshot& snapshot, const Telemetry& telemetry);

// `rayaccel allocate`.
// `env`: what prepare_allocation gives a worker for these devices (empty with no devices).
std::string AllocationText(const NodeSnapshot& snapshot, const Allocation& allocation,
                           const std::map<std::string, std::string>& env);
std::string AllocationJson(const NodeSnapshot& snapshot, const Allocation& allocation,
                           const std::map<std::string, std::string>& env);

// One applied sink update: a header line, the resources table and the labels; or one line
// of JSON (JSON Lines, for a stream).
std::string SinkUpdateText(const std::string& node_id, uint64_t generation, const RayView& ray);
std::string SinkUpdateJson(const std::string& node_id, uint64_t generation, const RayView& ray);

}  // namespace rayaccel::present

#endif  // RAYACCEL_PRESENT_RENDER_H_
