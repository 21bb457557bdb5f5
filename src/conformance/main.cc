// rayaccel-conformance PLUGIN.so [--config KEY=VALUE ...] [--tier N] [--junit FILE] [--json]
//                                [--timeout SECONDS] [--expect-no-devices]
//                                [--perf [--baseline REPORT.json] [--tolerance FACTOR]]
//                                [--only PREFIX[,PREFIX...]]
// rayaccel-conformance --replay BUNDLE [--config plugin=NAME] [...]
// rayaccel-conformance --list-checks=markdown
//
// --replay checks a captured plugin's answers (docs/capture.md) through the replay plugin
// installed in ../lib/rayaccel/replay/ next to this program. --list-checks=markdown prints the
// table of the checks that docs/conformance.md shows, and runs nothing.
//
// Runs every check of the suite as a GoogleTest test (so --junit is GoogleTest's JUnit XML),
// prints a summary (or JSON) and the tier the plugin reaches. --perf adds tier 4's figures
// (to the JSON, and as JUnit properties); with --baseline, a figure more than FACTOR (default
// 3) times worse than the same figure in an earlier --json report fails its check. Exit code:
// --only runs just the checks whose names start with a prefix ("perf", "transport."), and then
// judges no tier: the exit code says whether they passed. Exit code: 0 when the plugin
// reaches --tier (default 1), 1 when it does not, 2 for usage errors (a missing plugin file
// included).
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "conformance/report.h"
#include "conformance/suite.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "util/command_line.h"
#include "util/json.h"
#include "util/log.h"

namespace rayaccel::conformance {
namespace {

constexpr char kUsage[] =
    "usage: rayaccel-conformance PLUGIN.so [--config KEY=VALUE ...] [--tier N] [--junit FILE]\n"
    "                            [--json] [--timeout SECONDS] [--expect-no-devices]\n"
    "                            [--perf [--baseline REPORT.json] [--tolerance FACTOR]]\n"
    "                            [--only PREFIX[,PREFIX...]] [--ray-python PATH] [--report DIR]\n"
    "       rayaccel-conformance --replay BUNDLE [--config plugin=NAME] [options]\n"
    "       rayaccel-conformance --list-checks=markdown\n";

// What --help adds to the usage: every option, and the tiers.
constexpr char kHelp[] = R"(
Checks one plugin .so against the ABI's promises, each check in a child process of its own,
and says which maturity tier it reaches (docs/conformance.md):
  1 discoverable   2 schedulable   3 transport   4 measured (--perf)
  5 certified in Ray (--tier 5: the suite starts a real Ray of its own on this host)

Options:
  --config KEY=VALUE   passed to the plugin's initialize (repeatable; PLUGIN.KEY=VALUE too)
  --tier N             the tier the exit code asks for: 0 when reached, 1 when not (default 1)
  --perf               run tier 4's performance checks and record their figures
  --baseline FILE      with --perf: an earlier --json report; a figure worse than --tolerance
                       times its baseline fails its check
  --tolerance FACTOR   how much worse a figure may be than the baseline's (default 3)
  --only PREFIX,...    run only the checks whose names start so; no tier is judged
  --timeout SECONDS    per check (default 10); a plugin that hangs longer fails that check
  --expect-no-devices  this machine has none of the plugin's devices: finding none passes
  --json               the report as JSON on stdout instead of the summary
  --junit FILE         a JUnit XML report (each check a test case, figures as properties)
  --report DIR         the maturity report: DIR/report.json and DIR/report.md (the plugin,
                       the tier, every check, and the rayaccel, Ray, Python, kernel and driver
                       versions that decided it)
  --ray-python PATH    tier 5's Python with Ray and rayaccel's package (else
                       $RAYACCEL_RAY_PYTHON, the build tree's venv, python3 on PATH); runs the
                       Ray checks as --tier 5 does
  --replay BUNDLE      check a captured plugin's answers (rayaccel capture) without its hardware
  --list-checks=markdown  print the table of the checks and run none
Exit code: 0 when the plugin reaches --tier (or, with --only, when those checks passed), 1
when not, 2 for a usage error.
)";

using Result = CheckResult;

// Collects each check's outcome as GoogleTest runs it.
std::vector<Result>* g_results = nullptr;
Options* g_options = nullptr;
// Set when a gating check failed: the checks after it are not run.
const Check* g_gate_failed = nullptr;
int g_not_run = 0;
std::string g_plugin_file;  // the plugin's file name, where the JUnit report places checks
std::map<std::string, double> g_baseline;  // --baseline's figures, by name
double g_tolerance = 3;

class CheckTest : public ::testing::Test {
 public:
  explicit CheckTest(const Check* check) : check_(check) {}
  void TestBody() override {
    if (g_gate_failed != nullptr) {
      ++g_not_run;
      Report(::testing::TestPartResult::kSkip, "not run: " + g_gate_failed->name + " failed");
      return;
    }
    Outcome o = check_->run(*g_options);
    std::vector<std::string> regressions;
    for (const Figure& f : o.figures) {
      RecordProperty(f.name, absl::StrFormat("%.6g", f.value));
      auto base = g_baseline.find(f.name);
      if (base == g_baseline.end()) continue;
      if (std::string r = Regression(f, base->second, g_tolerance); !r.empty()) {
        regressions.push_back(r);
      }
    }
    if (!regressions.empty() && o.status != Outcome::Status::kFail) {
      o.status = Outcome::Status::kFail;
      o.message = absl::StrJoin(regressions, "; ");
    }
    g_results->push_back({check_, o});
    if (check_->gates && o.status == Outcome::Status::kFail) g_gate_failed = check_;
    if (o.status == Outcome::Status::kWarn) RecordProperty("warning", o.message);
    if (o.status == Outcome::Status::kSkip) {
      Report(::testing::TestPartResult::kSkip, o.message);
    } else if (o.status == Outcome::Status::kFail) {
      Report(::testing::TestPartResult::kNonFatalFailure, check_->name + ": " + o.message);
    }
  }

