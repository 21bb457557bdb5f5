// The table of the checks: the runner registers them in this order, and docs/conformance.md's
// table of the checks is this one as --list-checks=markdown prints it.
#include "conformance/checks.h"

namespace rayaccel::conformance {

const std::vector<Check>& AllChecks() {
  // {name, tier, why (one line), skip passes, run, what it proves, the fix it leads with,
  //  gates}
  static const std::vector<Check> kChecks = {
      {"abi.exports_only_entry", 1,
       "only rayaccel_plugin_entry is exported: no C++ or helper symbols can clash in the host",
       false, ExportsOnlyEntry,
       "Only `rayaccel_plugin_entry` may be exported (read from the ELF `.dynsym`): any other "
       "symbol, C++ ones above all, can clash with the raylet's or another plugin's"},
      {"abi.negotiation", 1, "1.0 and newer 1.x hosts get a table; other majors are refused", false,
       Negotiation,
       "A 1.0 host gets 1.0 and a table; a 1.99 host gets the plugin's own 1.x; majors 0 and 2 "
       "are refused. Hosts of other versions must fail cleanly, not misread tables"},
      {"abi.files_trusted", 1,
       "the plugin file, its folder and the folders its RUNPATH names are writable only by their "
       "owner (root or this user): the registry's rule for loading it",
       false, FilesTrusted,
       "The registry's own rule for loading a plugin: the file, its folder, and every folder its "
       "RUNPATH/RPATH names (the loader takes libraries from them first) are owned by root or "
       "this user and writable only by their owner. A `RUNPATH=$ORIGIN/deps` whose `deps/` anyone "
       "can write lets anyone run code in the host; the registry refuses such a plugin, and the "
       "check fails with \"make every folder the plugin and its libraries load from writable only "
       "by its owner (chmod go-w), or link without a RUNPATH into one that is not; ...\" and the "
       "folder",
       "make every folder the plugin and its libraries load from writable only by its owner "
       "(chmod go-w), or link without a RUNPATH into one that is not"},
      {"abi.table", 1,
       "the table is at least 1.0-sized, names itself, has every required hook and every hook its "
       "capabilities claim",
       false, Table,
       "The host's loader accepts the table: at least the 1.0 size, major 1, a valid name, every "
       "required hook, every hook its capability bits promise",
       "", /*gates=*/true},
      {"lifecycle.initializes", 1,
       "the plugin loads and initializes with the given configuration; the checks after this one "
       "need it",
       false, Initializes,
       "The plugin loads and initializes with the given configuration. Every later check needs "
       "it; when it fails, they are not run",
       "", /*gates=*/true},
      {"identity.resource_name", 1,
       "the Ray resource is a name Ray takes and not one of Ray's own (CPU, memory, ...)", false,
       ResourceName,
       "The Ray resource from `get_properties` is a name Ray takes (`[A-Za-z0-9_.:-]`, 1-64) and "
       "not one of Ray's own (`CPU`, `memory`, `node:...`, ...): the registry refuses both, so "
       "such a plugin fails on every node. A resource Ray gives another vendor's devices (`TPU`, "
       "`HPU`, `NPU`, `neuron_cores`, `RBLN`) is a warning"},
      {"lifecycle.repeated", 1, "initialize/shutdown work three times in a row", false,
       LifecycleRepeated,
       "Three initialize/shutdown cycles: agents restart plugins; a double free on shutdown shows "
       "here"},
      {"lifecycle.two_instances", 1, "two instances of one library coexist", false, TwoInstances,
       "Two instances from one library coexist (no hidden globals)"},
      {"lifecycle.config_copied", 1,
       "the configuration is copied in initialize, not kept by pointer", true, ConfigCopied,
       "The configuration is copied in `initialize`, not kept by pointer: one instance whose "
       "configuration values the suite overwrites (same length) once `initialize` returns must "
       "answer as one whose values are kept. Fails with \"copy the configuration in initialize: "
       "...\": a host that frees its copies (the registry) would have the plugin read freed "
       "memory",
       "copy the configuration in initialize"},
      {"lifecycle.shutdown_without_initialize", 1,
       "shutdown(NULL) returns a status instead of crashing", false, ShutdownWithoutInitialize,
       "`shutdown(NULL)` returns a status instead of crashing: hosts tear down after failed "
       "starts"},
      {"lifecycle.failures_explained", 2,
       "a refused request (an unknown device) comes with a code and a message", true,
       FailuresExplained,
       "`prepare_allocation` for a device nobody reported fails with a status and a message, "
       "never silently"},
      {"discovery.answers_valid", 1,
       "every device passes the host's checks (ids, UTF-8, limits, health values)", false,
       AnswersValid,
       "Every device passes the host's validation (id, name, UTF-8, bounds, health values; "
       "docs/abi.md lists them); a refused device would be missing in Ray"},
      {"discovery.none_explained", 1,
       "a plugin that finds no device says why (explain_no_devices, or a \"0 devices:\" log line)",
       true, NoneExplained,
       "A plugin that finds no device says why, through the sink's `explain_no_devices` (1.6) or "
       "a log line starting `0 devices:`: it is what `rayaccel discover`, `plugins`, the web page "
       "and this suite show an operator whose node has no accelerators in Ray. Skipped where "
       "the plugin finds devices"},
      {"discovery.ids_stable", 1, "ids and indices do not change between discoveries", false,
       IdsStable,
       "Ids and indices do not change between discoveries: Ray's bookkeeping and the raylet's "
       "allocations rely on them"},
      {"discovery.pci_bus_ids_normalised", 1, "PCI bus ids come as dddd:bb:dd.f", false,
       PciNormalised,
       "PCI bus ids parse as the registry parses them (`dddd:bb:dd.f`; NVML's 8-digit domain and "
       "`bb:dd.f` pass, with a note of what the host reads) so they match hwloc and other plugins"},
      {"discovery.accelerator_types", 1,
       "reported types are label-safe and equal Ray's own rule where Ray has one", false,
       AcceleratorTypes,
       "A reported type is label-safe and equals Ray's own rule where Ray has one (NVIDIA names; "
       "AMD, TPU, Gaudi PCI ids): the same node must not get two names"},
      {"labels.valid", 1, "node labels use Kubernetes syntax and only Ray's own ray.io/ keys", true,
       LabelsValid, "Labels use Kubernetes syntax and only the `ray.io/` keys Ray defines"},
      {"process.quiet_stdout", 1, "no hook writes to stdout", false, QuietStdout,
       "No hook writes to stdout, which carries the CLI's JSON and the agent's protocol"},
      {"process.clean_text", 1,
       "log lines and error messages carry no control characters and are valid UTF-8", false,
       CleanText,
       "Log lines and error messages carry no control characters (ESC, CR, LF, C1) and are valid "
       "UTF-8: the host escapes them, but a plugin that sends them is trying to colour, clear or "
       "forge what an operator reads"},
      {"process.state_untouched", 1,
       "the working directory, umask, signal dispositions and fds 0-2 are left as they were", false,
       ProcessStateUntouched,
       "A whole initialize/discover/shutdown cycle leaves the working directory, the umask, every "
       "signal's disposition and fds 0-2 as they were: they belong to the process that hosts the "
       "plugin (the raylet, in-process)"},
      {"process.no_leak", 1, "repeated lifecycles do not grow the heap", false, NoLeak,
       "40 initialize/discover/shutdown cycles may not grow the heap by more than 4 MiB (glibc "
       "`mallinfo2`); each cycle gets the `--timeout` of its own, so a slow but working plugin is "
       "not called hung"},
      {"process.nothing_left_behind", 1,
       "every process the plugin starts has ended when shutdown returns (daemons included)", false,
       NothingLeftBehind,
       "One lifecycle (initialize, discover, labels, topology, health, shutdown) in a process "
       "that is a child subreaper, so that even a daemon that forks twice under `setsid` and "
       "closes every descriptor stays its descendant: any process still running 300 ms after "
       "`shutdown` returned fails the check, named with its pid and command (\"stop and wait for "
       "every process the plugin starts before shutdown returns: 1 outlived it (...)\"), and is "
       "killed",
       "stop and wait for every process the plugin starts before shutdown returns"},
      {"process.group_unsignalled", 1,
       "no signal goes to the plugin's process group (the host's, in the raylet)", false,
       GroupUnsignalled,
       "A witness process shares the plugin's process group through one lifecycle: any signal it "
       "receives (`kill(0, SIGTERM)` after ignoring SIGTERM itself, `killpg`) fails the check "
       "(\"signal only processes the plugin started, by their pid: it sent signal 15 (Terminated) "
       "to its whole process group ...\"): in the raylet that group is the host's and its "
       "workers'",
       "signal only processes the plugin started, by their pid"},
      {"lifecycle.quiet_after_shutdown", 1,
       "nothing calls the host API once shutdown returned (its threads are stopped)", false,
       QuietAfterShutdown,
       "The same lifecycle with a host API of the suite's own that stays valid after `shutdown`: "
       "a call to it in the 300 ms after `shutdown` returned (a thread of the plugin's that logs "
       "on) fails the check (\"stop every thread that calls the host before shutdown returns: the "
       "host API was called N time(s) ...\"); a host that freed its API would crash or run freed "
       "code",
       "stop every thread that calls the host before shutdown returns"},
      {"topology.valid", 2,
       "links join reported devices, no self links, each pair once; domains name real devices",
       false, TopologyValid,
       "`get_topology` exists; links join reported devices, no self links, each pair once per "
       "type; domains name reported devices. Allocation is only as good as this"},
      {"health.valid", 2, "health states and reasons are valid and name reported devices", false,
       HealthValid, "Health states and reasons are valid and name reported devices"},
      {"telemetry.valid", 2,
       "get_telemetry samples reported devices in range, counters never go down, every field is "
       "sampled or explained",
       true, TelemetryValid,
       "`get_telemetry` (with `RAYACCEL_CAP_TELEMETRY`, ABI 1.6), asked three times a second "
       "apart: every sample names a device of `discover` once and passes the host's ranges "
       "(utilization 0-100, memory used within its total, a plausible temperature and power), "
       "error counters never go down, and each field is sampled on some device or explained "
       "with `explain_unknown`; the slowest call is in the verdict (a hung one fails as any "
       "hook's). Skipped without the hook"},
      {"health.wait_bounded", 2,
       "wait_health_events returns within its timeout, reports only known devices, and does not "
       "claim changes it cannot show",
       true, HealthWaitBounded,
       "`wait_health_events` (with `RAYACCEL_CAP_HEALTH_EVENTS`) returns within its 200 ms "
       "timeout plus a second, with OK or TIMEOUT, and reports only devices of the last discover: "
       "an in-process host's watch would otherwise hang its shutdown. A wait that answers OK "
       "without a report (\"rescan\") at once, five times in a row, while discover shows the same "
       "devices in the same health, fails too: the host's watch would rescan in a loop"},
      {"allocation.quantity_consistent", 2,
       "validate_quantity answers the same twice and explains refusals", true, QuantityConsistent,
       "`validate_quantity` gives the same answer twice for 1..16, answers OK or "
       "INVALID_ARGUMENT, and explains each refusal"},
      {"allocation.env_names_the_set", 2, "the environment for a device set names exactly that set",
       false, EnvNamesTheSet,
       "For each device alone and for all together, the visible-devices variable names exactly "
       "that set (by index or by id, after a backend such as oneAPI's `level_zero:`): a wrong "
       "list hands a worker someone else's GPU. For all devices together the variable may also be "
       "left unset, meaning all (Ray's TPU path does that for a whole host). Every variable set "
       "belongs to the visible-devices family (`CUDA_*` for `CUDA_VISIBLE_DEVICES`): `LD_PRELOAD` "
       "or `PATH` would change how a worker runs, and the registry refuses such an allocation"},
      {"concurrency.thread_safe", 2,
       "hooks declared thread-safe agree when called from four threads", true, ThreadSafe,
       "A plugin claiming `RAYACCEL_CAP_THREAD_SAFE` gives the same answers from four threads "
       "(the project runs its own plugins' suite under TSan as well)"},
      {"transport.round_trip", 3,
       "two processes: register, pack, connect, read, write, notify, flush; a truncated and a "
       "deregistered descriptor are refused; a killed peer is reported lost; close",
       false, RoundTrip,
       "The check forks a peer; each opens an endpoint through the host's `rayaccel::Transport` "
       "(so every descriptor passes the host's checks). The peer registers a 1 MiB source and "
       "target and sends its address and descriptors; the check connects, READs and compares "
       "every byte, WRITEs a pattern and `notify`s, and the peer confirms the bytes were there "
       "when the notification arrived; `flush`; a truncated descriptor must fail "
       "INVALID_ARGUMENT; the peer deregisters the source and a READ with its descriptor must "
       "fail STALE; the peer is killed and a transfer must fail PEER_LOST within the peer timeout "
       "(a quarter of `--timeout`, at least 1 s); `close`. A skip (no `RAYACCEL_CAP_TRANSPORT`) "
       "does not pass tier 3."},
      {"transport.device_memory", 3,
       "where the plugin offers device memory: host to device, device to device and device to "
       "host move the bytes; the owner's bounds and invalidation hold for device regions",
       true, DeviceMemory,
       "On the plugin's first device, two endpoints: device memory allocated on each "
       "(`RAYACCEL_REGISTER_ALLOCATE`), a pattern written from host memory into one, read from it "
       "into the other, and read back into host memory and compared; a READ past a device "
       "region's end must fail INVALID_ARGUMENT, and after deregistration STALE. Skipped, with "
       "the plugin's reason, where the plugin offers no device memory (UNSUPPORTED). The suite "
       "never touches device memory itself."},
      {"transport.device_two_process", 3,
       "where the plugin offers device memory: another process's device memory is written from "
       "host and device memory and read back into both, by whatever path the plugin takes; the "
       "owner's bounds hold, and its deregistration ends within the peer timeout, then STALE",
       true, DeviceMemoryBetweenProcesses,
       "A forked peer allocates 1 MiB of device memory on the plugin's first device (before the "
       "check's process touches the device: a driver may not survive a fork after its "
       "initialization); the check WRITEs a pattern into it from host memory, READs it back and "
       "compares, READs it into device memory of its own, WRITEs zeros and checks them, WRITEs "
       "its device copy back and compares again: whatever path the plugin takes between two "
       "processes of one host (its fabric, its driver's IPC, staging), the bytes arrive both "
       "ways. The path of each transfer is in the verdict (`device to device device-ipc`). A READ "
       "past the region must fail INVALID_ARGUMENT; the peer then deregisters the region, which "
       "this process has read from (and may map): that must end within twice the peer timeout "
       "plus 5 s, and a READ after it must fail STALE. Skipped with the plugin's reason where it "
       "offers no device memory."},
      {"transport.owner_bounds", 3,
       "forged descriptors (a doubled length, damaged plugin bytes, checksums recomputed) reach "
       "nothing outside the region the owner registered, and do not bring the owner down",
       false, OwnerBounds,
       "The peer's regions sit between `PROT_NONE` guard pages, with a canary page it never "
       "registers. Through a descriptor whose envelope claims twice the region (checksum "
       "recomputed, so the host's own range check passes), READs and WRITEs of 4 KiB at the "
       "region's end and past it must fail: the owner, not the reader's copy of the descriptor, "
       "decides. Wherever the plugin's own bytes hold the region's length (a 64- or 32-bit "
       "little-endian field), it is doubled too, so that a check in the reader passes, and a READ "
       "past the end must still fail. Then 200 READs around the region's end through descriptors "
       "with 1 to 3 bits of the plugin's bytes flipped (checksum recomputed) must each end within "
       "10 s; the peer must still be alive (a stray access would have hit a guard page) and its "
       "canary unchanged; the genuine descriptor still works."},
      {"transport.authentication", 3,
       "a peer holding another key is refused with UNAUTHENTICATED; the shared key is admitted",
       false, Authentication,
       "An endpoint opened with another key (32 bytes of its own) connects to the peer: refused "
       "with UNAUTHENTICATED. The check's own endpoint, with the shared key, connects and reads."},
      {"transport.stopped_peer", 3,
       "a peer that stops without dying (SIGSTOP) is reported PEER_LOST within the peer timeout",
       false, StoppedPeer,
       "The peer is stopped (SIGSTOP) after a READ; the next READ must fail PEER_LOST within the "
       "peer timeout plus 2 s."},
      {"perf.discovery", 4,
       "load, initialize and first scan; a rescan (median): measured, and within the baseline's "
       "tolerance where one is given",
       false, PerfDiscovery,
       "With `--perf`: cold start and rescan figures (above); without it, skipped, and tier 4 is "
       "not reached"},
      {"perf.allocation", 4, "prepare_allocation of one device (median)", true, PerfAllocation,
       "With `--perf`: `prepare_allocation`'s figure; skipped without devices or the hook"},
      {"perf.transport", 4,
       "between two processes: an 8-byte read's latency, 64 KiB and 1 MiB read and 1 MiB write "
       "bandwidth, a batch of 64 reads of 4 KiB",
       true, PerfTransport,
       "With `--perf`: against the round-trip peer, the transport's latency and bandwidth "
       "figures, batches included; skipped without a transport"},
      {"ray.start_accepted", 5,
       "Ray accepts what `rayaccel ray-start-args` prints: its nodes show exactly those "
       "resources and labels",
       false, RayStartAccepted,
       "With `--tier 5`: the suite starts a Ray of its own (a head without accelerators and two "
       "raylets, each started with what `rayaccel ray-start-args` and `--env` print for the "
       "plugin and rayaccel's managers in Ray's processes) in a folder of its own, and stops it "
       "after. `ray.nodes()` must show each raylet with exactly the printed resources and "
       "labels (`ray.io/accelerator-type` included). The checks after this one need it",
       "", /*gates=*/true},
      {"ray.one_device_per_task", 5,
       "as many tasks as the node has devices, at once, each given one device that the worker's "
       "visible-devices variable names",
       false, RayOneDevicePerTask,
       "As many tasks as the node has devices, each asking one of the plugin's resource, run at "
       "once (they wait for each other): each is given one device; the worker's visible-devices "
       "variable (set by Ray's manager of the family, or rayaccel's) names exactly the device Ray "
       "assigned and is what the plugin's `prepare_allocation` gives for it; where the plugin's "
       "devices have a runtime that honours the variable (`cuda_library`, `hip_library` in its "
       "configuration), the device the worker opens through it is that device (by PCI address); "
       "together the tasks saw each of the node's devices once, an unhealthy one never. Where "
       "the family takes fractions (Ray's rule, then `validate_quantity`), two half-device tasks "
       "run at once, each given one device",
       "make prepare_allocation name the devices it is given"},
      {"ray.distributed_workload", 5,
       "a ring of actors on two raylets passes arrays over RDT with the plugin's transport, "
       "every hop's bytes verified",
       true, RayDistributedWorkload,
       "A ring of actors (one per device, 2 to 8) on the two raylets passes arrays around, "
       "three rounds (4 KiB, 1 MiB, 8 MiB a hop), over Ray Direct Transport with "
       "`tensor_transport=\"RAYACCEL_NUMPY\"` (the plugin's transport, host memory); each hop's "
       "bytes are compared with what was sent, and a hop not done within six times the check "
       "timeout fails. Skipped without a transport"},
      {"ray.recovery", 5,
       "a source killed mid-read fails its reader with an error; the source Ray restarts serves "
       "the next read",
       true, RayRecovery,
       "A ring actor holding a 64 MiB array is killed (SIGKILL) before its reader takes it: the "
       "read must fail (within six times the check timeout), not hang or return other bytes. "
       "Ray restarts the actor (`max_restarts=1`); the restarted process must serve the next "
       "read over the same transport. Skipped without a transport"},
      {"ray.perf", 5,
       "a hop's throughput at 1 MiB and 64 MiB and its p50 inside Ray: measured, and within the "
       "baseline's tolerance",
       false, RayPerf,
       "With `--perf`: a hop between two actors on two raylets, 1 MiB (20 times) and 64 MiB (5 "
       "times), median time and throughput as figures, compared with `--baseline` as tier 4's "
       "are"},
  };
  return kChecks;
}

}  // namespace rayaccel::conformance
