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

bool StopAndWait(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return false;
  for (int i = 0; i < 500; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

PipedChild::PipedChild(const std::string& binary, const std::vector<std::string>& args) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return;
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return;
  }
  std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  to_ = in_pipe[1];
  from_ = out_pipe[0];
}

PipedChild::~PipedChild() {
  if (to_ >= 0) close(to_);
  if (pid_ > 0) {
    kill(pid_, SIGCONT);
    int status = 0;
    for (int i = 0; i < 100 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (from_ >= 0) close(from_);
}

bool PipedChild::Alive() const {
  return pid_ > 0 && kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0;
}

std::string PipedChild::Ask(const std::string& command) {
  std::string line = command + "\n";
  if (write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
  std::string answer;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    char c;
    if (read(from_, &c, 1) <= 0) break;
    if (c != '\n') {
      answer.push_back(c);
    } else if (!answer.empty() && answer[0] == '[') {
      answer.clear();  // a line UCX logged to stdout
    } else {
      return answer;
    }
  }
  return answer;
}

}  // namespace rayaccel::testing
