#include "web/request_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace rayaccel::web {
namespace {

// One part of a WHATWG IPv4 address (its "IPv4 number parser"): decimal, 0x hex or 0 octal,
// nothing after the prefix being 0. nullopt when it is not a number; saturates above 2^32.
std::optional<uint64_t> Ipv4Number(absl::string_view part) {
  if (part.empty()) return std::nullopt;
  int radix = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    radix = 16;
    part.remove_prefix(2);
  } else if (part.size() >= 2 && part[0] == '0') {
    radix = 8;
    part.remove_prefix(1);
  }
  constexpr uint64_t kTooLarge = uint64_t{1} << 33;
  uint64_t value = 0;
  for (char c : part) {
    const unsigned char u = static_cast<unsigned char>(c);
    int digit = radix;  // not a digit of any radix
    if (absl::ascii_isdigit(u)) {
      digit = u - '0';
    } else if (absl::ascii_isxdigit(u)) {
      digit = absl::ascii_tolower(u) - 'a' + 10;
    }
    if (digit >= radix) return std::nullopt;
    value =
        std::min(kTooLarge, value * static_cast<uint64_t>(radix) + static_cast<uint64_t>(digit));
  }
  return value;
}

// WHATWG's "ends in a number": such a host must be an IPv4 address or it is no host at all.
bool EndsInANumber(std::vector<absl::string_view> parts) {
  if (!parts.empty() && parts.back().empty()) {
    if (parts.size() == 1) return false;
    parts.pop_back();
  }
  absl::string_view last = parts.back();
  if (!last.empty() &&
      std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return true;
  }
  return Ipv4Number(last).has_value();
}

// The WHATWG IPv4 parser: the address, or nullopt when `host` is not one.
std::optional<uint32_t> ParseIpv4(absl::string_view host) {
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.back().empty() && parts.size() > 1) parts.pop_back();  // one trailing dot
  if (parts.size() > 4) return std::nullopt;
  std::vector<uint64_t> numbers;
  for (absl::string_view part : parts) {
    std::optional<uint64_t> n = Ipv4Number(part);
    if (!n.has_value()) return std::nullopt;
    numbers.push_back(*n);
  }
  for (size_t i = 0; i + 1 < numbers.size(); ++i) {
    if (numbers[i] > 255) return std::nullopt;
  }
  const size_t free_bytes = 5 - numbers.size();
  if (numbers.back() >= (uint64_t{1} << (8 * free_bytes))) return std::nullopt;
  uint64_t address = numbers.back();
  for (size_t i = 0; i + 1 < numbers.size(); ++i) address += numbers[i] << (8 * (3 - i));
  return static_cast<uint32_t>(address);
}

bool LoopbackIpv6(absl::string_view literal) {
  in6_addr address{};
  if (literal.find('%') != absl::string_view::npos) return false;  // no zone ids in URLs
  if (inet_pton(AF_INET6, std::string(literal).c_str(), &address) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&address)) return true;
  return IN6_IS_ADDR_V4MAPPED(&address) && address.s6_addr[12] == 127;
}

}  // namespace

bool IsLoopbackHost(absl::string_view host_header) {
  absl::string_view host = host_header;
  absl::string_view port;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    absl::string_view rest = host.substr(close + 1);
    if (!rest.empty() && !absl::ConsumePrefix(&rest, ":")) return false;
    port = rest;
    host = host.substr(1, close - 1);
    if (!std::all_of(port.begin(), port.end(), absl::ascii_isdigit)) return false;
    return LoopbackIpv6(host);
  }
  if (const size_t colon = host.find(':'); colon != absl::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
    if (!std::all_of(port.begin(), port.end(), absl::ascii_isdigit)) return false;
  }
  if (host.empty()) return false;
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (!EndsInANumber(parts)) return false;  // a domain name: DNS decides where it points
  std::optional<uint32_t> address = ParseIpv4(host);
  return address.has_value() && (*address >> 24) == 127;
}

std::string SameSiteRedirect(absl::string_view decoded_path) {
  if (decoded_path.empty() || decoded_path[0] != '/') return "/";
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(decoded_path.size());
  for (char c : decoded_path) {
    const unsigned char u = static_cast<unsigned char>(c);
    // RFC 3986 pchar and '/', less '%' (the path is decoded: a '%' in it is a literal one).
    if (absl::ascii_isalnum(u) || absl::StrContains("-._~!$&'()*+,;=:@/", c)) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xF]);
    }
  }
  // "//host" is another site (a scheme-relative URL); "/" then anything else stays here.
  if (out.size() > 1 && out[1] == '/') return "/";
  return out;
}

}  // namespace rayaccel::web
