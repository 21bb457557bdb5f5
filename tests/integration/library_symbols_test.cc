// librayaccel.so exports its API and nothing else (src/librayaccel.map): no internals a host's
// own code could collide with, and no spdlog or fmt, which are compiled in, not linked.
#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "registry/elf_file.h"
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

TEST(LibrarySymbols, OnlyTheApiIsExported) {
  absl::StatusOr<std::vector<std::string>> symbols = ExportedSymbols(RAYACCEL_SHARED_LIBRARY);
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  const std::vector<std::string> allowed = {"rayaccel::HealthName(",
                                            "rayaccel::LinkTypeName(",
                                            "rayaccel::PciePathName(",
                                            "rayaccel::PluginStateName(",
                                            "rayaccel::Registry::",
                                            "rayaccel::Transport::",
                                            "rayaccel::Request::",
                                            "rayaccel::CheckText(",
                                            "rayaccel::CheckLabelKey(",
                                            "rayaccel::CheckLabelValue(",
                                            "rayaccel::EscapeControl[abi:cxx11](",
                                            "rayaccel::IsRayDefinedLabelKey(",
                                            "rayaccel::IsReservedRayResource(",
                                            "rayaccel::LogEnabled(",
                                            "rayaccel::LogLine(",
                                            "rayaccel::BestLink(",
                                            "RAYACCEL_0"};
  std::vector<std::string> api;
  for (const std::string& mangled : *symbols) {
    const std::string name = Demangle(mangled);
    bool ok = false;
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
                                    "rayaccel::Request::Wait(",
                                    "rayaccel::Request::~Request()",
                                    "rayaccel::Request::Request(rayaccel::Request&&)",
                                    "rayaccel::Request::operator=(rayaccel::Request&&)"}) {
    bool found = false;
    for (const std::string& name : api) found = found || StartsWith(name, needed);
    EXPECT_TRUE(found) << "not exported: " << needed;
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
