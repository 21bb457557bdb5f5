#include "transport_wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <chrono>

namespace rayaccel::plugin::wire {
namespace {

Mac Hmac(const std::string& key, const std::string& bytes) {
  Mac mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), mac.data(), &length);
  return mac;
}

}  // namespace

uint64_t RandomId() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
      v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          reinterpret_cast<uintptr_t>(&v);
    }
  }
  return v;
}

Nonce RandomNonce() {
  Nonce n{};
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return n;
}

Mac Prove(const std::string& key, const char* role, uint64_t token, uint64_t reader, uint64_t owner,
          const Nonce& reader_nonce, const Nonce& owner_nonce) {
  Writer w;
  w.Bytes(role, std::strlen(role) + 1).U64(token).U64(reader).U64(owner);
  w.Bytes(reader_nonce.data(), reader_nonce.size()).Bytes(owner_nonce.data(), owner_nonce.size());
  return Hmac(key, w.str());
}

Mac MacOf(const std::string& key, const char* label, std::string_view bytes) {
  Writer w;
  w.Bytes(label, std::strlen(label) + 1).Bytes(bytes.data(), bytes.size());
  return Hmac(key, w.str());
}

bool SameMac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace rayaccel::plugin::wire
