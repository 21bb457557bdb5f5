// What every transport helper of plugins/common speaks on its wire: little-endian fields,
// random ids, and the proofs of the shared key (HMAC-SHA-256, OpenSSL's libcrypto) that two
// endpoints exchange before anything names a region.
#ifndef RAYACCEL_PLUGINS_COMMON_TRANSPORT_WIRE_H_
#define RAYACCEL_PLUGINS_COMMON_TRANSPORT_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rayaccel::plugin::wire {

// Little-endian encoding of addresses, descriptors and messages.
class Writer {
 public:
  Writer& U16(uint16_t v) { return Int(v, 2); }
  Writer& U32(uint32_t v) { return Int(v, 4); }
  Writer& U64(uint64_t v) { return Int(v, 8); }
  Writer& Bytes(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string& str() { return out_; }

 private:
  Writer& Int(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

// Reads fields in order; any read past the end makes ok() false and returns zeros.
class Reader {
 public:
  Reader(const void* data, size_t size) : p_(static_cast<const uint8_t*>(data)), left_(size) {
    if (data == nullptr && size > 0) ok_ = false;
  }
  uint16_t U16() { return static_cast<uint16_t>(Int(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Int(4)); }
  uint64_t U64() { return Int(8); }
  const uint8_t* Bytes(size_t n) {
    if (!ok_ || n > left_) return ok_ = false, nullptr;
    const uint8_t* at = p_;
    p_ += n, left_ -= n;
    return at;
  }
  template <size_t N>
  std::array<uint8_t, N> Array() {
    std::array<uint8_t, N> a{};
    if (const uint8_t* at = Bytes(N)) std::memcpy(a.data(), at, N);
    return a;
  }
  size_t left() const { return ok_ ? left_ : 0; }
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && left_ == 0; }

 private:
  uint64_t Int(int bytes) {
    const uint8_t* at = Bytes(static_cast<size_t>(bytes));
    uint64_t v = 0;
    for (int i = 0; at != nullptr && i < bytes; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
    return v;
  }
  const uint8_t* p_;
  size_t left_;
  bool ok_ = true;
};

// A random, non-zero 64-bit id (getrandom).
uint64_t RandomId();

// The handshake: each side proves the shared key with an HMAC-SHA-256 over both nonces, both
// endpoint ids and the connection's token, labelled by its role so that neither proof can be
// replayed as the other (nor one helper's as another's: each names its own roles).
using Nonce = std::array<uint8_t, 16>;
using Mac = std::array<uint8_t, 32>;

Nonce RandomNonce();
Mac Prove(const std::string& key, const char* role, uint64_t token, uint64_t reader, uint64_t owner,
          const Nonce& reader_nonce, const Nonce& owner_nonce);
// A MAC under the shared key over bytes a peer sent, labelled by what they are, so that a
// fabric never parses an address that an endpoint without the key made.
Mac MacOf(const std::string& key, const char* label, std::string_view bytes);
// In constant time.
bool SameMac(const Mac& a, const Mac& b);

}  // namespace rayaccel::plugin::wire

#endif  // RAYACCEL_PLUGINS_COMMON_TRANSPORT_WIRE_H_
