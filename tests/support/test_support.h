// Helpers for integration tests: run a command, make temporary folders, load plugins.
#ifndef RAYACCEL_TESTS_SUPPORT_TEST_SUPPORT_H_
#define RAYACCEL_TESTS_SUPPORT_TEST_SUPPORT_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rayaccel/registry.h"

namespace rayaccel::testing {

// Sets an environment variable for the life of the object (UCX reads its variables per
// endpoint), then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `argv` (no shell) with `env` added to this process's environment, and waits.
CommandResult Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env = {});

// A fresh folder under the test temp dir, mode 0755.
std::string MakeTempDir(const std::string& name);

// The names in a folder, sorted, without "." and "..".
std::vector<std::string> ListDir(const std::string& dir);

// Copies a file, keeping nothing but the bytes (mode 0755).
void CopyFile(const std::string& from, const std::string& to);

// Edits a sim spec file so that the next scan sees a change (a rescan that finds nothing new
// keeps the snapshot's generation): the first device's firmware version becomes "change-N",
// N counting the calls.
void ChangeSimSpec(const std::string& path);

// Waits for a condition that another process or thread makes true, polling every 10 ms;
// false after `limit`.
bool Eventually(const std::function<bool()>& condition,
                std::chrono::seconds limit = std::chrono::seconds(20));

// Path of a test plugin built from tests/plugins/test_plugin.c, e.g. "duplicate-id".
std::string TestPlugin(const std::string& name);
// Path of the in-tree sim plugin.
std::string SimPlugin();
std::string Example(const std::string& name);
// tests/fixtures/<relative>
std::string Fixture(const std::string& relative);

// Connects to the Unix socket at `path`, writes `bytes` as they are (a hostile client) and
// closes; false when it cannot connect or write.
bool SendRawBytes(const std::string& path, const std::string& bytes);

// What a hostile or confused client sends a gRPC server: HTTP/1, bytes that are no protocol,
// and a valid HTTP/2 preface followed by garbage.
std::vector<std::string> GarbageForGrpc();

// The status of plugin `name` in `snapshot`; fails the test when absent.
const PluginStatus& StatusOf(const NodeSnapshot& snapshot, const std::string& name);

}  // namespace rayaccel::testing

#endif  // RAYACCEL_TESTS_SUPPORT_TEST_SUPPORT_H_