 private:
  // Recorded against the plugin file, not this source file: the JUnit report then carries no
  // path of the machine the suite was built on.
  static void Report(::testing::TestPartResult::Type type, const std::string& message) {
    ::testing::internal::AssertHelper(type, g_plugin_file.c_str(), -1, message.c_str()) =
        ::testing::Message();
  }

  const Check* check_;
};

// The figures of an earlier --json report (its checks' "figures"), by name.
absl::StatusOr<std::map<std::string, double>> ReadBaseline(const std::string& file) {
  std::ifstream in(file);
  if (!in) return absl::NotFoundError(file + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  json::ParseError error;
  std::optional<json::Value> report = json::Parse(text.str(), &error);
  const json::Value* checks = report ? report->Find("checks") : nullptr;
  if (checks == nullptr || checks->type() != json::Value::Type::kArray) {
    return absl::InvalidArgumentError(
        file + ": not a report of rayaccel-conformance --json" +
        (report ? ""
                : absl::StrCat(" (", error.message, " at ", error.line, ":", error.column, ")")));
  }
  std::map<std::string, double> figures;
  for (const json::Value& check : checks->array()) {
    const json::Value* f = check.Find("figures");
    if (f == nullptr || f->type() != json::Value::Type::kObject) continue;
    for (const auto& [name, value] : f->members()) {
      if (value.type() == json::Value::Type::kNumber) figures[name] = value.number();
    }
  }
  if (figures.empty()) {
    return absl::InvalidArgumentError(file + ": no figures (was it run with --perf?)");
  }
  return figures;
}

int Usage(const std::string& problem) {
  std::fprintf(stderr, "rayaccel-conformance: %s\n%s", problem.c_str(), kUsage);
  return 2;
}

// The checks run on GoogleTest, which takes flags from the environment too: GTEST_* and what
// Bazel sets for it (TESTBRIDGE_TEST_ONLY is a filter, XML_OUTPUT_FILE an output). A suite
// started by a test runner that itself shards or filters (a sharded GoogleTest program, Bazel)
// would run only some checks and report a tier from those. Which checks run is the command
// line's alone: the sharding variables, read when the checks start, go here; the flags, read
// before main, are overridden on GoogleTest's command line.
void ForgetTestRunnersEnvironment() {
  std::vector<std::string> names = {"TESTBRIDGE_TEST_ONLY",   "TESTBRIDGE_TEST_RUNNER_FAIL_FAST",
                                    "XML_OUTPUT_FILE",        "TEST_PREMATURE_EXIT_FILE",
                                    "TEST_SHARD_STATUS_FILE", "TEST_WARNINGS_OUTPUT_FILE"};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (absl::StartsWith(entry, "GTEST_")) names.push_back(entry.substr(0, entry.find('=')));
  }
  for (const std::string& name : names) unsetenv(name.c_str());
}

int Run(int argc, char** argv) {
  Options options;
  int want_tier = 1;
  bool json = false;
  std::string replay;
  std::string junit;
  std::string baseline;
  std::vector<std::string> only;
  if (CommandLine::AsksForHelp(argc, argv, 1)) {
    std::fputs(kUsage, stdout);
    std::fputs(kHelp, stdout);
    return 0;
  }
  CommandLine line;
  std::string wanted, tolerance, timeout, list_checks, report_dir;
  std::vector<std::string> configs, only_lists, positionals;
  line.Flag("--json", &json);
  line.Flag("--expect-no-devices", &options.expect_no_devices);
  line.Flag("--perf", &options.perf);
  line.Values("--config", &configs, "--config needs KEY=VALUE");
  line.Value("--tier", &wanted, "--tier is 1, 2, 3, 4 or 5 (4 and 5 need --perf)");
  line.Value("--ray-python", &options.ray_python, "--ray-python needs a Python with Ray");
  line.Value("--report", &report_dir, "--report needs a folder");
  line.Values("--only", &only_lists, "--only needs check name prefixes");
  line.Value("--baseline", &baseline, "--baseline needs a report");
  line.Value("--tolerance", &tolerance,
             "--tolerance is a factor of at least 1 (3: a figure may be 3x worse)");
  line.Value("--replay", &replay, "--replay needs a capture bundle");
  line.Value("--junit", &junit, "--junit needs a file");
  line.Value("--timeout", &timeout, "--timeout needs seconds");
  line.Value("--list-checks", &list_checks, "--list-checks is markdown");
  line.Positionals(&positionals);
  if (std::optional<std::string> problem = line.Parse(argc, argv, 1)) return Usage(*problem);
  if (line.Given("--list-checks")) {
    if (list_checks != "markdown") return Usage(line.Needs("--list-checks"));
    std::fputs(ChecksMarkdown(AllChecks()).c_str(), stdout);
    return 0;
  }
  for (const std::string& v : configs) {
    if (v.find('=') == std::string::npos) return Usage(line.Needs("--config"));
    std::string key = v.substr(0, v.find('='));
    // Accept "plugin.key=value" too, as the rayaccel command takes it.
    if (key.find('.') != std::string::npos) key = key.substr(key.find('.') + 1);
    options.config[key] = v.substr(v.find('=') + 1);
  }
  if (line.Given("--tier")) {
    if (wanted.size() != 1 || wanted[0] < '1' || wanted[0] > '0' + kTopTier) {
      return Usage(line.Needs("--tier"));
    }
    want_tier = wanted[0] - '0';
  }
  // Tier 5's checks start a Ray: only when asked for, by --tier 5 or --ray-python.
  options.ray = want_tier == kTopTier || line.Given("--ray-python");
  for (const std::string& v : only_lists) {
    if (v.empty()) return Usage(line.Needs("--only"));
    for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) only.emplace_back(p);
  }
  if (line.Given("--tolerance") &&
      (!absl::SimpleAtod(tolerance, &g_tolerance) || !(g_tolerance >= 1))) {
    return Usage(line.Needs("--tolerance"));
  }
  if (line.Given("--replay") && replay.empty()) return Usage(line.Needs("--replay"));
  if (line.Given("--timeout")) {
    if (!absl::SimpleAtoi(timeout, &options.timeout_seconds) || options.timeout_seconds <= 0) {
      return Usage(line.Needs("--timeout"));
    }
  }
  if (positionals.size() > 1) return Usage("one plugin at a time");
  if (!positionals.empty()) options.plugin_path = positionals[0];
  if (!replay.empty()) {
    if (!options.plugin_path.empty()) return Usage("--replay and a plugin file: give one");
    if (access(replay.c_str(), R_OK) != 0) return Usage(replay + ": " + std::strerror(errno));
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    std::string self = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string();
    options.plugin_path =
        self.substr(0, self.rfind('/')) + "/../lib/rayaccel/replay/librayaccel-replay.so";
    char bundle[PATH_MAX];
    options.config["bundle"] = realpath(replay.c_str(), bundle) != nullptr ? bundle : replay;
  }
  if (options.plugin_path.empty()) return Usage("no plugin given");
  if (!baseline.empty()) {
    if (!options.perf) return Usage("--baseline compares the figures of --perf");
    absl::StatusOr<std::map<std::string, double>> figures = ReadBaseline(baseline);
    if (!figures.ok()) return Usage(std::string(figures.status().message()));
    g_baseline = *std::move(figures);
  }
  struct stat st {};
  if (stat(options.plugin_path.c_str(), &st) != 0) {
    return Usage(options.plugin_path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Usage(options.plugin_path + ": not a file");
  spdlog::set_level(spdlog::level::off);  // the plugin's log lines are not the report
  SetLogSink(LogLevel::kOff, nullptr);

  ForgetTestRunnersEnvironment();
  // GoogleTest read its flags' defaults from the environment before main: these override them.
  std::vector<std::string> gtest_args = {"rayaccel-conformance",
                                         "--gtest_filter=*",
                                         "--gtest_repeat=1",
                                         "--gtest_shuffle=0",
                                         "--gtest_also_run_disabled_tests=0",
                                         "--gtest_fail_fast=0",
                                         "--gtest_break_on_failure=0",
                                         "--gtest_throw_on_failure=0",
                                         "--gtest_catch_exceptions=1",
                                         "--gtest_output=" + (junit.empty() ? "" : "xml:" + junit)};
  std::vector<char*> gtest_argv;
  gtest_argv.reserve(gtest_args.size() + 1);
  for (std::string& a : gtest_args) gtest_argv.push_back(a.data());
  int gtest_argc = static_cast<int>(gtest_argv.size());
  gtest_argv.push_back(nullptr);  // argv[argc] == NULL: GoogleTest shifts it down
  ::testing::InitGoogleTest(&gtest_argc, gtest_argv.data());
  // Our summary replaces GoogleTest's console output (stdout may carry JSON).
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());

  std::vector<Result> results;
  g_results = &results;
  g_options = &options;
  // The JUnit "file" of every check is the plugin file's name: what the report is about, and
  // no path of the machine this suite was built on.
  g_plugin_file = options.plugin_path.substr(options.plugin_path.rfind('/') + 1);
  for (const Check& check : AllChecks()) {
    const bool chosen = only.empty() || std::any_of(only.begin(), only.end(), [&](const auto& p) {
                          return absl::StartsWith(check.name, p);
                        });
    if (!chosen) continue;
    std::string suite = "Tier" + std::to_string(check.tier);
    ::testing::RegisterTest(suite.c_str(), check.name.c_str(), nullptr, nullptr,
                            g_plugin_file.c_str(), 0,
                            [&check]() -> ::testing::Test* { return new CheckTest(&check); });
  }
  // The exit code is the tier, not GoogleTest's verdict: a failed check is a finding.
  int gtest_failed = RUN_ALL_TESTS();
  (void)gtest_failed;

  // The tier: every check of that tier and below passed (a skip counts where allowed).
  int tier = 0;
  for (int t = 1; t <= kTopTier; ++t) {
    bool all = true;
    for (const Result& r : results) {
      if (r.check->tier != t) continue;
      bool pass = r.outcome.status == Outcome::Status::kPass ||
                  r.outcome.status == Outcome::Status::kWarn ||
                  (r.outcome.status == Outcome::Status::kSkip && r.check->skip_passes);
      all = all && pass;
    }
    if (!all) break;
    tier = t;
  }
  // How many devices discovery found ("N devices"), -1 when it did not run or failed.
  int devices = -1;
  for (const Result& r : results) {
    if (r.check->name == "discovery.answers_valid" && r.outcome.status == Outcome::Status::kPass) {
      devices = std::atoi(r.outcome.message.c_str());
    }
  }
  std::string note;
  if (!only.empty()) {
    tier = 0;  // judged on every check, not on a few
    note = absl::StrCat(results.size(), " checks run (--only ", absl::StrJoin(only, ","),
                        "): no tier is judged");
  } else if (g_gate_failed != nullptr) {
    note = std::to_string(g_not_run) + " further checks not run: " +
           (g_gate_failed->tier == kTopTier ? "Ray did not take the node ("
                                            : "the plugin does not load (") +
           g_gate_failed->name + ")";
  } else if (devices == 0 && options.expect_no_devices) {
    note =
        "no devices here, as expected (--expect-no-devices): tier 1 is the most a plugin "
        "reaches without its hardware";
  } else if (devices == 0) {
    note =
        "the plugin found no devices here: without its hardware tier 1 is the most it can "
        "reach (--expect-no-devices makes that the expectation)";
  }
  const RayVersions ray = RayRunVersions();
  if (!report_dir.empty()) {
    if (absl::Status st = WriteReport(report_dir, options, tier, results, note); !st.ok()) {
      std::fprintf(stderr, "rayaccel-conformance: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  if (json) {
    json::Writer w;
    w.BeginObject();
    w.Key("plugin").String(options.plugin_path);
    w.Key("tier").Int(tier);
    w.Key("tier_name").String(TierName(tier));
    w.Key("devices").Int(devices);
    w.Key("not_run").Int(g_not_run);
    w.Key("note").String(note);
    if (!ray.ray.empty()) w.Key("ray_version").String(ray.ray);
    w.Key("checks").BeginArray();
    for (const Result& r : results) WriteCheck(w, r);
    w.EndArray();
    w.EndObject();
    std::string out = w.Finish();
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    if (replay.empty()) {
      std::printf("rayaccel conformance: %s\n\n", options.plugin_path.c_str());
    } else {
      std::printf("rayaccel conformance: %s, replayed by %s\n\n", replay.c_str(),
                  options.plugin_path.c_str());
    }
    for (const Result& r : results) {
      std::printf("  %-4s  tier %d  %-34s %s\n", StatusName(r.outcome.status), r.check->tier,
                  r.check->name.c_str(), r.outcome.message.c_str());
    }
    if (!note.empty()) std::printf("\n%s\n", note.c_str());
    if (!ray.ray.empty()) {
      std::printf("\nRay %s, Python %s (%s)\n", ray.ray.c_str(), ray.python.c_str(),
                  ray.python_path.c_str());
    }
    if (!report_dir.empty()) std::printf("Report: %s/report.json, report.md\n", report_dir.c_str());
    if (only.empty()) {
      std::printf("\nTier reached: %d (%s)%s\n", tier, TierName(tier),
                  junit.empty() ? "" : ("; JUnit report: " + junit).c_str());
    } else if (!junit.empty()) {
      std::printf("JUnit report: %s\n", junit.c_str());
    }
  }
  if (!only.empty()) {
    const bool all_passed = std::none_of(results.begin(), results.end(), [](const Result& r) {
      return r.outcome.status == Outcome::Status::kFail ||
             (r.outcome.status == Outcome::Status::kSkip && !r.check->skip_passes);
    });
    return all_passed ? 0 : 1;
  }
  return tier >= want_tier ? 0 : 1;
}

}  // namespace
}  // namespace rayaccel::conformance

int main(int argc, char** argv) {
  rayaccel::KeepLibraryLogsOffStdout();
  return rayaccel::conformance::Run(argc, argv);
}
