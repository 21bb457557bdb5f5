// Does nothing: its run time is what process start-up with the CLI's libraries costs. Given a
// folder, it also loads every librayaccel-*.so in it (dlopen, as the registry does, calling
// nothing): the floor of a command that loads those plugins.
#include <dirent.h>
#include <dlfcn.h>

#include <string>

int main(int argc, char** argv) {
  if (argc < 2) return 0;
  DIR* dir = opendir(argv[1]);
  if (dir == nullptr) return 1;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind("librayaccel-", 0) != 0 || name.size() < 3 ||
        name.compare(name.size() - 3, 3, ".so") != 0) {
      continue;
    }
    if (dlopen((std::string(argv[1]) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      return 1;
    }
  }
  closedir(dir);
  return 0;
}
