// The `rayaccel` command: what this node's accelerators are, and what Ray would be given.
// Exit codes: 0 when discovery ran (even with no devices or refused plugins), 1 when
// rayaccel itself failed, 2 for usage errors.
//
// Built twice from this file: `rayaccel` (RAYACCEL_CLI_RPC off) runs the local commands and
// maps no RPC stack (gRPC, Protobuf and OpenSSL are most of a short command's start-up);
// for serve, sink and --agent it execs `rayaccel-agent`, the same program with RPC, from its
// own folder.
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/capture_anonymize.h"
#include "cli/capture_bundle.h"
#include "cli/installed_ray.h"
#include "cli/log_format.h"
#include "cli/ray_start_env.h"
#include "cli/transfer_command.h"
#include "present/render.h"
#include "ray/ray_mapping.h"
#include "ray/unit_instances.h"
#include "util/command_line.h"
#include "util/log.h"
#if RAYACCEL_CLI_RPC
#include "cli/agent_client.h"
#include "cli/serve_command.h"
#include "cli/sink_command.h"
#endif
#include "rayaccel/plugin.h"
#include "rayaccel/registry.h"
#include "registry/config.h"
#include "rpc/server_options.h"
#include "spdlog/spdlog.h"

namespace rayaccel::cli {

constexpr char kDefaultConfigFile[] = "/etc/rayaccel/rayaccel.conf";
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoAllocation = 3;      // allocate: the request cannot be met now
constexpr int kExitRequirementUnmet = 4;  // --require: the node gives Ray less than required

constexpr char kUsage[] = R"(usage: rayaccel <command> [options]

Commands:
  discover         plugins, devices, links, domains, and what Ray would be given
  plugins          which plugins were found, loaded or refused, and why
  resources        the Ray resources of this node
  ray-start-args   the arguments for `ray start` (--num-gpus, --resources, --labels);
                   --env: the variables to start it with instead, so that Ray's own
                   managers learn only the devices counted here (CUDA_VISIBLE_DEVICES=...)
  topo             how devices connect: a matrix like `nvidia-smi topo -m` (--json, --dot, --svg)
  telemetry        what each device is doing now (utilization, memory, power, temperature,
                   error counters), from plugins with get_telemetry (ABI 1.6); --json
  allocate         the best devices for a request, and the environment a worker given them
                   gets: --size N [--available IDS] [--must-include IDS] [--resource NAME]
                   (IDS: device ids, a,b,c; --available-positions and
                   --must-include-positions take snapshot positions instead) [--objective partition|request] (default
                   partition: the best set of the best split of what is available; request:
                   the best set for this one); exit 3 when no set meets the request
  conformance      check a plugin .so and report its tier: conformance PLUGIN.so
                   [--config KEY=VALUE] [--tier N] [--junit FILE] [--json]
                   [--timeout SECONDS] [--expect-no-devices]
                   (runs rayaccel-conformance, installed next to this command)
  sink             stand in for the raylet: accept agents' snapshots and print each applied
                   update: sink --listen ADDRESS [--node-id ID] [--json]
  serve            the node agent: serve AcceleratorRegistry on --listen (default
                   unix:/run/rayaccel/agent.sock as root, else in this user's runtime
                   folder) and, with --raylet ADDRESS [--node-id ID], publish each snapshot
                   to a raylet sink (SIGHUP rescans; health changes publish at once;
                   SIGTERM drains)
  transfer         move bytes between two processes or nodes through a plugin's transport
                   and verify them: transfer --serve | --connect TOKEN [--size 64MiB]
                   [--op read|write] [--iters N] (rayaccel transfer --help)
  capture          record this node for replay elsewhere: every plugin's answers, hwloc's
                   view, versions and the snapshot, in one file: capture [--out FILE]
                   [--include-hostname] [--anonymize] (docs/capture.md)
  diff             what differs between two capture bundles, or a bundle and this host:
                   diff A.json [B.json]; exit 1 when the snapshots differ
  version          print the version

Options:
  --json                      machine-readable output (discover, plugins, resources, topo,
                              allocate)
  --plugin NAME|PATH          load only this plugin (repeatable)
  --plugin-path DIR[:DIR...]  search these folders instead of RAYACCEL_PLUGIN_PATH and
                              the folder next to the binary
  --config PLUGIN.KEY=VALUE   configure a plugin, e.g. sim.spec=examples/dgx-h100.json
                              (repeatable; beats RAYACCEL_<PLUGIN>_<KEY>, which beats
                              --config-file); KEY=VALUE configures the one --plugin
  --config-file FILE          lines of PLUGIN.KEY=VALUE (default: $RAYACCEL_CONFIG_FILE, else
                              /etc/rayaccel/rayaccel.conf when it exists)
  --hwloc-xml FILE            use an exported hwloc topology instead of this machine's
                              (HWLOC_XMLFILE does the same)
  --replay BUNDLE             answer as the captured node did (rayaccel capture), without its
                              plugins or hardware (discover, plugins, resources,
                              ray-start-args, topo, allocate, serve)
  --no-host-topology          do not consult hwloc
  --isolation process|none    run each plugin in a child process of its own, so that a
                              crash or hang in vendor code fails that plugin only
                              (default: process for serve, none for the other commands)
  --dot                       Graphviz output (topo)
  --svg                       a picture of the topology, SVG (topo)
  --listen ADDRESS            where to serve (serve, sink): unix:PATH (mode 0660) or
                              tcp://HOST:PORT (port 0: any free one)
  --http ADDRESS              also serve the web view on tcp://HOST:PORT: the node's page
                              (serve) or the cluster's (sink), their data under /api, and
                              /metrics (Prometheus); the TLS files, --token-file and
                              --allow-insecure-tcp apply as to --listen
  --conformance-reports DIR   serve --http: the node's page shows each plugin's newest
                              conformance report in DIR (rayaccel-conformance --report)
  --socket-mode MODE          the Unix socket's mode, octal (default 0660; 0666: any user)
  --socket-group GROUP        give the Unix socket to this group (the Ray user's), so that
                              an agent run as root serves a Ray run as another user
  --tls-cert FILE, --tls-key FILE
                              serve TLS with this PEM certificate chain and key
  --tls-client-ca FILE        and require client certificates signed by this CA
  --token-file FILE           require "authorization: Bearer <token>" on every call
  --allow-insecure-tcp        allow plain TCP on a non-loopback address (refused otherwise)
  --agent ADDRESS             ask a running agent (rayaccel serve) for its snapshot instead
                              of discovering here (discover, plugins, resources,
                              ray-start-args, topo); --token-file is then sent to it
  --tls-ca FILE               with --agent: connect with TLS, trusting this CA
  --raylet ADDRESS            the sink to publish to (serve)
  --node-id ID                Ray's node id, 56 hex digits: the node to publish as and to
                              drain (serve; without it the sink names it, or Ray's GCS says
                              which node is on this host), or the node a sink is (sink: an
                              agent that does not name its node is this one)
  --on-device-loss report|drain
                              serve: when a device the node had at start is lost, only report
                              it (default), or also ask Ray's GCS to drain the node
  --gcs-address HOST:PORT     Ray's GCS, to drain through (serve --on-device-loss drain);
                              with TLS where Ray's RAY_USE_TLS says so, with its files
  --gcs-token-file FILE       the token of a Ray with token authentication (default: Ray's
                              own: $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)
  --raylet-token-file FILE    the bearer token to present to the sink (serve)
  --raylet-tls-ca FILE        connect to the sink with TLS, trusting this CA (serve)
  --rescan-interval SECONDS   rescan period (serve; default 60, 0: never)
  --telemetry-interval SECONDS
                              how often serve samples each device's telemetry for /metrics,
                              the page (--http) and the sink (--raylet) (default 5, 0: never)
  --require RESOURCE=N        fail (exit 4, after printing) unless the node gives Ray at
                              least N of RESOURCE (discover, plugins, resources,
                              ray-start-args, topo); repeatable: a readiness check
  --log-level LEVEL           trace, debug, info, warn (default), error, off
  --log-format text|json      log lines as text (default) or one JSON object each
  -h, --help                  this text
)";

struct Args {
  std::string command;
  rpc::ServerOptions server;  // serve and sink: --listen and its security
  std::string raylet;         // serve --raylet
  std::string node_id;
  std::string raylet_token_file, raylet_tls_ca_file;
  std::string on_device_loss, gcs_address, gcs_token_file;  // serve
  std::string agent, tls_ca_file;                           // --agent, --tls-ca
  long long rescan_interval_s = 60;
  long long telemetry_interval_s = 5;
  bool telemetry_interval_given = false;
  bool json = false;
  bool dot = false;
  bool svg = false;
  std::string http;                 // serve --http, sink --http
  std::string conformance_reports;  // serve --conformance-reports
  long long size = -1;              // allocate --size
  std::vector<std::string> available;
  std::vector<std::pair<std::string, double>> required;  // --require RESOURCE=N
  std::vector<size_t> available_positions;               // allocate --available-positions
  std::vector<size_t> must_include_positions;            // allocate --must-include-positions
  std::vector<std::string> must_include;
  std::string resource;
  RegistryOptions options;
  std::string log_level = "warn";
  std::string log_format = "text";
  bool isolation_given = false;      // --isolation; serve isolates by default, the rest do not
  std::string replay;                // --replay BUNDLE
  std::vector<std::string> bundles;  // diff A [B]
  std::string out;                   // capture --out FILE
  bool include_hostname = false;     // capture --include-hostname
  bool anonymize = false;            // capture --anonymize
  bool env = false;                  // ray-start-args --env
};

// Ray's unit-instance list, looked up (a Python asked) only when the environment sets it or
// the node has a family outside Ray 2.60's list, the families every Ray since 2.7 counts by
// device anyway.
RayUnitInstances RaysUnitInstancesFor(const NodeSnapshot& snapshot) {
  bool all_known = std::getenv(kRayUnitInstanceVariable) == nullptr;
  for (const CountedFamily& family : CountedFamilies(snapshot)) {
    if (!family.device_ids.empty() &&
        UnitInstanceSetting({family.resource}, kTestedRayCustomUnitInstances)) {
      all_known = false;
    }
  }
  if (all_known) {
    return {kTestedRayCustomUnitInstances, "not looked up: the node's families are Ray's own"};
  }
  return FindRayUnitInstances();
}

// RAYACCEL_RAY_MANAGERS set to something other than off, as _rayaccel_hook reads it.
bool RayaccelManagersOn() {
  const char* v = std::getenv("RAYACCEL_RAY_MANAGERS");
  if (v == nullptr) return false;
  std::string value = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
  return !(value.empty() || value == "0" || value == "false" || value == "no" || value == "off");
}

#if !RAYACCEL_CLI_RPC
// serve, sink and --agent: `rayaccel-agent` from this program's folder, with the same
// arguments. Returns only when it cannot be run.
int ExecAgent(char** argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string agent = "rayaccel-agent";
  if (n > 0) {
    std::string path(self, static_cast<size_t>(n));
    agent = path.substr(0, path.rfind('/') + 1) + agent;
  }
  std::vector<char*> args;
  args.push_back(agent.data());
  for (char** a = argv + 1; *a != nullptr; ++a) args.push_back(*a);
  args.push_back(nullptr);
  execv(agent.c_str(), args.data());
  std::fprintf(stderr, "rayaccel: cannot run %s: %s\n", agent.c_str(), std::strerror(errno));
  return kExitFailure;
}
#endif

int Usage(const std::string& problem) {
  std::fprintf(stderr, "rayaccel: %s\n\n%s", problem.c_str(), kUsage);
  return kExitUsage;
}

// `rayaccel diff`: what differs between a bundle's snapshot and another's (or this host's), then
// between their manifests. Exit 0 when the snapshots agree (generation aside), 1 when not.
int Diff(const Bundle& a, const Bundle& b, const std::string& b_name) {
  std::vector<std::string> snapshot = DiffJson(a.snapshot_json, b.snapshot_json, {"generation"});
  std::vector<std::string> manifest = DiffJson(a.manifest_json, b.manifest_json, {});
  std::string out = snapshot.empty() ? "snapshot: the same\n" : "snapshot:\n";
  for (const std::string& line : snapshot) absl::StrAppend(&out, "  ", line, "\n");
  if (!manifest.empty()) {
    absl::StrAppend(&out, "versions and environment (- first, + ", b_name, "):\n");
    for (const std::string& line : manifest) absl::StrAppend(&out, "  ", line, "\n");
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return snapshot.empty() ? kExitOk : kExitFailure;
}

// Parses argv; returns -1 to go on, or an exit code.
int Parse(int argc, char** argv, Args* args) {
  if (CommandLine::AsksForHelp(argc, argv, 1)) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  CommandLine line;
  std::string isolation, objective, size, rescan, socket_mode, log_format, log_level, telemetry;
  std::vector<std::string> required, available, must_include, available_positions,
      must_include_positions, plugins, plugin_paths, configs, positionals;
  bool no_host_topology = false;
  line.Flag("--json", &args->json);
  line.Flag("--dot", &args->dot);
  line.Flag("--svg", &args->svg);
  line.Flag("--no-host-topology", &no_host_topology);
  line.Flag("--allow-insecure-tcp", &args->server.allow_insecure_tcp);
  line.Flag("--include-hostname", &args->include_hostname);
  line.Flag("--anonymize", &args->anonymize);
  line.Flag("--env", &args->env);
  line.Values("--require", &required, "--require needs RESOURCE=N, N above 0 (--require GPU=8)");
  line.Value("--isolation", &isolation, "--isolation is process or none");
  line.Value("--hwloc-xml", &args->options.hwloc_xml, "--hwloc-xml needs a file");
  line.Value("--objective", &objective, "--objective is partition or request");
  line.Value("--size", &size, "--size needs a whole number");
  line.Values("--available", &available, "--available needs device ids, comma-separated");
  line.Values("--must-include", &must_include, "--must-include needs device ids, comma-separated");
  line.Values("--available-positions", &available_positions,
              "--available-positions needs snapshot positions, comma-separated");
  line.Values("--must-include-positions", &must_include_positions,
              "--must-include-positions needs snapshot positions, comma-separated");
  line.Value("--resource", &args->resource, "--resource needs a name");
  line.Value("--raylet", &args->raylet, "--raylet needs an address");
  line.Value("--node-id", &args->node_id, "--node-id needs Ray's node id");
  line.Value("--on-device-loss", &args->on_device_loss, "--on-device-loss is report or drain");
  line.Value("--gcs-address", &args->gcs_address, "--gcs-address needs HOST:PORT");
  line.Value("--gcs-token-file", &args->gcs_token_file, "--gcs-token-file needs a file");
  line.Value("--rescan-interval", &rescan, "--rescan-interval needs a whole number of seconds");
  line.Value("--telemetry-interval", &telemetry,
             "--telemetry-interval needs a whole number of seconds");
  line.Value("--listen", &args->server.listen, "--listen needs an address");
  line.Value("--http", &args->http, "--http needs tcp://HOST:PORT");
  line.Value("--conformance-reports", &args->conformance_reports,
             "--conformance-reports needs a folder");
  line.Value("--socket-mode", &socket_mode,
             "--socket-mode needs an octal mode of at most 0777 with 0600 in it (0660)");
  line.Value("--socket-group", &args->server.socket_group,
             "--socket-group needs a group name or number");
  const std::pair<const char*, std::string*> files[] = {
      {"--tls-cert", &args->server.tls_cert_file},
      {"--tls-key", &args->server.tls_key_file},
      {"--tls-client-ca", &args->server.tls_client_ca_file},
      {"--token-file", &args->server.token_file},
      {"--raylet-token-file", &args->raylet_token_file},
      {"--raylet-tls-ca", &args->raylet_tls_ca_file},
      {"--tls-ca", &args->tls_ca_file},
      {"--out", &args->out},
  };
  for (const auto& [name, out] : files) line.Value(name, out, std::string(name) + " needs a file");
  line.Value("--replay", &args->replay, "--replay needs a bundle");
  line.Value("--agent", &args->agent, "--agent needs an address");
  line.Values("--plugin", &plugins, "--plugin needs a name or path");
  line.Values("--plugin-path", &plugin_paths, "--plugin-path needs folders");
  line.Values("--config", &configs, "--config needs PLUGIN.KEY=VALUE");
  line.Value("--config-file", &args->options.config_file, "--config-file needs a file");
  line.Value("--log-format", &log_format, "--log-format is text or json");
  line.Value("--log-level", &log_level, "--log-level needs a level");
  line.Positionals(&positionals);
  if (std::optional<std::string> problem = line.Parse(argc, argv, 1)) return Usage(*problem);

  // The values, in the options' order above.
  for (const std::string& v : required) {
    double n = 0;
    size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(v.substr(eq + 1), &n) || n <= 0) {
      return Usage(line.Needs("--require"));
    }
    args->required.emplace_back(v.substr(0, eq), n);
  }
  if (line.Given("--isolation")) {
    if (isolation != "process" && isolation != "none") return Usage(line.Needs("--isolation"));
    args->options.isolation = isolation == "process" ? RegistryOptions::Isolation::kChildProcess
                                                     : RegistryOptions::Isolation::kInProcess;
    args->isolation_given = true;
  }
  if (no_host_topology) args->options.host_topology = false;
  if (line.Given("--objective")) {
    if (objective != "partition" && objective != "request") return Usage(line.Needs("--objective"));
    args->options.allocation_objective = objective == "partition"
                                             ? AllocationObjective::kWholePartition
                                             : AllocationObjective::kRequestFirst;
  }
  if (line.Given("--size") && (!absl::SimpleAtoi(size, &args->size) || args->size < 0)) {
    return Usage(line.Needs("--size"));
  }
  for (const auto& [given, list] :
       {std::pair{&available, &args->available}, std::pair{&must_include, &args->must_include}}) {
    for (const std::string& v : *given) {
      for (absl::string_view id : absl::StrSplit(v, ',', absl::SkipEmpty())) list->emplace_back(id);
    }
  }
  for (const auto& [flag, given, list] :
       {std::tuple{"--available-positions", &available_positions, &args->available_positions},
        std::tuple{"--must-include-positions", &must_include_positions,
                   &args->must_include_positions}}) {
    for (const std::string& v : *given) {
      for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        size_t n = 0;
        if (!absl::SimpleAtoi(p, &n)) {
          return Usage(std::string(flag) + ": \"" + std::string(p) + "\" is not a position");
        }
        list->push_back(n);
      }
    }
  }
  if (line.Given("--rescan-interval") &&
      (!absl::SimpleAtoi(rescan, &args->rescan_interval_s) || args->rescan_interval_s < 0)) {
    return Usage(line.Needs("--rescan-interval"));
  }
  args->telemetry_interval_given = line.Given("--telemetry-interval");
  if (line.Given("--telemetry-interval") &&
      (!absl::SimpleAtoi(telemetry, &args->telemetry_interval_s) ||
       args->telemetry_interval_s < 0 || args->telemetry_interval_s > 86400)) {
    return Usage(line.Needs("--telemetry-interval"));
  }
  if (line.Given("--socket-mode")) {
    char* end = nullptr;
    unsigned long mode = socket_mode.empty() ? 0 : std::strtoul(socket_mode.c_str(), &end, 8);
    if (end == nullptr || *end != '\0' || mode > 0777 || (mode & 0600) != 0600) {
      return Usage(line.Needs("--socket-mode"));
    }
    args->server.socket_mode = static_cast<unsigned>(mode);
  }
  // Options whose value must not be empty.
  const std::pair<const char*, const std::string*> not_empty[] = {
      {"--raylet", &args->raylet},
      {"--listen", &args->server.listen},
      {"--http", &args->http},
      {"--socket-group", &args->server.socket_group},
      {"--agent", &args->agent},
      {"--replay", &args->replay},
      {"--conformance-reports", &args->conformance_reports},
  };
  for (const auto& [name, value] : not_empty) {
    if (line.Given(name) && value->empty()) return Usage(line.Needs(name));
  }
  for (const auto& [name, value] : files) {
    if (line.Given(name) && value->empty()) return Usage(line.Needs(name));
  }
  for (const std::string& v : plugins) {
    if (v.empty()) return Usage(line.Needs("--plugin"));
    args->options.plugins.push_back(v);
  }
  for (const std::string& v : plugin_paths) {
    for (absl::string_view dir : absl::StrSplit(v, ':', absl::SkipEmpty())) {
      args->options.search_path.emplace_back(dir);
    }
  }
  std::vector<std::string> bare_config;  // --config KEY=VALUE
  for (const std::string& v : configs) {
    if (v.find('=') != std::string::npos && v.find('.') > v.find('=')) {
      bare_config.push_back(v);  // KEY=VALUE: for the one --plugin, resolved below
    } else if (absl::Status st = AddConfigAssignment(v, &args->options.config); !st.ok()) {
      return Usage(std::string(st.message()));
    }
  }
  if (line.Given("--log-format")) {
    if (log_format != "text" && log_format != "json") return Usage(line.Needs("--log-format"));
    args->log_format = log_format;
  }
  if (line.Given("--log-level")) {
    if (spdlog::level::from_str(log_level) == spdlog::level::off && log_level != "off") {
      return Usage("unknown log level \"" + log_level + "\"");
    }
    args->log_level = log_level;
  }
  for (const std::string& arg : positionals) {
    if (args->command.empty()) {
      args->command = arg;
    } else if (args->command == "diff" && args->bundles.size() < 2) {
      args->bundles.push_back(arg);
    } else {
      return Usage("unexpected argument " + arg);
    }
  }
  if (args->command.empty()) return Usage("no command given");
  // `--config KEY=VALUE`, as the conformance suite takes it, configures the one plugin named
  // by --plugin (by path or name, whatever its table calls it); the plugin receives KEY.
  if (!bare_config.empty()) {
    if (args->options.plugins.size() != 1) {
      return Usage("--config " + bare_config[0] +
                   ": name the plugin (PLUGIN.KEY=VALUE), or choose one with --plugin");
    }
    for (const std::string& v : bare_config) {
      size_t eq = v.find('=');
      std::string key(absl::StripAsciiWhitespace(v.substr(0, eq)));
      if (key.empty()) return Usage("--config " + v + ": the key must not be empty");
      args->options.sole_plugin_config[key] =
          std::string(absl::StripAsciiWhitespace(v.substr(eq + 1)));
    }
  }
  return -1;
}

