// A check's body in a forked child of its own: its verdict comes back over a pipe, or the crash,
// hang, exit, stray stdout or left-behind process that took its place is the verdict.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "conformance/check_support.h"

namespace rayaccel::conformance {

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

namespace {

std::string Tail(const std::string& text, size_t max) {
  std::string t = text.size() > max ? "..." + text.substr(text.size() - max) : text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// In a check's child: the result pipe, for Progress().
int g_progress_fd = -1;

}  // namespace

void Progress() {
  if (g_progress_fd >= 0) WriteAll(g_progress_fd, "+");
}

std::function<void()> g_after_verdict;

Outcome Isolated(const Options& options, bool quiet_stdout, const std::function<Outcome()>& body) {
  // Close-on-exec, so that a helper the plugin starts cannot hold the pipes open.
  int result_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {result_pipe, out_pipe, err_pipe}) {
      for (int i = 0; i < 2; ++i) {
        if (p[i] >= 0) close(p[i]);
      }
    }
  };
  if (pipe2(result_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    close_all();
    return Outcome::Fail(absl::StrCat("suite: pipe: ", std::strerror(errno)));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close_all();
    return Outcome::Fail(absl::StrCat("suite: fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);  // a group of its own: a plugin signalling its group reaches only the check
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(result_pipe[0]);
    close(out_pipe[0]);
    close(err_pipe[0]);
    g_progress_fd = result_pipe[1];
    Outcome o;
    try {
      o = body();
    } catch (const std::exception& e) {
      o = Outcome::Fail(std::string("a C++ exception escaped a hook: ") + e.what());
    } catch (...) {
      o = Outcome::Fail("a C++ exception escaped a hook");
    }
    std::fflush(stdout);
    const char* tag = o.status == Outcome::Status::kPass   ? "P"
                      : o.status == Outcome::Status::kSkip ? "S"
                      : o.status == Outcome::Status::kWarn ? "W"
                                                           : "F";
    std::string figures;
    for (const Figure& f : o.figures) absl::StrAppend(&figures, "\x1e", f.name, "=", f.value);
    WriteAll(result_pipe[1], tag + o.message + figures);
    if (g_after_verdict) {
      try {
        g_after_verdict();
      } catch (...) {
      }
    }
    std::fflush(stdout);
    _exit(0);
  }
  setpgid(pid, pid);
  close(result_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  std::string result, out, err;
  pollfd fds[3] = {{result_pipe[0], POLLIN, 0}, {out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[3] = {&result, &out, &err};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_seconds);
  int open_fds = 3;
  bool timed_out = false;
  bool held_open = false;  // the check ended, but a process it left keeps its output open
  std::optional<std::chrono::steady_clock::time_point> exited_at;
  while (open_fds > 0) {
    auto now = std::chrono::steady_clock::now();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    // Notice the check's own exit (without reaping it, so its group id stays ours): output
    // still open 200 ms later belongs to something it left running.
    siginfo_t info{};
    if (!exited_at &&
        waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      exited_at = now;
    }
    if (exited_at && now - *exited_at > std::chrono::milliseconds(200)) {
      held_open = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (poll(fds, 3, static_cast<int>(std::min<int64_t>(left.count(), 50))) < 0 && errno != EINTR) {
      timed_out = true;  // cannot watch the child any more: treat as hung
      break;
    }
    for (int i = 0; i < 3; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0 && i == 0 && result.find_first_not_of('+') == std::string::npos && buf[0] == '+') {
        // Progress from a cycling check: the next cycle gets a whole timeout of its own.
        deadline = now + std::chrono::seconds(options.timeout_seconds);
      }
      if (n > 0) {
        if (sinks[i]->size() < (1 << 20)) sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (timed_out) kill(-pid, SIGKILL);
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  // The child closed its pipes; give it until the deadline to exit, then kill it.
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(2000);
  }
  // Helpers the plugin started outlive nothing: the rest of the check's group goes too. (The
  // group outlives its leader while members remain, so this is safe after the wait.)
  kill(-pid, SIGKILL);
  result.erase(0, std::min(result.size(), result.find_first_not_of('+')));  // progress marks
  // A verdict was written before the plugin's shutdown: a crash or hang after it is shutdown's.
  const bool verdict = !result.empty();
  if (timed_out && !verdict) {
    return Outcome::Fail(
        absl::StrCat("hung: no answer within ", options.timeout_seconds, " s (killed)"));
  }
  if (held_open) {
    return Outcome::Fail(
        "left a process running that holds the check's stdout or stderr open (killed): a "
        "plugin must not leave helpers or daemons behind");
  }
  if (WIFSIGNALED(status) && !verdict) {
    int sig = WTERMSIG(status);
    std::string why =
        sig == SIGKILL
            ? "was killed with SIGKILL, not by the suite (the kernel's out-of-memory killer "
              "sends this)"
            : absl::StrCat("crashed with signal ", sig, " (", strsignal(sig), ")");
    if (err.find("terminate called") != std::string::npos) {
      why += ": a C++ exception escaped a hook";
    }
    if (!err.empty()) why += "; stderr: " + Tail(err, 300);
    return Outcome::Fail(why);
  }
  if (result.empty()) {
    return Outcome::Fail(absl::StrCat("the plugin ended the process (exit status ",
                                      WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")"));
  }
  if (quiet_stdout && !out.empty()) {
    return Outcome::Fail(absl::StrCat("wrote ", out.size(), " bytes to stdout (\"", Tail(out, 60),
                                      "\"); plugins must never write there"));
  }
  Outcome o;
  o.status = result[0] == 'P'   ? Outcome::Status::kPass
             : result[0] == 'S' ? Outcome::Status::kSkip
             : result[0] == 'W' ? Outcome::Status::kWarn
                                : Outcome::Status::kFail;
  std::vector<std::string> parts = absl::StrSplit(result.substr(1), '\x1e');
  o.message = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    Figure f;
    f.name = parts[i].substr(0, eq);
    if (eq != std::string::npos && absl::SimpleAtod(parts[i].substr(eq + 1), &f.value)) {
      o.figures.push_back(f);
    }
  }
  return o;
}

}  // namespace rayaccel::conformance
