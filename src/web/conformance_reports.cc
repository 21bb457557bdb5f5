#include "web/conformance_reports.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "util/json.h"

namespace rayaccel::web {
namespace {

constexpr size_t kMaxReportBytes = size_t{4} << 20;
constexpr size_t kMaxFolders = 4096;

struct Report {
  std::string plugin, file, tier_name, date, ray, rayaccel;
  int64_t tier = 0;
  std::vector<std::string> failed;
};

// The file's bytes: a regular file (not a link) of at most kMaxReportBytes.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> out;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<size_t>(st.st_size) <= kMaxReportBytes) {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    size_t at = 0;
    while (at < text.size()) {
      ssize_t n = read(fd, text.data() + at, text.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    if (at == text.size()) out = std::move(text);
  }
  close(fd);
  return out;
}

std::string Text(const json::Value& object, std::string_view key) {
  const json::Value* v = object.Find(key);
  return v != nullptr && v->is_string() ? v->string() : std::string();
}

std::optional<Report> Parse(const std::string& text) {
  json::ParseError error;
  std::optional<json::Value> doc = json::Parse(text, &error);
  if (!doc || !doc->is_object()) return std::nullopt;
  const json::Value* plugin = doc->Find("plugin");
  const json::Value* tier = doc->Find("tier");
  const json::Value* versions = doc->Find("versions");
  if (plugin == nullptr || !plugin->is_object() || tier == nullptr || !tier->is_number()) {
    return std::nullopt;
  }
  Report r;
  r.plugin = Text(*plugin, "name");
  r.file = Text(*plugin, "file");
  if (r.plugin.empty()) return std::nullopt;
  r.tier = static_cast<int64_t>(tier->number());
  r.tier_name = Text(*doc, "tier_name");
  r.date = Text(*doc, "date");
  if (versions != nullptr && versions->is_object()) {
    r.ray = Text(*versions, "ray");
    r.rayaccel = Text(*versions, "rayaccel");
  }
  if (const json::Value* checks = doc->Find("checks"); checks != nullptr && checks->is_array()) {
    for (const json::Value& c : checks->array()) {
      if (c.is_object() && Text(c, "status") == "fail") r.failed.push_back(Text(c, "name"));
    }
  }
  return r;
}

}  // namespace

std::string ConformanceReportsJson(const std::string& dir) {
  std::map<std::string, Report> newest;
  std::vector<std::string> files;
  if (!dir.empty()) {
    files.push_back(dir + "/report.json");
    std::error_code ec;
    size_t folders = 0;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (++folders > kMaxFolders) break;
      if (it->is_directory(ec) && !it->is_symlink(ec)) {
        files.push_back(it->path().string() + "/report.json");
      }
    }
  }
  for (const std::string& file : files) {
    std::optional<std::string> text = ReadSmallFile(file);
    if (!text) continue;
    std::optional<Report> r = Parse(*text);
    if (!r) continue;
    const std::string name = r->plugin;
    auto it = newest.find(name);
    if (it == newest.end() || it->second.date < r->date) newest[name] = *std::move(r);
  }
  json::Writer w;
  w.BeginObject();
  w.Key("reports").BeginArray();
  for (const auto& [name, r] : newest) {
    w.BeginObject();
    w.Key("plugin").String(r.plugin);
    w.Key("file").String(r.file);
    w.Key("tier").Int(r.tier);
    w.Key("tier_name").String(r.tier_name);
    w.Key("date").String(r.date);
    w.Key("ray").String(r.ray);
    w.Key("rayaccel").String(r.rayaccel);
    w.Key("failed").BeginArray();
    for (const std::string& f : r.failed) w.String(f);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.Finish();
}

}  // namespace rayaccel::web
