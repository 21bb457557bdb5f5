// The dynamic symbols a shared object defines and exports, read from its ELF file (64-bit
// little-endian, as on x86_64 and aarch64 Linux). Used by the conformance suite to check that
// a plugin exports its entry point and nothing else.
#ifndef RAYACCEL_CONFORMANCE_ELF_SYMBOLS_H_
#define RAYACCEL_CONFORMANCE_ELF_SYMBOLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rayaccel::conformance {

// Names of defined, globally visible (GLOBAL or WEAK binding, DEFAULT or PROTECTED
// visibility) symbols in .dynsym, sorted.
absl::StatusOr<std::vector<std::string>> ExportedSymbols(const std::string& path);

}  // namespace rayaccel::conformance

#endif  // RAYACCEL_CONFORMANCE_ELF_SYMBOLS_H_
