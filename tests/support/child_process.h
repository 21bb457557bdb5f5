// Running rayaccel's programs as real child processes in tests: start, wait for what they
// create, stop with SIGTERM, read what they printed.
#ifndef RAYACCEL_TESTS_SUPPORT_CHILD_PROCESS_H_
#define RAYACCEL_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace rayaccel::testing {

// Starts `binary` with `args`, its stdout appended to `out_file` and its stderr to
// `err_file` (empty: inherited); returns the child's pid. The child is killed if the test
// process dies first.
pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
            const std::string& out_file, const std::string& err_file = "");

// Waits up to 10 s for `path` to exist.
bool WaitForFile(const std::string& path);

// Stops a child with SIGTERM; returns its exit code (-1 when it did not exit normally).
int Stop(pid_t child);

// Waits for a child to exit by itself (up to 10 s, then kills it); returns its exit code.
int WaitExit(pid_t child);

// The lines of a text file; none when it does not exist.
std::vector<std::string> Lines(const std::string& file);

// SIGSTOP, then waits until the kernel shows the process stopped (the signal is delivered
// asynchronously: a process still running on another core would answer one more request).
bool StopAndWait(pid_t pid);

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreeLoopbackPort();

// A child whose stdin and stdout are pipes to the test: one command a line, one answer a line.
class PipedChild {
 public:
  // Starts `binary` with `args` (not counting argv[0]); pid() <= 0 when it could not start.
  PipedChild(const std::string& binary, const std::vector<std::string>& args);
  // Closes its stdin, continues it if stopped, and waits up to 2 s before killing it.
  ~PipedChild();
  PipedChild(const PipedChild&) = delete;
  PipedChild& operator=(const PipedChild&) = delete;

  pid_t pid() const { return pid_; }
  bool Alive() const;
  // Sends `command` and returns the next line it answers (lines starting with '[', which UCX
  // logs to stdout, are skipped); what it has after 20 s or at end of output.
  std::string Ask(const std::string& command);

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

}  // namespace rayaccel::testing

#endif  // RAYACCEL_TESTS_SUPPORT_CHILD_PROCESS_H_
