#include "web/request_guard.h"

#include <initializer_list>
#include <string>

#include "gtest/gtest.h"

namespace rayaccel::web {
namespace {

TEST(RequestGuard, LoopbackNamesABrowserResolvesItselfAreLoopback) {
  for (const char* host :
       {"localhost", "LocalHost:8080", "localhost:", "127.0.0.1", "127.0.0.1:9464", "127.1",
        "127.0.0.1.", "2130706433", "0x7f.1", "0x7F000001", "0177.0.0.1", "127.255.255.254:1",
        "127.0x0.0.1", "[::1]", "[::1]:9464", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]:80"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
}

// A name DNS answers can be rebound to 127.0.0.1 by whoever owns it, however it begins.
TEST(RequestGuard, NamesDnsAnswersAndMalformedHostsAreNot) {
  for (const char* host : {"127.aa0.1:8080",
                           "127.0.0amplo80",
                           "127.0.token=s3cret",
                           "127.attacker.example",
                           "127.0.0.1.nip.io",
                           "127.0.0.1.evil.example:80",
                           "",
                           ":80",
                           "evil.example",
                           "localhost.evil.example",
                           "evil.localhost.example",
                           "localhost.",
                           "127.0.0.1:80x",
                           "127.0.0.1:80:80",
                           "127.0.0.1 ",
                           " 127.0.0.1",
                           "127.0.0.256",
                           "127.0.0.1.1",
                           "1.127.0.0.1",
                           "128.0.0.1",
                           "0x80.0.0.1",
                           "0.0.0.0",
                           "10.0.0.1",
                           "4294967296",
                           "127.0.0.09",
                           "[::1",
                           "[::1]x",
                           "[::1]:8o",
                           "[::2]",
                           "[fe80::1%25lo]",
                           "[::ffff:10.0.0.1]",
                           "::1",
                           "%31%32%37.0.0.1",
                           "127.0.0.1\t",
                           "127.0.0.1\n.evil"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << "'" << host << "'";
  }
}

// What a browser makes of a Location: WHATWG drops tabs and newlines, trims C0 controls and
// spaces, and reads '\' as '/' in http URLs. True when the result stays on this server.
bool BrowserStaysHere(std::string location) {
  std::string cleaned;
  for (char c : location) {
    if (c != '\t' && c != '\n' && c != '\r') cleaned.push_back(c == '\\' ? '/' : c);
  }
  while (!cleaned.empty() && static_cast<unsigned char>(cleaned.front()) <= 0x20) {
    cleaned.erase(0, 1);
  }
  return !cleaned.empty() && cleaned[0] == '/' && (cleaned.size() == 1 || cleaned[1] != '/');
}

TEST(RequestGuard, TheRedirectAfterATokenNeverLeavesTheSite) {
  for (const std::string& path : std::initializer_list<std::string>{
           "/\t/evil.example", "//evil.example/x", "/\\evil.example", "/\n/evil.example",
           "/\r\n/evil.example", "/\t\\evil.example", "\\\\evil.example", "evil.example", "",
           std::string("/\0/evil.example", 16), "/ /evil.example", "/\x7f/evil", "\t//evil"}) {
    const std::string location = SameSiteRedirect(path);
    EXPECT_TRUE(BrowserStaysHere(location)) << "'" << path << "' -> '" << location << "'";
    for (char c : location) {
      EXPECT_TRUE(c > 0x20 && c < 0x7f && c != '\\') << "'" << path << "' -> '" << location << "'";
    }
  }
}

TEST(RequestGuard, TheRedirectKeepsThisServersPathEncoded) {
  EXPECT_EQ(SameSiteRedirect("/api/snapshot"), "/api/snapshot");
  EXPECT_EQ(SameSiteRedirect("/"), "/");
  EXPECT_EQ(SameSiteRedirect("/node/GPU-1:2@x"), "/node/GPU-1:2@x");
  EXPECT_EQ(SameSiteRedirect("/\t/evil.example"), "/%09/evil.example");
  EXPECT_EQ(SameSiteRedirect("/a b"), "/a%20b");
  EXPECT_EQ(SameSiteRedirect("/100%"), "/100%25");
  EXPECT_EQ(SameSiteRedirect("/\xc3\xa9"), "/%C3%A9");
  EXPECT_EQ(SameSiteRedirect("//evil.example"), "/");
  EXPECT_EQ(SameSiteRedirect("evil.example"), "/");
}

}  // namespace
}  // namespace rayaccel::web
