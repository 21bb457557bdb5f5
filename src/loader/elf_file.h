// What the loader and the conformance suite read from a plugin's ELF file (64-bit
// little-endian, as on x86_64 and aarch64 Linux) without loading it: the symbols it exports,
// and the folders it asks the dynamic loader to search.
#ifndef RAYACCEL_LOADER_ELF_FILE_H_
#define RAYACCEL_LOADER_ELF_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rayaccel {

// Names of defined, globally visible (GLOBAL or WEAK binding, DEFAULT or PROTECTED
// visibility) symbols in .dynsym, sorted.
absl::StatusOr<std::vector<std::string>> ExportedSymbols(const std::string& path);

// The folders of the file's DT_RUNPATH and DT_RPATH entries, in order, with $ORIGIN and
// ${ORIGIN} replaced by the file's own folder. Empty when it has none.
absl::StatusOr<std::vector<std::string>> LibrarySearchPath(const std::string& path);

}  // namespace rayaccel

#endif  // RAYACCEL_LOADER_ELF_FILE_H_
