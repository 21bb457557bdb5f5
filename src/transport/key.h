// The transport's shared key: where it comes from, and the checks a key file must pass.
#ifndef RAYACCEL_TRANSPORT_KEY_H_
#define RAYACCEL_TRANSPORT_KEY_H_

#include <string>

#include "absl/status/statusor.h"

namespace rayaccel::transport {

// The environment variable naming a key file, read when TransportOptions names none.
inline constexpr char kKeyFileVariable[] = "RAYACCEL_TRANSPORT_KEY_FILE";

// The bytes of a key file: a regular file of 16 to 4096 bytes, owned by this user or root,
// that neither other users nor the group can write and other users cannot read (as ssh asks
// of a private key). Symbolic links are followed only to such a file.
absl::StatusOr<std::string> ReadKeyFile(const std::string& path);

// This host's default key for this user: /tmp/rayaccel-<uid>/transport.key (root:
// /run/rayaccel-transport/transport.key), 32 random bytes created on first use in a folder only the
// user can enter. Processes of one user on one host share it; another host cannot know it,
// so a peer on another host is refused until the operator distributes a key.
absl::StatusOr<std::string> DefaultKey();
std::string DefaultKeyPath();

// The key to use: `key` when it is set, else the file `key_file`, else the file named by
// RAYACCEL_TRANSPORT_KEY_FILE, else DefaultKey().
absl::StatusOr<std::string> ResolveKey(const std::string& key, const std::string& key_file);

}  // namespace rayaccel::transport

#endif  // RAYACCEL_TRANSPORT_KEY_H_
