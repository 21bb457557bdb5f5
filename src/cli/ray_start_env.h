// `rayaccel ray-start-args --env`: the variables to start today's Ray with, so that its own
// accelerator managers learn exactly the devices rayaccel counts.
#ifndef RAYACCEL_CLI_RAY_START_ENV_H_
#define RAYACCEL_CLI_RAY_START_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rayaccel/registry.h"

namespace rayaccel::cli {

// What a family's devices set in a worker: the plugin's prepare_allocation, asked here or of
// the agent.
using PrepareAllocationFn = std::function<absl::StatusOr<std::map<std::string, std::string>>(
    const std::vector<std::string>& device_ids, uint64_t generation)>;

// `ray-start-args --env`: the variables to start Ray with so that it learns exactly the devices
// rayaccel counts (Ray reads the visible-devices variable at `ray start` as the node's device
// ids): per family, what prepare_allocation sets for the counted devices; the variable empty
// when the family counts none; nothing for a family given whole (the plugin sets nothing).
// Shell-quoted NAME='value' pairs on one line, or "" when there are none.
absl::StatusOr<std::string> RayStartEnvironment(const NodeSnapshot& snapshot,
                                                const PrepareAllocationFn& prepare);

}  // namespace rayaccel::cli

#endif  // RAYACCEL_CLI_RAY_START_ENV_H_
