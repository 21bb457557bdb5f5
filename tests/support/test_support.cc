#include "support/test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

extern char** environ;

namespace rayaccel::testing {

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old, had_ = true;
  setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

CommandResult Run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string key = entry.substr(0, entry.find('='));
    if (env.count(key) == 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  // Close-on-exec: a child another thread starts meanwhile must not inherit these, or this
  // read would wait for that child's end too (dup2 below clears the flag on 1 and 2).
  int out_pipe[2], err_pipe[2];
  EXPECT_EQ(pipe2(out_pipe, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(err_pipe, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  pid_t pid = 0;
  CommandResult result;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string MakeTempDir(const std::string& name) {
  std::string base = ::testing::TempDir();
  while (!base.empty() && base.back() == '/') base.pop_back();
  base += "/rayaccel-" + name + "-XXXXXX";
  std::vector<char> path(base.begin(), base.end());
  path.push_back('\0');
  char* made = mkdtemp(path.data());
  EXPECT_NE(made, nullptr) << std::strerror(errno);
  chmod(made, 0755);
  return made;
}

void CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  ASSERT_TRUE(in) << from;
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  out.close();
  chmod(to.c_str(), 0755);
}

bool Eventually(const std::function<bool()>& condition, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

void ChangeSimSpec(const std::string& path) {
  static std::atomic<int> changes{0};
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string value = "change-" + std::to_string(++changes);
  const size_t uuid = text.find("\"uuid\"");
  ASSERT_NE(uuid, std::string::npos) << path << ": no device";
  const size_t begin = text.rfind('{', uuid), end = text.find('}', uuid);
  const std::string key = "\"firmware_version\": \"";
  const size_t at = text.find(key, begin);
  if (at != std::string::npos && at < end) {
    const size_t start = at + key.size();
    text.replace(start, text.find('"', start) - start, value);
  } else {
    text.insert(uuid, key + value + "\", ");
  }
  // A new file under the name, so that no size-and-time check can miss the edit.
  std::ofstream(path + ".new") << text;
  ASSERT_EQ(rename((path + ".new").c_str(), path.c_str()), 0);
}

std::string TestPlugin(const std::string& name) {
  return std::string(RAYACCEL_TEST_PLUGIN_DIR) + "/librayaccel-" + name + ".so";
}

bool SendRawBytes(const std::string& path, const std::string& bytes) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  bool sent = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
              write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  close(fd);
  return sent;
}

std::vector<std::string> GarbageForGrpc() {
  using namespace std::string_literals;  // NOLINT: keeps the embedded NULs
  return {"GET / HTTP/1.1\r\n\r\n"s, "\x00\x00\xff\xff\xff\x04\x00garbage"s,
          "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff"s};
}

std::string SimPlugin() { return std::string(RAYACCEL_PLUGIN_DIR) + "/librayaccel-sim.so"; }

std::string Example(const std::string& name) {
  return std::string(RAYACCEL_EXAMPLES_DIR) + "/" + name;
}

std::string Fixture(const std::string& relative) {
  return std::string(RAYACCEL_FIXTURES_DIR) + "/" + relative;
}

const PluginStatus& StatusOf(const NodeSnapshot& snapshot, const std::string& name) {
  for (const PluginStatus& p : snapshot.plugins) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no plugin status for " << name;
  static const PluginStatus kNone;
  return kNone;
}

}  // namespace rayaccel::testing
