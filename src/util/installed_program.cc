#include "util/installed_program.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

namespace rayaccel {
namespace {

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string InstalledProgram(const std::string& name) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string candidate = Dirname(exe) + "/" + name;
    if (IsExecutableFile(candidate)) return candidate;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&InstalledProgram), &info) != 0 && info.dli_fname != nullptr) {
    char real[PATH_MAX];
    if (realpath(info.dli_fname, real) != nullptr) {
      std::string candidate = Dirname(Dirname(real)) + "/bin/" + name;
      if (IsExecutableFile(candidate)) return candidate;
    }
  }
  return "";
}

}  // namespace rayaccel
