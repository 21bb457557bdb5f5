#include "model/validate.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace rayaccel {

std::string EscapeControl(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(text[++i]));
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      unsigned char cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

absl::Status CheckText(absl::string_view text, absl::string_view what) {
  if (text.size() > kMaxStringBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", text.size(), " bytes long (limit ", kMaxStringBytes, ")"));
  }
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError(absl::StrCat(what, " is not UTF-8"));
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      return absl::InvalidArgumentError(absl::StrCat(what, " contains a control character"));
    }
  }
  return absl::OkStatus();
}

namespace {

bool IsAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63.
bool IsLabelName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (!IsAlnum(name.front()) || !IsAlnum(name.back())) return false;
  for (char c : name) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// RFC 1123 subdomain: dot-separated lower-case labels of [a-z0-9-], alnum at both ends.
bool IsDnsSubdomain(absl::string_view prefix) {
  if (prefix.empty() || prefix.size() > 253) return false;
  for (absl::string_view part : absl::StrSplit(prefix, '.')) {
    if (part.empty() || part.size() > 63) return false;
    auto ok_end = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (!ok_end(part.front()) || !ok_end(part.back())) return false;
    for (char c : part) {
      if (!ok_end(c) && c != '-') return false;
    }
  }
  return true;
}

}  // namespace

absl::Status CheckLabelKey(absl::string_view key) {
  absl::string_view name = key;
  size_t slash = key.find('/');
  if (slash != absl::string_view::npos) {
    absl::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (!IsDnsSubdomain(prefix)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label key \"", key, "\": prefix is not a DNS subdomain of <= 253"));
    }
  }
  if (!IsLabelName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label key \"", key,
        "\": name must be <= 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends"));
  }
  return absl::OkStatus();
}

absl::Status CheckLabelValue(absl::string_view value) {
  if (value.empty() || IsLabelName(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "label value \"", value,
      "\": must be empty or <= 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends"));
}

bool InVisibleDevicesFamily(absl::string_view name, absl::string_view visible_devices_env) {
  if (visible_devices_env == "ZE_AFFINITY_MASK" && name == "ONEAPI_DEVICE_SELECTOR") return true;
  size_t underscore = visible_devices_env.find('_');
  if (underscore == absl::string_view::npos || underscore == 0) return false;
  return absl::StartsWith(name, visible_devices_env.substr(0, underscore + 1));
}

std::optional<std::string> NormalizePciBusId(absl::string_view text) {
  // Already canonical (what a well-behaved plugin sends): "dddd:bb:dd.f", lower-case hex,
  // device at most 0x1f, function at most 7.
  auto lower_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  if (text.size() == 12 && text[4] == ':' && text[7] == ':' && text[10] == '.' &&
      lower_hex(text[0]) && lower_hex(text[1]) && lower_hex(text[2]) && lower_hex(text[3]) &&
      lower_hex(text[5]) && lower_hex(text[6]) && (text[8] == '0' || text[8] == '1') &&
      lower_hex(text[9]) && text[11] >= '0' && text[11] <= '7') {
    return std::string(text);
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return std::nullopt;
  std::vector<absl::string_view> dev_fn = absl::StrSplit(parts[2], '.');
  if (dev_fn.size() != 2) return std::nullopt;
  auto hex = [](absl::string_view s, size_t max_digits, uint32_t limit, uint32_t* out) {
    if (s.empty() || s.size() > max_digits) return false;
    for (char c : s) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
    }
    return absl::SimpleHexAtoi(s, out) && *out <= limit;
  };
  uint32_t domain = 0, bus = 0, device = 0, function = 0;
  if (!hex(parts[0], 8, 0xFFFF, &domain) || !hex(parts[1], 2, 0xFF, &bus) ||
      !hex(dev_fn[0], 2, 0x1F, &device) || !hex(dev_fn[1], 1, 7, &function)) {
    return std::nullopt;
  }
  // "%04x:%02x:%02x.%x", without printf: every device of every rescan passes here.
  static constexpr char kHex[] = "0123456789abcdef";
  char buf[12];
  size_t n = 0;
  for (int shift : {12, 8, 4, 0}) buf[n++] = kHex[(domain >> shift) & 0xF];
  buf[n++] = ':';
  buf[n++] = kHex[bus >> 4];
  buf[n++] = kHex[bus & 0xF];
  buf[n++] = ':';
  buf[n++] = kHex[device >> 4];
  buf[n++] = kHex[device & 0xF];
  buf[n++] = '.';
  buf[n++] = kHex[function];
  return std::string(buf, n);
}

}  // namespace rayaccel
