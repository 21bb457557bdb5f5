// The checks of the suite, one function each, by the file that holds them. AllChecks()
// (checks.cc) lists them with their names, tiers and what each proves. Internal to the suite.
#ifndef RAYACCEL_CONFORMANCE_CHECKS_H_
#define RAYACCEL_CONFORMANCE_CHECKS_H_

#include "conformance/suite.h"

namespace rayaccel::conformance {

// checks_abi.cc: the file, the entry point, the table, the resource name.
Outcome ExportsOnlyEntry(const Options& o);
Outcome FilesTrusted(const Options& o);
Outcome Negotiation(const Options& o);
Outcome Table(const Options& o);
Outcome ResourceName(const Options& o);

// checks_lifecycle.cc: initialize and shutdown, once, again, twice at a time.
Outcome Initializes(const Options& o);
Outcome LifecycleRepeated(const Options& o);
Outcome TwoInstances(const Options& o);
Outcome ConfigCopied(const Options& o);
Outcome ShutdownWithoutInitialize(const Options& o);
Outcome FailuresExplained(const Options& o);

// checks_discovery.cc: what discover, labels, topology and health answer.
Outcome AnswersValid(const Options& o);
Outcome NoneExplained(const Options& o);
Outcome IdsStable(const Options& o);
Outcome PciNormalised(const Options& o);
Outcome AcceleratorTypes(const Options& o);
Outcome LabelsValid(const Options& o);
Outcome TopologyValid(const Options& o);
Outcome TelemetryValid(const Options& o);
Outcome HealthValid(const Options& o);
Outcome HealthWaitBounded(const Options& o);

// checks_process.cc: what a plugin does to the process that hosts it.
Outcome QuietStdout(const Options& o);
Outcome CleanText(const Options& o);
Outcome ProcessStateUntouched(const Options& o);
Outcome NoLeak(const Options& o);
Outcome NothingLeftBehind(const Options& o);
Outcome GroupUnsignalled(const Options& o);
Outcome QuietAfterShutdown(const Options& o);

// checks_allocation.cc: allocation requests, and the hooks from several threads.
Outcome QuantityConsistent(const Options& o);
Outcome EnvNamesTheSet(const Options& o);
Outcome ThreadSafe(const Options& o);

// checks_transport.cc: the transport between two processes, on host memory.
Outcome RoundTrip(const Options& o);
Outcome OwnerBounds(const Options& o);
Outcome Authentication(const Options& o);
Outcome StoppedPeer(const Options& o);

// checks_device_memory.cc: the transport on the plugin's device memory.
Outcome DeviceMemory(const Options& o);
Outcome DeviceMemoryBetweenProcesses(const Options& o);

// checks_perf.cc: tier 4's figures, with --perf.
Outcome PerfDiscovery(const Options& o);
Outcome PerfAllocation(const Options& o);
Outcome PerfTransport(const Options& o);

// checks_ray.cc: tier 5, the plugin inside a real Ray (one run of rayaccel._certify for all).
Outcome RayStartAccepted(const Options& o);
Outcome RayOneDevicePerTask(const Options& o);
Outcome RayDistributedWorkload(const Options& o);
Outcome RayRecovery(const Options& o);
Outcome RayPerf(const Options& o);

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_CHECKS_H_
