// librayaccel_cxx.so exports its API and nothing else (src/librayaccel.map): no internals a
// host's own code could collide with, and no spdlog or fmt, which are compiled in, not linked.
// librayaccel.so, what any host links, exports host.h's C functions alone (src/host/host.map)
// and needs only the C and C++ runtimes and hwloc: Abseil, spdlog and fmt are inside it.
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "loader/elf_file.h"
#include "support/test_support.h"

namespace rayaccel {
namespace {

std::string Demangle(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out != nullptr ? std::string(out.get()) : name;
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

void ExpectEveryHostFunctionIn(const std::vector<std::string>& symbols);

TEST(LibrarySymbols, OnlyTheApiIsExported) {
  absl::StatusOr<std::vector<std::string>> symbols = ExportedSymbols(RAYACCEL_SHARED_LIBRARY);
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  const std::vector<std::string> allowed = {"rayaccel::HealthName(",
                                            "rayaccel::LinkTypeName(",
                                            "rayaccel::PciePathName(",
                                            "rayaccel::PluginStateName(",
                                            "rayaccel::TransferPathName(",
                                            "rayaccel::TransferPathName(",
                                            "rayaccel::Registry::",
                                            "rayaccel::Transport::",
                                            "rayaccel::Request::",
                                            "rayaccel::BatchRequest::",
                                            "rayaccel::CheckText(",
                                            "rayaccel::CheckNodeId(",
                                            "rayaccel::CheckAgentSession(",
                                            "rayaccel::CheckNodeResource(",
                                            "rayaccel::CheckNodeLabel(",
                                            "rayaccel::PublicationOrder::",
                                            "rayaccel::CheckLabelKey(",
                                            "rayaccel::CheckLabelValue(",
                                            "rayaccel::EscapeControl[abi:cxx11](",
                                            "rayaccel::IsRayDefinedLabelKey(",
                                            "rayaccel::IsReservedRayResource(",
                                            "rayaccel::LogEnabled(",
                                            "rayaccel::LogLine(",
                                            "rayaccel::BestLink(",
                                            "rayaccel::PrometheusWriter::",
                                            "RAYACCEL_0"};
  std::vector<std::string> api;
  for (const std::string& mangled : *symbols) {
    const std::string name = Demangle(mangled);
    // host.h's C functions, unmangled.
    bool ok = StartsWith(name, "rayaccel_") && name.find("::") == std::string::npos;
    for (const std::string& prefix : allowed) ok = ok || StartsWith(name, prefix);
    EXPECT_TRUE(ok) << "exported, but not API: " << name;
    EXPECT_FALSE(StartsWith(name, "rayaccel::Registry::Impl::")) << name;
    EXPECT_FALSE(StartsWith(name, "rayaccel::Transport::Impl::")) << name;
    api.push_back(name);
  }
  // Every public member and function of registry.h and transport.h that is not inline.
  for (const std::string& needed : {"rayaccel::HealthName(",
                                    "rayaccel::LinkTypeName(",
                                    "rayaccel::PciePathName(",
                                    "rayaccel::PluginStateName(",
                                    "rayaccel::Registry::Create(rayaccel::RegistryOptions)",
                                    "rayaccel::Registry::~Registry()",
                                    "rayaccel::Registry::snapshot() const",
                                    "rayaccel::Registry::Rescan()",
                                    "rayaccel::Registry::WaitForNewer(",
                                    "rayaccel::Registry::Subscribe(",
                                    "rayaccel::Registry::Subscription::~Subscription()",
                                    "rayaccel::Registry::stats() const",
                                    "rayaccel::Registry::Shutdown()",
                                    "rayaccel::Registry::ValidateQuantity(",
                                    "rayaccel::Registry::PreferredAllocation(",
                                    "rayaccel::Registry::PrepareAllocation(",
                                    "rayaccel::Registry::PrepareAllocationAt",
                                    "rayaccel::Registry::Capture() const",
                                    "rayaccel::Transport::Open(",
                                    "rayaccel::Transport::~Transport()",
                                    "rayaccel::Transport::Register(",
                                    "rayaccel::Transport::Allocate(",
                                    "rayaccel::Transport::Deregister(",
                                    "rayaccel::Transport::Describe",
                                    "rayaccel::Transport::Inspect(",
                                    "rayaccel::Transport::Connect(",
                                    "rayaccel::Transport::Close(",
                                    "rayaccel::Transport::Read(",
                                    "rayaccel::Transport::Write(",
                                    "rayaccel::Transport::Notify(",
                                    "rayaccel::Transport::Flush(",
                                    "rayaccel::Transport::TakeNotifications",
                                    "rayaccel::Transport::PrepareBatch(",
                                    "rayaccel::Transport::Post(",
                                    "rayaccel::Transport::ReadBatch(",
                                    "rayaccel::Transport::WriteBatch(",
                                    "rayaccel::Transport::Stats()",
                                    "rayaccel::BatchRequest::Wait(",
                                    "rayaccel::BatchRequest::done()",
                                    "rayaccel::BatchRequest::failed()",
                                    "rayaccel::Request::Wait(",
                                    "rayaccel::Request::~Request()",
                                    "rayaccel::Request::Request(rayaccel::Request&&)",
                                    "rayaccel::Request::operator=(rayaccel::Request&&)"}) {
    bool found = false;
    for (const std::string& name : api) found = found || StartsWith(name, needed);
    EXPECT_TRUE(found) << "not exported: " << needed;
  }
}

// Every function rayaccel/host.h declares is exported by both libraries, under its C name.
TEST(LibrarySymbols, EveryHostFunctionIsExported) {
  for (const char* library : {RAYACCEL_HOST_LIBRARY, RAYACCEL_SHARED_LIBRARY}) {
    SCOPED_TRACE(library);
    absl::StatusOr<std::vector<std::string>> symbols = ExportedSymbols(library);
    ASSERT_TRUE(symbols.ok()) << symbols.status();
    ExpectEveryHostFunctionIn(*symbols);
  }
}

TEST(LibrarySymbols, TheHostLibraryExportsHostHAlone) {
  absl::StatusOr<std::vector<std::string>> symbols = ExportedSymbols(RAYACCEL_HOST_LIBRARY);
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  EXPECT_GE(symbols->size(), 25u);
  for (const std::string& name : *symbols) {
    EXPECT_TRUE(name == "RAYACCEL_0" ||
                (StartsWith(name, "rayaccel_") && name.find_first_of(":<(") == std::string::npos))
        << "exported by librayaccel.so, not a function of host.h: " << Demangle(name);
  }
}

// What a raylet built with its own Abseil, spdlog and fmt loads: nothing of theirs in the
// NEEDED list, nothing of theirs left to bind at run time.
TEST(LibrarySymbols, TheHostLibraryNeedsOnlyTheRuntimesAndHwloc) {
  if (RAYACCEL_HOST_LIBRARY_CARRIES_ABSEIL == 0) {
    GTEST_SKIP() << "configured without Abseil inside (RAYACCEL_HOST_LIBRARY_SELF_CONTAINED off, "
                    "or Debian's Abseil source could not be fetched): it links the shared one";
  }
  testing::CommandResult r =
      testing::Run({"/usr/bin/readelf", "--dynamic", "--wide", RAYACCEL_HOST_LIBRARY});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The runtimes, hwloc, and a sanitizer's runtime in a sanitizer build.
  const std::vector<std::string> allowed = {
      "libc.so.6",     "libm.so.6",      "libstdc++.so.6",
      "libgcc_s.so.1", "libhwloc.so.15", "ld-linux-x86-64.so.2",
      "libasan.so.8",  "libubsan.so.1",  "libtsan.so.2"};
  int needed = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("(NEEDED)") == std::string::npos) continue;
    const size_t open = line.find('['), close = line.find(']');
    ASSERT_NE(open, std::string::npos) << line;
    const std::string library = line.substr(open + 1, close - open - 1);
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), library), allowed.end())
        << "librayaccel.so needs " << library;
    ++needed;
  }
  EXPECT_GE(needed, 3) << r.out;
  testing::CommandResult undefined = testing::Run(
      {"/usr/bin/nm", "--dynamic", "--undefined-only", "--demangle", RAYACCEL_HOST_LIBRARY});
  ASSERT_EQ(undefined.exit_code, 0) << undefined.err;
  std::istringstream symbols(undefined.out);
  for (std::string line; std::getline(symbols, line);) {
    // A weak reference ("w": a thread_local's initializer Abseil's headers may name) binds to
    // nothing when absent, and to nothing of a raylet's Abseil, whose namespace differs.
    if (line.find(" U ") == std::string::npos) continue;
    for (const char* foreign : {"absl::", "spdlog::", "fmt::"}) {
      EXPECT_EQ(line.find(foreign), std::string::npos) << "left to bind at run time: " << line;
    }
  }
}

