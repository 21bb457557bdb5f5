#include "topology/partition.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

namespace rayaccel {
namespace {

constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
constexpr uint32_t kPad = std::numeric_limits<uint32_t>::max();  // after every device

// The weights with a zero diagonal, so that sums over sets may include a device's own entry.
std::vector<int64_t> ZeroDiagonal(const PairWeights& weights) {
  std::vector<int64_t> w = weights.w;
  for (size_t i = 0; i < weights.n; ++i) w[i * weights.n + i] = 0;
  return w;
}

std::vector<uint32_t> Members(uint32_t mask) {
  std::vector<uint32_t> out;
  for (uint32_t bits = mask; bits != 0; bits &= bits - 1) {
    out.push_back(static_cast<uint32_t>(__builtin_ctz(bits)));
  }
  return out;
}

// A partition's sets as go-gpuallocator orders candidates: each set ascending and padded with
// kPad to `size`, sets by first device. Lexicographic order on this is enumeration order.
std::vector<std::vector<uint32_t>> Ordered(std::vector<std::vector<uint32_t>> sets, size_t size) {
  for (std::vector<uint32_t>& s : sets) {
    std::sort(s.begin(), s.end());
    s.resize(size, kPad);
  }
  std::sort(sets.begin(), sets.end());
  return sets;
}

// The chosen set: the heaviest full set holding `required`, the first of equals.
size_t ChooseSet(const PairWeights& w, const std::vector<std::vector<uint32_t>>& sets, size_t size,
                 const std::vector<uint32_t>& required) {
  size_t chosen = sets.size();
  int64_t best = 0;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::vector<uint32_t>& s = sets[i];
    if (s.size() != size) continue;
    bool holds = std::all_of(required.begin(), required.end(), [&](uint32_t r) {
      return std::find(s.begin(), s.end(), r) != s.end();
    });
    if (!holds) continue;
    int64_t weight = w.SetWeight(s);
    if (chosen == sets.size() || weight > best) {
      chosen = i;
      best = weight;
    }
  }
  return chosen;
}

// Memoized search over subsets: F(mask) is the best split of `mask` into full sets and, while
// the pool's count is not a multiple of `size`, one set of the remainder. The lowest device of
// `mask` opens the next set; the sets it can open are tried in lexicographic order with the
// remainder's padding after every device, and the first best is kept (strictly greater wins).
// Allocation-free and iterative: a 16-device pool visits up to a few hundred thousand sets.
class Exact {
 public:
  uint64_t work_;  // sets still to search; 0: over budget, and the answer is not exact

  Exact(const PairWeights& weights, size_t size, uint64_t work)
      : work_(work),
        w_(ZeroDiagonal(weights)),
        n_(weights.n),
        size_(size),
        memo_(size_t{1} << n_, kUnset),
        choice_(size_t{1} << n_, 0),
        bound_(n_, 0) {
    // Each device's share of any split's total is at most half its size-1 heaviest pairs:
    // twice the bound of a set of devices is the sum of their shares.
    std::vector<int64_t> row(n_);
    for (size_t d = 0; d < n_; ++d) {
      row.assign(w_.begin() + static_cast<std::ptrdiff_t>(d * n_),
                 w_.begin() + static_cast<std::ptrdiff_t>((d + 1) * n_));
      std::sort(row.begin(), row.end(), std::greater<int64_t>());
      for (size_t k = 0; k + 1 < size_ && k < n_; ++k) bound_[d] += std::max<int64_t>(row[k], 0);
    }
  }

