// Where rayaccel's helper programs (rayaccel-plugin-host, rayaccel-hwloc-check) are: installed
// with librayaccel, whichever process loaded it (the rayaccel command, a raylet, Python).
#ifndef RAYACCEL_UTIL_INSTALLED_PROGRAM_H_
#define RAYACCEL_UTIL_INSTALLED_PROGRAM_H_

#include <string>

namespace rayaccel {

// The absolute path of program `name`: next to this process's executable when there is one of
// that name there (the build tree, the installed bin/), else in ../bin of the folder holding
// the library this code is part of (../bin of lib/ for a raylet or Python). Empty when neither
// holds it.
std::string InstalledProgram(const std::string& name);

}  // namespace rayaccel

#endif  // RAYACCEL_UTIL_INSTALLED_PROGRAM_H_
