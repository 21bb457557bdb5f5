// rayaccel-hwloc-check: loads the hwloc XML on stdin as librayaccel would, so that XML from
// outside which makes hwloc assert (and so abort) aborts this program instead of the process
// that asked (host_topology.cc). Writes 'O' (loaded) or 'E' (hwloc refused it) to fd 3; what
// hwloc says goes to stderr. Not a command for people: librayaccel starts it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "topology/host_topology.h"

int main(int argc, char** /*argv*/) {
  if (argc != 1 || fcntl(3, F_GETFD) < 0) {
    std::fprintf(stderr,
                 "rayaccel-hwloc-check reads hwloc XML on stdin and answers on fd 3; librayaccel "
                 "starts it\n");
    return 2;
  }
  constexpr size_t kMaxBytes = size_t{32} << 20;  // as host_topology.cc reads
  std::string xml;
  char buf[65536];
  for (;;) {
    ssize_t n = read(0, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    xml.append(buf, static_cast<size_t>(n));
    if (xml.size() > kMaxBytes) return 2;
  }
  char verdict = rayaccel::host_topology_internal::LoadXmlHere(xml).ok() ? 'O' : 'E';
  ssize_t written = write(3, &verdict, 1);
  return written == 1 && verdict == 'O' ? 0 : 1;
}