  int64_t F(uint32_t mask) {
    if (mask == 0) return 0;
    int64_t& memo = memo_[mask];
    if (memo != kUnset) return memo;
    const size_t count = static_cast<size_t>(__builtin_popcount(mask));
    if (count <= size_) {  // one set left (full, or the remainder): no choice
      choice_[mask] = mask;
      return memo = Weight(mask);
    }
    const size_t remainder = count % size_;
    // Padding is left while the remainder set is not yet taken: size - remainder of it.
    const size_t pads = remainder == 0 ? 0 : size_ - remainder;
    const uint32_t first = static_cast<uint32_t>(__builtin_ctz(mask));
    uint8_t others[32];
    size_t m = 0;
    for (uint32_t bits = mask & (mask - 1); bits != 0; bits &= bits - 1) {
      others[m++] = static_cast<uint8_t>(__builtin_ctz(bits));
    }
    // Depth-first over the set being opened, in enumeration order: at depth k it holds `first`
    // and others[pick[0..k)].
    const size_t need = size_ - 1;
    size_t pick[32];
    int64_t weight[33];
    int64_t shares[33];  // the set's devices' bounds, summed
    uint32_t set[33];
    weight[0] = 0;
    shares[0] = bound_[first];
    set[0] = uint32_t{1} << first;
    int64_t all_shares = 0;
    for (uint32_t bits = mask; bits != 0; bits &= bits - 1)
      all_shares += bound_[__builtin_ctz(bits)];
    int64_t best = kUnset;
    uint32_t best_set = 0;
    // A set whose weight and the rest's bound cannot beat the best so far is not searched.
    auto consider = [&](uint32_t s, int64_t w, int64_t s_shares) {
      if (best != kUnset && w + (all_shares - s_shares) / 2 <= best) return;
      if (work_ == 0) return;  // over budget: the caller drops the answer
      --work_;
      int64_t value = w + F(mask & ~s);
      if (value > best) {
        best = value;
        best_set = s;
      }
    };
    size_t depth = 0;
    pick[0] = 0;
    while (true) {
      if (depth == need) {
        consider(set[depth], weight[depth], shares[depth]);
        if (depth == 0) break;  // sets of one
        --depth;
        ++pick[depth];
        continue;
      }
      // Go deeper while devices are left to fill the set, or to fill the remainder set's part.
      const bool full = pick[depth] + (need - depth) <= m;
      const bool partial =
          pads > 0 && depth < need - pads && pick[depth] + (need - pads - depth) <= m;
      if (full || partial) {
        uint8_t d = others[pick[depth]];
        int64_t gain = w_[d * n_ + first];
        for (size_t k = 0; k < depth; ++k) gain += w_[d * n_ + others[pick[k]]];
        weight[depth + 1] = weight[depth] + gain;
        shares[depth + 1] = shares[depth] + bound_[d];
        set[depth + 1] = set[depth] | (uint32_t{1} << d);
        ++depth;
        pick[depth] = pick[depth - 1] + 1;
        continue;
      }
      // The real devices at this depth are done: the remainder set, when exactly the padding
      // is left to add, comes after them in enumeration order.
      if (pads > 0 && need - depth == pads) consider(set[depth], weight[depth], shares[depth]);
      if (depth == 0) break;
      --depth;
      ++pick[depth];
    }
    choice_[mask] = best_set;
    return memo = best;
  }

  // The sets of F(mask)'s best split, in the order they were opened (by first device).
  void Sets(uint32_t mask, std::vector<std::vector<uint32_t>>* out) const {
    while (mask != 0) {
      out->push_back(Members(choice_[mask]));
      mask &= ~choice_[mask];
    }
  }

  int64_t Weight(uint32_t set) const {
    int64_t s = 0;
    for (uint32_t a = set; a != 0; a &= a - 1) {
      uint32_t i = static_cast<uint32_t>(__builtin_ctz(a));
      for (uint32_t b = a & (a - 1); b != 0; b &= b - 1) {
        s += w_[i * n_ + static_cast<uint32_t>(__builtin_ctz(b))];
      }
    }
    return s;
  }

 private:
  std::vector<int64_t> w_;
  size_t n_;
  size_t size_;
  std::vector<int64_t> memo_;
  std::vector<uint32_t> choice_;
  std::vector<int64_t> bound_;  // per device: its size-1 heaviest pairs, summed
};

}  // namespace

int64_t PairWeights::SetWeight(const std::vector<uint32_t>& set) const {
  int64_t s = 0;
  for (size_t i = 0; i < set.size(); ++i) {
    for (size_t j = i + 1; j < set.size(); ++j) s += (*this)(set[i], set[j]);
  }
  return s;
}

