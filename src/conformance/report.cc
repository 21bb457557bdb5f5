#include "conformance/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "conformance/check_support.h"
#include "util/json.h"

namespace rayaccel::conformance {
namespace {

std::string Cell(const std::string& text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\n", " "}});
}

}  // namespace

const char* StatusName(Outcome::Status s) {
  return s == Outcome::Status::kPass   ? "pass"
         : s == Outcome::Status::kSkip ? "skip"
         : s == Outcome::Status::kWarn ? "warn"
                                       : "fail";
}

void WriteCheck(json::Writer& w, const CheckResult& r) {
  w.BeginObject();
  w.Key("name").String(r.check->name);
  w.Key("tier").Int(r.check->tier);
  w.Key("status").String(StatusName(r.outcome.status));
  w.Key("message").String(r.outcome.message);
  w.Key("why").String(r.check->why);
  if (!r.outcome.figures.empty()) {
    w.Key("figures").BeginObject();
    for (const Figure& f : r.outcome.figures) w.Key(f.name).Double(f.value);
    w.EndObject();
  }
  w.EndObject();
}

PluginFacts ReadPluginFacts(const Options& options) {
  PluginFacts facts;
  // The facts travel back as the child's verdict: fields separated by unit separators.
  Outcome got = RunIn(options, [](const LoadedPlugin& p) {
    absl::StatusOr<PluginProperties> props = p.GetProperties();
    Discovery d = Discover(p, false, false, false);
    std::set<std::string> drivers;
    for (const Device& dev : d.report.devices) {
      if (!dev.driver_version.empty()) drivers.insert("driver_version=" + dev.driver_version);
      for (const Attribute& a : dev.attributes) {
        if (a.kind == Attribute::Kind::kVersion) drivers.insert(a.name + "=" + a.string_value);
      }
    }
    return Outcome::Pass(absl::StrJoin(
        {p.name(), p.abi_version(), props.ok() ? props->vendor : std::string(),
         props.ok() ? props->plugin_version : std::string(), absl::StrJoin(drivers, "\x1e")},
        "\x1f"));
  });
  if (got.status != Outcome::Status::kPass) {
    facts.error = got.message;
    return facts;
  }
  std::vector<std::string> parts = absl::StrSplit(got.message, '\x1f');
  parts.resize(5);
  facts.name = parts[0];
  facts.abi_version = parts[1];
  facts.vendor = parts[2];
  facts.version = parts[3];
  if (!parts[4].empty()) facts.drivers = absl::StrSplit(parts[4], '\x1e');
  return facts;
}

absl::Status WriteReport(const std::string& dir, const Options& options, int tier,
                         const std::vector<CheckResult>& results, const std::string& note) {
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) return absl::InvalidArgumentError(absl::StrCat(dir, ": ", made.message()));
  PluginFacts plugin = ReadPluginFacts(options);
  RayVersions ray = RayRunVersions();
  utsname un{};
  uname(&un);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string file = options.plugin_path.substr(options.plugin_path.rfind('/') + 1);

  json::Writer w;
  w.BeginObject();
  w.Key("plugin").BeginObject();
  w.Key("name").String(plugin.name);
  w.Key("file").String(file);
  w.Key("abi_version").String(plugin.abi_version);
  w.Key("vendor").String(plugin.vendor);
  w.Key("version").String(plugin.version);
  if (!plugin.error.empty()) w.Key("error").String(plugin.error);
  w.EndObject();
  w.Key("tier").Int(tier);
  w.Key("tier_name").String(TierName(tier));
  w.Key("note").String(note);
  w.Key("versions").BeginObject();
  w.Key("rayaccel").String(RAYACCEL_VERSION);
  w.Key("ray").String(ray.ray);
  w.Key("python").String(ray.python);
  w.Key("kernel").String(un.release);
  w.Key("machine").String(un.machine);
  w.Key("drivers").BeginArray();
  for (const std::string& d : plugin.drivers) w.String(d);
  w.EndArray();
  w.EndObject();
  w.Key("date").String(date);
  w.Key("host").String(host);
  w.Key("checks").BeginArray();
  for (const CheckResult& r : results) WriteCheck(w, r);
  w.EndArray();
  w.EndObject();

  std::string md = absl::StrCat(
      "# rayaccel conformance: ", plugin.name.empty() ? file : plugin.name, "\n\n",
      "**Tier reached: ", tier, " (", TierName(tier), ")**", note.empty() ? "" : " — " + note,
      "\n\n| | |\n|---|---|\n| plugin file | `", file, "` |\n| ABI | ", plugin.abi_version,
      " |\n| vendor, version | ", plugin.vendor, " ", plugin.version, " |\n| drivers | ",
      plugin.drivers.empty() ? "-" : Cell(absl::StrJoin(plugin.drivers, ", ")), " |\n| rayaccel | ",
      RAYACCEL_VERSION, " |\n| Ray, Python | ",
      ray.ray.empty() ? "not run" : ray.ray + ", Python " + ray.python, " |\n| kernel | ",
      un.release, " ", un.machine, " |\n| date, host | ", date, ", ", host, " |\n\n",
      "| check | tier | verdict | message | figures |\n|---|---|---|---|---|\n");
  for (const CheckResult& r : results) {
    std::vector<std::string> figures;
    for (const Figure& f : r.outcome.figures) figures.push_back(absl::StrCat(f.name, " ", f.value));
    absl::StrAppend(&md, "| `", r.check->name, "` | ", r.check->tier, " | ",
                    StatusName(r.outcome.status), " | ", Cell(r.outcome.message), " | ",
                    Cell(absl::StrJoin(figures, ", ")), " |\n");
  }
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"report.json", w.Finish()}, {"report.md", md}}) {
    std::ofstream out(dir + "/" + name, std::ios::trunc);
    if (!(out << text) || !out.flush()) {
      return absl::InternalError(absl::StrCat("cannot write ", dir, "/", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace rayaccel::conformance
