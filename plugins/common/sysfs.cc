#include "common/sysfs.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace rayaccel::plugin {

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  constexpr size_t kMax = size_t{64} * 1024;
  std::string text(kMax, '\0');
  in.read(&text[0], static_cast<std::streamsize>(kMax));
  if (in.bad()) return std::nullopt;
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

std::optional<std::string> ReadLine(const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return std::nullopt;
  std::string line = text->substr(0, text->find('\n'));
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!line.empty() && blank(line.back())) line.pop_back();
  size_t start = 0;
  while (start < line.size() && blank(line[start])) ++start;
  return line.substr(start);
}

std::optional<Properties> ReadProperties(const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text) return std::nullopt;
  return ParseProperties(*text);
}

Properties ParseProperties(const std::string& text) {
  Properties props;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    size_t space = line.find(' ');
    std::string name = line.substr(0, space);
    std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    std::optional<uint64_t> v = ParseUnsigned(value);
    if (!v) {
      props.bad.push_back(name + ": \"" + value + "\"");
      continue;
    }
    props.values[name] = *v;
  }
  return props;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint32_t> NumberedEntries(const std::string& dir) {
  std::vector<uint32_t> out;
  for (const std::string& name : Entries(dir)) {
    if (name.empty() || name.size() > 9 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    out.push_back(static_cast<uint32_t>(std::strtoul(name.c_str(), nullptr, 10)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string FormatPciBusId(uint32_t domain, uint32_t bus, uint32_t device, uint32_t function) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain & 0xFFFF, bus & 0xFF, device & 0x1F,
                function & 0x7);
  return buf;
}

std::optional<uint64_t> ParseUnsigned(std::string_view text, int base) {
  if (text.empty()) return std::nullopt;  // from_chars takes no sign, space or prefix itself
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseSigned(std::string_view text) {
  if (text.empty() || text[0] == '+') return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<uint32_t> ParseHexId(const std::string& text) {
  std::string_view t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\r')) {
    t.remove_suffix(1);
  }
  if (t.size() < 3 || t.size() > 10 || t[0] != '0' || (t[1] != 'x' && t[1] != 'X')) {
    return std::nullopt;
  }
  std::optional<uint64_t> v = ParseUnsigned(t.substr(2), 16);
  if (!v) return std::nullopt;
  return static_cast<uint32_t>(*v);
}

std::optional<PciFunction> ReadPciFunction(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return std::nullopt;
  std::string dir(resolved);
  std::string name = dir.substr(dir.rfind('/') + 1);
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  if (std::sscanf(name.c_str(), "%4x:%2x:%2x.%1x%c", &domain, &bus, &device, &function, &tail) !=
      4) {
    return std::nullopt;
  }
  std::optional<std::string> vendor = ReadLine(dir + "/vendor");
  std::optional<uint32_t> vendor_id = vendor ? ParseHexId(*vendor) : std::nullopt;
  if (!vendor_id) return std::nullopt;
  PciFunction f;
  f.bus_id = FormatPciBusId(domain, bus, device, function);
  f.vendor = *vendor_id;
  if (std::optional<std::string> d = ReadLine(dir + "/device"))
    f.device = ParseHexId(*d).value_or(0);
  if (std::optional<std::string> numa = ReadLine(dir + "/numa_node")) {
    std::optional<int64_t> n = ParseSigned(*numa);
    if (n && *n >= 0 && *n < 4096) f.numa_node = static_cast<int32_t>(*n);
  }
  return f;
}

}  // namespace rayaccel::plugin