Partition PartitionExactly(const PairWeights& weights, size_t size,
                           const std::vector<uint32_t>& required, uint64_t max_sets) {
  Partition out;
  const size_t n = weights.n;
  if (n == 0 || n > kMaxExactPool || size == 0 || size > n || required.size() > size) return out;
  Exact exact(weights, size, max_sets);
  const uint32_t all = n == 32 ? ~uint32_t{0} : (uint32_t{1} << n) - 1;
  uint32_t required_mask = 0;
  for (uint32_t r : required) required_mask |= uint32_t{1} << r;
  if (required_mask == 0) {
    out.total = exact.F(all);
    exact.Sets(all, &out.sets);
  } else {
    // The best split that has a full set holding every required device: that set, G, and the
    // best split of the rest. Among equals, the split first in enumeration order.
    std::vector<uint32_t> free;
    for (uint32_t d = 0; d < n; ++d) {
      if ((required_mask >> d & 1) == 0) free.push_back(d);
    }
    const size_t pick = size - required.size();
    std::vector<size_t> idx(pick);
    std::iota(idx.begin(), idx.end(), 0);
    bool have = false;
    std::vector<std::vector<uint32_t>> best_order;
    while (true) {
      uint32_t set = required_mask;
      for (size_t i : idx) set |= uint32_t{1} << free[i];
      int64_t value = exact.Weight(set) + exact.F(all & ~set);
      if (!have || value >= out.total) {
        std::vector<std::vector<uint32_t>> sets = {Members(set)};
        exact.Sets(all & ~set, &sets);
        std::vector<std::vector<uint32_t>> order = Ordered(sets, size);
        if (!have || value > out.total || order < best_order) {
          out.total = value;
          out.sets = std::move(sets);
          best_order = std::move(order);
          have = true;
        }
      }
      // Next combination of `pick` free devices.
      size_t i = pick;
      while (i > 0 && idx[i - 1] == free.size() - pick + i - 1) --i;
      if (i == 0) break;
      ++idx[i - 1];
      for (size_t j = i; j < pick; ++j) idx[j] = idx[j - 1] + 1;
    }
  }
  if (exact.work_ == 0) return Partition{};  // over budget
  std::sort(out.sets.begin(), out.sets.end());
  out.chosen = ChooseSet(weights, out.sets, size, required);
  if (out.chosen == out.sets.size()) out = Partition{};
  return out;
}

namespace {

// Sets as a device -> set map, with each device's summed weight to every set, so that the
// gain of swapping two devices is O(1) and applying it O(n).
class SwapSearch {
 public:
  SwapSearch(const std::vector<int64_t>& w, size_t n, std::vector<std::vector<uint32_t>> sets,
             const std::vector<uint32_t>& locked)
      : w_(w),
        n_(n),
        sets_(std::move(sets)),
        set_of_(n),
        locked_(n, false),
        conn_(n * sets_.size(), 0) {
    for (uint32_t d : locked) locked_[d] = true;
    for (size_t s = 0; s < sets_.size(); ++s) {
      for (uint32_t d : sets_[s]) set_of_[d] = s;
    }
    for (size_t d = 0; d < n_; ++d) {
      for (size_t x = 0; x < n_; ++x) conn_[d * sets_.size() + set_of_[x]] += W(d, x);
    }
    for (size_t d = 0; d < n_; ++d) total_ += conn_[d * sets_.size() + set_of_[d]];
    total_ /= 2;
  }

  // Swaps while one helps, at most about `work` evaluations (at least one pass); returns what
  // is left of `work`.
  uint64_t Improve(uint64_t work) {
    const size_t k = sets_.size();
    bool improved = true;
    while (improved && work > 0) {
      improved = false;
      for (size_t a = 0; a < n_ && work > 0; ++a) {
        if (locked_[a]) continue;
        for (size_t b = a + 1; b < n_; ++b) {
          if (work > 0) --work;
          size_t x = set_of_[a], y = set_of_[b];
          if (x == y || locked_[b]) continue;
          int64_t delta = conn_[b * k + x] - conn_[a * k + x] + conn_[a * k + y] -
                          conn_[b * k + y] - 2 * W(a, b);
          if (delta <= 0) continue;
          for (size_t d = 0; d < n_; ++d) {
            conn_[d * k + x] += W(d, b) - W(d, a);
            conn_[d * k + y] += W(d, a) - W(d, b);
          }
          work = work > n_ ? work - n_ : 0;
          set_of_[a] = y;
          set_of_[b] = x;
          total_ += delta;
          improved = true;
        }
      }
    }
    return work;
  }

  Partition Result() const {
    Partition p;
    p.sets.assign(sets_.size(), {});
    for (size_t d = 0; d < n_; ++d) p.sets[set_of_[d]].push_back(static_cast<uint32_t>(d));
    for (std::vector<uint32_t>& s : p.sets) std::sort(s.begin(), s.end());
    std::sort(p.sets.begin(), p.sets.end());
    p.total = total_;
    return p;
  }