// `rayaccel conformance ...` is the suite binary next to this one, with the same arguments.
int Conformance(int argc, char** argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "rayaccel: cannot find my own path: %s\n", std::strerror(errno));
    return kExitFailure;
  }
  self[n] = '\0';
  std::string dir(self);
  dir.resize(dir.rfind('/'));
  std::string suite = dir + "/rayaccel-conformance";
  std::vector<char*> args = {suite.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(suite.c_str(), args.data());
  std::fprintf(stderr, "rayaccel: cannot run %s: %s\n", suite.c_str(), std::strerror(errno));
  return kExitFailure;
}

// hwloc loads every plugin it finds when it starts, whether or not it is used; these add
// nothing rayaccel reads (OpenGL displays, OpenCL, CUDA runtime, Level Zero and ROCm SMI
// devices: the plugins report accelerators themselves) and libxml2 (hwloc's own XML parser
// reads its exports), and cost a command milliseconds and the agent megabytes. An operator's
// own HWLOC_PLUGINS_BLACKLIST is kept.
void SkipUnusedHwlocPlugins() {
  setenv("HWLOC_PLUGINS_BLACKLIST",
         "hwloc_gl,hwloc_opencl,hwloc_cuda,hwloc_levelzero,hwloc_rsmi,hwloc_xml_libxml", 0);
}