void ExpectEveryHostFunctionIn(const std::vector<std::string>& symbols) {
  std::ifstream in(RAYACCEL_HOST_HEADER);
  std::stringstream text;
  text << in.rdbuf();
  const std::string header = text.str();
  std::vector<std::string> declared;
  for (size_t at = header.find("RAYACCEL_HOST_EXPORT "); at != std::string::npos;
       at = header.find("RAYACCEL_HOST_EXPORT ", at + 1)) {
    const size_t open = header.find('(', at);
    size_t start = header.rfind("rayaccel_", open);
    if (open == std::string::npos || start == std::string::npos || start < at) continue;
    declared.push_back(header.substr(start, open - start));
  }
  EXPECT_GE(declared.size(), 25u) << "host.h's declarations were not found";
  for (const std::string& name : declared) {
    EXPECT_NE(std::find(symbols.begin(), symbols.end(), name), symbols.end())
        << "declared in host.h, not exported: " << name;
  }
}

TEST(LibrarySymbols, SpdlogAndFmtAreInsideNotLinked) {
  testing::CommandResult r =
      testing::Run({"/usr/bin/readelf", "--dynamic", "--wide", RAYACCEL_SHARED_LIBRARY});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("libabsl_status"), std::string::npos) << r.out;  // Abseil: in the API
  EXPECT_EQ(r.out.find("libspdlog"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("libfmt"), std::string::npos) << r.out;
  testing::CommandResult undefined = testing::Run(
      {"/usr/bin/nm", "--dynamic", "--undefined-only", "--demangle", RAYACCEL_SHARED_LIBRARY});
  ASSERT_EQ(undefined.exit_code, 0) << undefined.err;
  EXPECT_EQ(undefined.out.find("spdlog::"), std::string::npos) << undefined.out;
  EXPECT_EQ(undefined.out.find("fmt::"), std::string::npos) << undefined.out;
}

}  // namespace
}  // namespace rayaccel
