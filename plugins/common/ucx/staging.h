// Host memory a staged transfer passes through: page-locked pieces from a pool where they
// fit, else pageable memory.
#ifndef RAYACCEL_PLUGINS_COMMON_UCX_STAGING_H_
#define RAYACCEL_PLUGINS_COMMON_UCX_STAGING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/ucx_transport.h"

namespace rayaccel::plugin::ucx {

// How much of a staged transfer one piece moves: large enough that a piece costs the fabric
// what a whole transfer does, small enough that several are in flight at once.
constexpr uint64_t kStagedPiece = 4ull << 20;
// Page-locked pieces an endpoint keeps (64 MiB); pieces beyond go through pageable memory.
constexpr size_t kPinnedPieces = 16;

// Page-locked host buffers of one piece each (cuMemHostAlloc, hipHostMalloc), made on first
// use and kept for the endpoint's next pieces: a copy between the device and one runs at the
// bus's speed, and the driver stages it through no bounce buffer of its own. Thread-safe; the
// endpoint and the stagings holding a buffer share it.
class PinnedPool {
 public:
  explicit PinnedPool(DeviceMemoryOps* ops) : ops_(ops) {}
  ~PinnedPool() {
    for (auto [p, device] : free_) ops_->HostFree(p, device);
  }
  // A buffer of kStagedPiece bytes, or null (the pool is at its limit, or the plugin has no
  // page-locked memory: the caller uses pageable memory).
  char* Get(uint32_t device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      char* p = free_.back().first;
      devices_[p] = free_.back().second;
      free_.pop_back();
      return p;
    }
    if (unavailable_ || devices_.size() >= kPinnedPieces) return nullptr;
    void* p = nullptr;
    std::string why;
    if (ops_->HostAlloc(device, kStagedPiece, &p, &why) != RAYACCEL_STATUS_OK || p == nullptr) {
      unavailable_ = true;  // pageable from now on; asking the driver per piece costs more
      return nullptr;
    }
    devices_[static_cast<char*>(p)] = device;
    return static_cast<char*>(p);
  }
  void Put(char* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = devices_.find(p);
    if (it == devices_.end()) return;
    free_.emplace_back(p, it->second);
    devices_.erase(it);
  }

 private:
  DeviceMemoryOps* const ops_;
  std::mutex mu_;
  std::vector<std::pair<char*, uint32_t>> free_;  // with the device each was made on
  std::map<char*, uint32_t> devices_;             // handed out
  bool unavailable_ = false;
};

// Host memory a staged transfer passes through: a page-locked piece from the endpoint's pool
// where it fits, else pageable; uninitialized (written whole before it is read), given back
// with the transfer.
class Staging {
 public:
  Staging() = default;
  Staging(Staging&& other) noexcept { *this = std::move(other); }
  Staging& operator=(Staging&& other) noexcept {
    if (this != &other) {
      Release();
      std::swap(bytes_, other.bytes_);
      std::swap(size_, other.size_);
      std::swap(pool_, other.pool_);
    }
    return *this;
  }
  ~Staging() { Release(); }
  // `pool` may be null (no device memory on this side of the transfer).
  char* Take(uint64_t size, const std::shared_ptr<PinnedPool>& pool, uint32_t device) {
    Release();
    if (pool != nullptr && size <= kStagedPiece) bytes_ = pool->Get(device);
    if (bytes_ != nullptr) {
      pool_ = pool;
    } else {
      bytes_ = new char[size];
    }
    size_ = size;
    return bytes_;
  }
  char* data() const { return bytes_; }
  uint64_t size() const { return size_; }
  void Release() {
    if (bytes_ == nullptr) return;
    if (pool_ != nullptr) {
      pool_->Put(bytes_);
    } else {
      delete[] bytes_;
    }
    bytes_ = nullptr;
    size_ = 0;
    pool_.reset();
  }

 private:
  char* bytes_ = nullptr;
  uint64_t size_ = 0;
  std::shared_ptr<PinnedPool> pool_;  // null: bytes_ is new[]'s
};

}  // namespace rayaccel::plugin::ucx

#endif  // RAYACCEL_PLUGINS_COMMON_UCX_STAGING_H_