int Run(int argc, char** argv) {
  SkipUnusedHwlocPlugins();  // before any thread or hwloc call
  if (argc >= 2 && std::string(argv[1]) == "conformance") return Conformance(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "transfer") {
    SetUpLogging("text", "warn");
    return RunTransfer(argc, argv);
  }
  Args args;
  if (int code = Parse(argc, argv, &args); code >= 0) return code;

  SetUpLogging(args.log_format, args.log_level);
  // The library logs through the command's logger (its format and level), here and in every
  // registry this command creates.
  args.options.log_level = FromSpdlogLevel(spdlog::default_logger()->level());
  args.options.log_callback = [](LogLevel level, const std::string& line) {
    spdlog::log(ToSpdlogLevel(level), "{}", line);
  };
  SetLogSink(args.options.log_level, args.options.log_callback);
  if (!args.replay.empty() && !args.agent.empty()) {
    return Usage("--replay and --agent each choose where the snapshot comes from: give one");
  }
  // The node's configuration file (docs/operations.md): RAYACCEL_CONFIG_FILE names it, else
  // /etc/rayaccel/rayaccel.conf when there is one; --config-file overrides both.
  if (args.options.config_file.empty()) {
    const char* named = std::getenv("RAYACCEL_CONFIG_FILE");
    if (named != nullptr && named[0] != '\0') {
      args.options.config_file = named;
    } else if (access(kDefaultConfigFile, F_OK) == 0) {
      if (access(kDefaultConfigFile, R_OK) == 0) {
        args.options.config_file = kDefaultConfigFile;
      } else {  // the node's file, not this user's to read: go on without it, and say so
        spdlog::warn("{} is not readable by this user: not used", kDefaultConfigFile);
      }
    }
  }
  if (args.env && args.command != "ray-start-args") return Usage("--env goes with ray-start-args");
  if ((!args.out.empty() || args.include_hostname || args.anonymize) && args.command != "capture") {
    return Usage("--out, --include-hostname and --anonymize are capture's");
  }
  if (!args.required.empty() && args.command != "discover" && args.command != "plugins" &&
      args.command != "resources" && args.command != "ray-start-args" && args.command != "topo") {
    return Usage("--require goes with discover, plugins, resources, ray-start-args or topo");
  }
  std::string replayed_manifest;  // for diff: the replayed node's versions, not this host's
  if (!args.replay.empty()) {
    absl::StatusOr<Bundle> bundle = ReadBundleFile(args.replay);
    if (!bundle.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(bundle.status().message()).c_str());
      return kExitUsage;
    }
    replayed_manifest = bundle->manifest_json;
    args.options.replay = std::make_shared<const CapturedNode>(std::move(bundle->node));
  }

  const std::string& cmd = args.command;
  if (cmd == "version") {
    std::printf("rayaccel %s (plugin ABI %d.%d)\n", RAYACCEL_VERSION, RAYACCEL_ABI_VERSION_MAJOR,
                RAYACCEL_ABI_VERSION_MINOR);
    return kExitOk;
  }
  if (cmd == "sink" && args.server.listen.empty()) return Usage("sink needs --listen ADDRESS");
  if (!args.http.empty() && cmd != "serve" && cmd != "sink") {
    return Usage("--http is serve's and sink's");
  }
  if (!args.conformance_reports.empty() && (cmd != "serve" || args.http.empty())) {
    return Usage("--conformance-reports goes with serve --http");
  }
  if (cmd != "serve" && args.telemetry_interval_given) {
    return Usage("--telemetry-interval is serve's");
  }
  const bool drain = args.on_device_loss == "drain";
  if ((!args.on_device_loss.empty() || !args.gcs_address.empty() || !args.gcs_token_file.empty()) &&
      cmd != "serve") {
    return Usage("--on-device-loss, --gcs-address and --gcs-token-file are serve's");
  }
  if (!args.on_device_loss.empty() && !drain && args.on_device_loss != "report") {
    return Usage("--on-device-loss is report or drain");
  }
  if (drain != !args.gcs_address.empty() || (!drain && !args.gcs_token_file.empty())) {
    return Usage(
        "--gcs-address and --gcs-token-file go with --on-device-loss drain, which needs "
        "--gcs-address");
  }
  if (cmd == "serve" && args.raylet.empty() && !args.node_id.empty() && !drain) {
    return Usage("serve: --node-id names the node to --raylet or to drain; give one of them");
  }
