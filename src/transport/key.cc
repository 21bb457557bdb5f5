#include "transport/key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "rayaccel/plugin.h"
#include "util/private_folder.h"

namespace rayaccel::transport {
namespace {

absl::Status Errno(const std::string& what, int err) {
  return absl::PermissionDeniedError(absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return Errno(absl::StrCat("transport key file ", path), errno);
  struct stat st {};
  std::string key;
  absl::Status status = absl::OkStatus();
  if (fstat(fd, &st) != 0) {
    status = Errno(absl::StrCat("transport key file ", path), errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("transport key file ", path, " is not a regular file"));
  } else if (st.st_uid != geteuid() && st.st_uid != 0) {
    status = absl::PermissionDeniedError(absl::StrCat(
        "transport key file ", path, " belongs to another user (uid ", st.st_uid, "): refused"));
  } else if ((st.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
    status = absl::PermissionDeniedError(
        absl::StrCat("transport key file ", path,
                     " may be read or written by other users: refused (chmod 600 it)"));
  } else if (st.st_size < static_cast<off_t>(RAYACCEL_TRANSPORT_MIN_KEY) ||
             st.st_size > static_cast<off_t>(RAYACCEL_TRANSPORT_MAX_BLOB)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("transport key file ", path, " holds ", st.st_size, " bytes; a key is ",
                     RAYACCEL_TRANSPORT_MIN_KEY, " to ", RAYACCEL_TRANSPORT_MAX_BLOB,
                     " (head -c 32 /dev/urandom > FILE)"));
  } else {
    key.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < key.size()) {
      ssize_t n = read(fd, key.data() + got, key.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got != key.size()) {
      status =
          absl::DataLossError(absl::StrCat("transport key file ", path, " changed while read"));
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return key;
}

std::string DefaultKeyPath() {
  if (geteuid() == 0) return "/run/rayaccel-transport/transport.key";
  return absl::StrCat("/tmp/rayaccel-", geteuid(), "/transport.key");
}

absl::StatusOr<std::string> DefaultKey() {
  const std::string path = DefaultKeyPath();
  const std::string dir = path.substr(0, path.rfind('/'));
  if (absl::Status s = CheckPrivateFolder(dir, "the key's folder"); !s.ok()) return s;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return ReadKeyFile(path);
  // First use: write a new key beside it and link it into place, so that of two processes
  // starting at once one key wins and both read it.
  char key[32];
  size_t got = 0;
  while (got < sizeof(key)) {
    ssize_t n = getrandom(key + got, sizeof(key) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  uint32_t nonce = 0;
  (void)!getrandom(&nonce, sizeof(nonce), 0);
  const std::string tmp = absl::StrCat(path, ".", getpid(), ".", nonce, ".tmp");
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno(absl::StrCat("cannot create ", tmp), errno);
  bool written = write(fd, key, sizeof(key)) == static_cast<ssize_t>(sizeof(key));
  written = fsync(fd) == 0 && written;
  close(fd);
  if (!written) {
    unlink(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", tmp));
  }
  if (link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    int err = errno;
    unlink(tmp.c_str());
    return Errno(absl::StrCat("cannot create ", path), err);
  }
  unlink(tmp.c_str());
  return ReadKeyFile(path);
}

absl::StatusOr<std::string> ResolveKey(const std::string& key, const std::string& key_file) {
  if (!key.empty()) {
    if (key.size() < RAYACCEL_TRANSPORT_MIN_KEY || key.size() > RAYACCEL_TRANSPORT_MAX_BLOB) {
      return absl::InvalidArgumentError(
          absl::StrCat("a transport key of ", key.size(), " bytes; a key is ",
                       RAYACCEL_TRANSPORT_MIN_KEY, " to ", RAYACCEL_TRANSPORT_MAX_BLOB));
    }
    return key;
  }
  if (!key_file.empty()) return ReadKeyFile(key_file);
  if (const char* file = std::getenv(kKeyFileVariable); file != nullptr && file[0] != '\0') {
    return ReadKeyFile(file);
  }
  return DefaultKey();
}

}  // namespace rayaccel::transport
