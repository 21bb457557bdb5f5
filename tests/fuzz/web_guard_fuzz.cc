// The web front's pre-routing decisions (web/request_guard.h) against oracles of their own: a
// Host it takes for loopback must be "localhost" or a literal the C library also reads as a
// loopback address; a redirect must stay on this server after a browser's URL clean-up and
// decode back to the path it was made from.
#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "web/request_guard.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

// The host alone, its port removed, for the oracle (the guard's own split is under test).
std::string HostPart(const std::string& header) {
  if (!header.empty() && header[0] == '[') return header.substr(1, header.find(']') - 1);
  return header.substr(0, header.find(':'));
}

bool OracleLoopback(const std::string& header) {
  std::string host = HostPart(header);
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  if (!header.empty() && header[0] == '[') {
    in6_addr a6{};
    return inet_pton(AF_INET6, host.c_str(), &a6) == 1 &&
           (IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127));
  }
  if (absl::EndsWith(host, ".")) host.pop_back();
  for (char c : host) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'x' && c != 'X') {
      return false;
    }
  }
  // WHATWG reads a bare "0x" part as 0; the C library refuses it.
  std::vector<std::string> parts = absl::StrSplit(host, '.');
  for (std::string& part : parts) {
    if (absl::EqualsIgnoreCase(part, "0x")) part = "0";
  }
  in_addr a4{};
  return inet_aton(absl::StrJoin(parts, ".").c_str(), &a4) != 0 && (ntohl(a4.s_addr) >> 24) == 127;
}

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && absl::ascii_isxdigit(s[i + 1]) &&
        absl::ascii_isxdigit(s[i + 2])) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (rayaccel::web::IsLoopbackHost(input)) Check(OracleLoopback(input));

  const std::string location = rayaccel::web::SameSiteRedirect(input);
  Check(!location.empty() && location[0] == '/');
  Check(location.size() == 1 || location[1] != '/');
  for (char c : location) Check(c > 0x20 && c < 0x7f && c != '\\');
  if (location != "/") Check(PercentDecode(location) == input);
  return 0;
}