#if RAYACCEL_CLI_RPC
  if (cmd == "sink") return RunSink(args.server, args.json, args.node_id, args.http);
  if (cmd == "serve") {
    // The agent runs plugins isolated unless told otherwise: a crash in vendor code must not
    // take every plugin's devices down with the agent.
    if (!args.isolation_given) args.options.isolation = RegistryOptions::Isolation::kChildProcess;
    return RunServe({args.options, args.server, args.raylet, args.node_id, args.raylet_token_file,
                     args.raylet_tls_ca_file, args.rescan_interval_s, args.http,
                     args.conformance_reports, args.telemetry_interval_s, drain, args.gcs_address,
                     args.gcs_token_file});
  }
#else
  if (cmd == "sink" || cmd == "serve" || !args.agent.empty()) return ExecAgent(argv);
#endif
  if (cmd != "discover" && cmd != "plugins" && cmd != "resources" && cmd != "ray-start-args" &&
      cmd != "topo" && cmd != "allocate" && cmd != "capture" && cmd != "diff" &&
      cmd != "telemetry") {
    return Usage("unknown command \"" + cmd + "\"");
  }
  if (cmd == "allocate" && args.size < 0) return Usage("allocate needs --size N");
  // An option that does not apply is refused, never ignored.
  if (args.json && cmd == "ray-start-args") {
    return Usage("ray-start-args prints arguments for `ray start`; for JSON, resources --json");
  }
  if (args.json + args.dot + args.svg > 1) {
    return Usage("--json, --dot and --svg each choose topo's output: give one");
  }
  if ((args.dot || args.svg) && cmd != "topo") return Usage("--dot and --svg are topo's");
  if (cmd == "allocate" && !args.agent.empty()) return Usage("allocate does not take --agent");
  if (cmd == "capture" && !args.agent.empty()) return Usage("capture does not take --agent");
  if (cmd == "telemetry" && !args.agent.empty()) return Usage("telemetry does not take --agent");
  if (cmd == "diff" && args.bundles.empty()) return Usage("diff needs a bundle: diff A [B]");
  // diff A B compares two bundles; neither this host nor its plugins are involved.
  std::optional<Bundle> first, second;
  if (cmd == "diff") {
    for (size_t i = 0; i < args.bundles.size(); ++i) {
      absl::StatusOr<Bundle> b = ReadBundleFile(args.bundles[i]);
      if (!b.ok()) {
        std::fprintf(stderr, "rayaccel: %s\n", std::string(b.status().message()).c_str());
        return kExitUsage;
      }
      (i == 0 ? first : second) = *std::move(b);
    }
    if (second) return Diff(*first, *second, args.bundles[1]);
  }
  std::shared_ptr<const NodeSnapshot> snap;
  absl::StatusOr<std::unique_ptr<Registry>> registry;
  if (!args.agent.empty()) {
#if RAYACCEL_CLI_RPC
    absl::StatusOr<std::shared_ptr<const NodeSnapshot>> fetched = FetchSnapshot(
        {args.agent, args.server.token_file, args.tls_ca_file, args.server.allow_insecure_tcp});
    if (!fetched.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(fetched.status().message()).c_str());
      return fetched.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                           : kExitFailure;
    }
    snap = *std::move(fetched);
