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

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreeLoopbackPort();

}  // namespace rayaccel::testing

#endif  // RAYACCEL_TESTS_SUPPORT_CHILD_PROCESS_H_
