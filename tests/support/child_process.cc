#include "support/child_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace rayaccel::testing {

pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
            const std::string& out_file, const std::string& err_file) {
  pid_t child = fork();
  if (child == 0) {
    // A failed ASSERT returns before Stop: the child must not outlive the test (and keep
    // ctest waiting on its output).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int out = open(out_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(out, STDOUT_FILENO);
    if (!err_file.empty()) {
      int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(err, STDERR_FILENO);
    }
    std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return child;
}

bool WaitForFile(const std::string& path) {
  struct stat st {};
  for (int i = 0; i < 1000 && stat(path.c_str(), &st) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return stat(path.c_str(), &st) == 0;
}

int Stop(pid_t child) {
  kill(child, SIGTERM);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

int WaitExit(pid_t child) {
  int status = 0;
  for (int i = 0; i < 1000; ++i) {
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return -1;
}

std::vector<std::string> Lines(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace rayaccel::testing