 private:
  int64_t W(size_t a, size_t b) const { return w_[a * n_ + b]; }

  const std::vector<int64_t>& w_;
  size_t n_;
  std::vector<std::vector<uint32_t>> sets_;
  std::vector<size_t> set_of_;
  std::vector<bool> locked_;
  std::vector<int64_t> conn_;  // device x set -> summed weight to that set's devices
  int64_t total_ = 0;
};

// A greedy split: `first` grown to `size` by the device that adds the most, then, from what is
// left, sets opened by the least connected device (hard to place well later) and grown the
// same way; the last devices form the remainder set.
std::vector<std::vector<uint32_t>> Greedy(const std::vector<int64_t>& w, size_t n, size_t size,
                                          std::vector<uint32_t> first) {
  std::vector<bool> used(n, false);
  for (uint32_t d : first) used[d] = true;
  size_t left = n - first.size();
  auto grow = [&](std::vector<uint32_t>* set) {
    while (set->size() < size && left > 0) {
      size_t pick = n;
      int64_t best = 0;
      for (size_t d = 0; d < n; ++d) {
        if (used[d]) continue;
        int64_t gain = 0;
        for (uint32_t m : *set) gain += w[d * n + m];
        if (pick == n || gain > best) {
          pick = d;
          best = gain;
        }
      }
      used[pick] = true;
      --left;
      set->push_back(static_cast<uint32_t>(pick));
    }
  };
  std::vector<std::vector<uint32_t>> sets;
  if (!first.empty()) {
    grow(&first);
    sets.push_back(std::move(first));
  }
  while (left > 0) {
    size_t seed = n;
    int64_t lowest = 0;
    for (size_t d = 0; d < n; ++d) {
      if (used[d]) continue;
      int64_t degree = 0;
      for (size_t x = 0; x < n; ++x) degree += used[x] ? 0 : w[d * n + x];
      if (seed == n || degree < lowest) {
        seed = d;
        lowest = degree;
      }
    }
    used[seed] = true;
    --left;
    std::vector<uint32_t> set = {static_cast<uint32_t>(seed)};
    grow(&set);
    sets.push_back(std::move(set));
  }
  return sets;
}

}  // namespace

Partition PartitionByLocalSearch(const PairWeights& weights, size_t size,
                                 const std::vector<uint32_t>& required,
                                 const std::vector<uint32_t>& seed, uint64_t work) {
  Partition best;
  const size_t n = weights.n;
  if (n == 0 || size == 0 || size > n || required.size() > size) return best;
  const std::vector<int64_t> w = ZeroDiagonal(weights);
  // Descents from the greedy splits, then from random splits (a fixed generator: the same
  // question gets the same answer) while the work budget lasts; the best total wins, the
  // earliest among equals.
  std::mt19937 rng(static_cast<uint32_t>(n * 131 + size));
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  uint64_t left = work;
  bool have = false;
  int fruitless = 0;  // random starts since the best last rose
  constexpr int kMaxFruitless = 16;
  for (int start = 0; left > 0 && fruitless < kMaxFruitless; ++start) {
    std::vector<std::vector<uint32_t>> sets;
    if (start == 0) {
      sets = Greedy(w, n, size, required);
    } else if (start == 1 && !seed.empty()) {
      sets = Greedy(w, n, size, seed);
    } else {
      if (start == 1 && seed.empty()) continue;
      // The required devices first, the rest shuffled, cut into sets.
      std::shuffle(order.begin(), order.end(), rng);
      std::stable_partition(order.begin(), order.end(), [&](uint32_t d) {
        return std::find(required.begin(), required.end(), d) != required.end();
      });
      for (size_t i = 0; i < n; i += size) {
        sets.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                          order.begin() + static_cast<std::ptrdiff_t>(std::min(n, i + size)));
      }
    }
    SwapSearch search(w, n, std::move(sets), required);
    left = search.Improve(left);
    Partition p = search.Result();
    if (!have || p.total > best.total) {
      best = std::move(p);
      have = true;
      fruitless = 0;
    } else if (start >= 2) {
      ++fruitless;
    }
  }
  best.chosen = ChooseSet(weights, best.sets, size, required);
  if (best.chosen == best.sets.size()) best = Partition{};
  return best;
}

}  // namespace rayaccel