#endif
  } else {
    registry = Registry::Create(args.options);
    if (!registry.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(registry.status().message()).c_str());
      return registry.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                            : kExitFailure;
    }
    snap = (*registry)->snapshot();
  }
  std::string out;
  int exit_code = kExitOk;
  // --require: the output is printed either way (it says what is there); the exit code says
  // whether it is enough, with what is missing on stderr, after the output.
  std::string unmet;
  for (const auto& [resource, needed] : args.required) {
    auto it = snap->ray.resources.find(resource);
    const double found = it == snap->ray.resources.end() ? 0 : it->second;
    if (found < needed) {
      absl::StrAppend(
          &unmet,
          absl::StrFormat("rayaccel: required %s=%g, the node gives Ray %g%s\n", resource, needed,
                          found, found == 0 ? " (see `rayaccel plugins` for why)" : ""));
      exit_code = kExitRequirementUnmet;
    }
  }
  if (cmd == "discover") {
    out = args.json ? present::DiscoverJson(*snap) : present::DiscoverText(*snap);
  } else if (cmd == "plugins") {
    out = args.json ? present::PluginsJson(*snap) : present::PluginsText(*snap);
  } else if (cmd == "telemetry") {
    Telemetry telemetry = (*registry)->SampleTelemetry();
    out = args.json ? present::TelemetryJson(*snap, telemetry)
                    : present::TelemetryText(*snap, telemetry);
  } else if (cmd == "resources") {
    out = args.json ? present::ResourcesJson(snap->ray) : present::ResourcesText(snap->ray);
  } else if (cmd == "topo") {
    out = args.dot    ? present::TopoDot(*snap)
          : args.svg  ? present::TopoSvg(*snap)
          : args.json ? present::TopoJson(*snap)
                      : present::TopoText(*snap);
  } else if (cmd == "allocate") {
    // Positions are this snapshot's: named here by the ids they hold.
    for (auto [positions, ids] : {std::pair{&args.available_positions, &args.available},
                                  {&args.must_include_positions, &args.must_include}}) {
      for (size_t p : *positions) {
        if (p >= snap->devices.size()) {
          std::fprintf(stderr, "rayaccel: no device at position %zu (%zu devices)\n", p,
                       snap->devices.size());
          return kExitUsage;
        }
        ids->push_back(snap->devices[p].id);
      }
    }
    absl::StatusOr<Allocation> allocation = (*registry)->PreferredAllocation(
        args.available, args.must_include, static_cast<size_t>(args.size), args.resource);
    if (!allocation.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(allocation.status().message()).c_str());
      return kExitUsage;
    }
    std::map<std::string, std::string> env;
    if (!allocation->devices.empty()) {
      absl::StatusOr<std::map<std::string, std::string>> prepared =
          (*registry)->PrepareAllocation(allocation->device_ids, allocation->generation);
      if (!prepared.ok()) {
        std::fprintf(stderr, "rayaccel: prepare_allocation: %s\n",
                     std::string(prepared.status().message()).c_str());
        return kExitFailure;
      }
      env = *std::move(prepared);
    }
    out = args.json ? present::AllocationJson(*snap, *allocation, env)
                    : present::AllocationText(*snap, *allocation, env);
    if (allocation->devices.empty()) exit_code = kExitNoAllocation;
  } else if (cmd == "diff") {
    Bundle here;
    here.snapshot_json = present::DiscoverJson(*snap);
    if (args.replay.empty()) {
      Manifest manifest = CollectManifest(false);
      AddVendorStacks(*snap, &manifest);
      here.manifest_json = ManifestJson(manifest);
    } else {
      here.manifest_json = replayed_manifest;
    }
    return Diff(*first, here, args.replay.empty() ? "this host" : args.replay + " (replayed)");
  } else if (cmd == "capture") {
    absl::StatusOr<CapturedNode> node = (*registry)->Capture();
    if (!node.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(node.status().message()).c_str());
      return kExitFailure;
    }
    if (!args.include_hostname) node->hwloc_xml = WithoutHostName(node->hwloc_xml);
    Manifest manifest = CollectManifest(args.include_hostname);
    if (args.anonymize) {
      // A key of this capture's own, not kept: stand-ins cannot be traced back by trying
      // serials (docs/capture.md).
      std::random_device random;
      const uint64_t key = (uint64_t{random()} << 32) ^ random();
      if (absl::Status s = Anonymize(key, &*node, &manifest); !s.ok()) {
        std::fprintf(stderr, "rayaccel: %s\n", std::string(s.message()).c_str());
        return kExitFailure;
      }
    }
    // The bundle's snapshot is what its answers replay to, so that it always agrees with
    // itself; a node that changed between the first scan and the capture says so.
    RegistryOptions replay = args.options;
    replay.replay = std::make_shared<const CapturedNode>(*node);
    absl::StatusOr<std::unique_ptr<Registry>> replayed = Registry::Create(replay);
    if (!replayed.ok()) {
      std::fprintf(stderr, "rayaccel: capture does not replay: %s\n",
                   std::string(replayed.status().message()).c_str());
      return kExitFailure;
    }
    std::shared_ptr<const NodeSnapshot> recorded = (*replayed)->snapshot();
    if (!args.anonymize && present::DiscoverJson(*recorded) != present::DiscoverJson(*snap)) {
      std::fprintf(stderr,
                   "rayaccel: the node changed while it was captured; the bundle holds the "
                   "later answers\n");
    }
    snap = recorded;
    AddVendorStacks(*snap, &manifest);
    out = WriteBundle(*node, *snap, manifest);
    if (!args.out.empty()) {
      std::ofstream file(args.out, std::ios::binary | std::ios::trunc);
      if (!(file << out) || !file.flush()) {
        std::fprintf(stderr, "rayaccel: cannot write %s\n", args.out.c_str());
        return kExitFailure;
      }
      out = absl::StrCat("captured ", snap->plugins.size(), " plugins and ", snap->devices.size(),
                         " devices to ", args.out, "; replay: rayaccel discover --replay ",
                         args.out, "\n");
    }
  } else if (args.env) {
    PrepareAllocationFn prepare = [&](const std::vector<std::string>& ids, uint64_t generation) {
#if RAYACCEL_CLI_RPC
      if (!args.agent.empty()) {
        return PrepareAllocationAt(
            {args.agent, args.server.token_file, args.tls_ca_file, args.server.allow_insecure_tcp},
            ids, generation);
      }
#endif
      return (*registry)->PrepareAllocation(ids, generation);
    };
    RayUnitInstances rays = RaysUnitInstancesFor(*snap);
    absl::StatusOr<std::string> env =
        RayStartEnvironment(*snap, prepare, rays.list, RayaccelManagersOn());
    if (!env.ok()) {
      std::fprintf(stderr, "rayaccel: %s\n", std::string(env.status().message()).c_str());
      return kExitFailure;
    }
    std::vector<std::string> pooled = ResourcesRayDoesNotCountByDevice(*snap, rays.list);
    if (!pooled.empty()) {
      std::fprintf(stderr,
                   "rayaccel: %s: Ray counts these by device only when %s names them; "
                   "added to %s\n",
                   absl::StrJoin(pooled, ", ").c_str(), kRayUnitInstanceVariable,
                   rays.source.c_str());
    }
    out = *std::move(env);
  } else {
    out = present::RayStartArgs(snap->ray);
    std::vector<std::string> pooled =
        ResourcesRayDoesNotCountByDevice(*snap, RaysUnitInstancesFor(*snap).list);
    if (!pooled.empty()) {
      std::fprintf(stderr,
                   "rayaccel: start Ray with what `rayaccel ray-start-args --env` prints too: "
                   "without %s naming %s, and rayaccel's managers, Ray tells every task of it "
                   "device 0 (docs/ray-integration.md)\n",
                   kRayUnitInstanceVariable, absl::StrJoin(pooled, ", ").c_str());
    }
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    std::fprintf(stderr, "rayaccel: cannot write output: %s\n", std::strerror(errno));
    return kExitFailure;
  }
  std::fputs(unmet.c_str(), stderr);
  return exit_code;
}

}  // namespace
}  // namespace rayaccel::cli

int main(int argc, char** argv) {
  rayaccel::KeepLibraryLogsOffStdout();
  return rayaccel::cli::Run(argc, argv);
}
