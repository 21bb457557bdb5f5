// The whole-partition search against brute force: every split of small random pools, with and
// without required devices, and the local search never claiming more than the optimum.
#include "topology/partition.h"

#include <algorithm>
#include <functional>
#include <random>

#include "gtest/gtest.h"

namespace rayaccel {
namespace {

PairWeights Random(size_t n, std::mt19937* rng) {
  PairWeights w;
  w.n = n;
  w.w.assign(n * n, 0);
  std::uniform_int_distribution<int> pick(0, 4);
  const int64_t levels[] = {0, 1, 10, 100, 2500};  // few distinct values: many ties
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) w.w[a * n + b] = w.w[b * n + a] = levels[pick(*rng)];
  }
  return w;
}

// Every split of 0..n-1 into sets of `size` and one remainder set, by brute force: the best
// total among splits with a full set holding `required`.
int64_t BruteForce(const PairWeights& w, size_t size, const std::vector<uint32_t>& required) {
  const size_t n = w.n;
  std::vector<int> set_of(n, -1);
  int64_t best = -1;
  std::function<void(size_t, std::vector<std::vector<uint32_t>>&)> place =
      [&](size_t d, std::vector<std::vector<uint32_t>>& sets) {
        if (d == n) {
          size_t partial = 0;
          for (const auto& s : sets) partial += s.size() != size;
          if (partial > 1 || (n % size == 0 && partial > 0)) return;
          bool ok = false;
          int64_t total = 0;
          for (const auto& s : sets) {
            total += w.SetWeight(s);
            ok = ok || (s.size() == size &&
                        std::all_of(required.begin(), required.end(), [&](uint32_t r) {
                          return std::count(s.begin(), s.end(), r) > 0;
                        }));
          }
          if (ok) best = std::max(best, total);
          return;
        }
        for (size_t i = 0; i < sets.size(); ++i) {  // by index: deeper calls grow `sets`
          if (sets[i].size() < size) {
            sets[i].push_back(static_cast<uint32_t>(d));
            place(d + 1, sets);
            sets[i].pop_back();
          }
        }
        sets.push_back({static_cast<uint32_t>(d)});
        place(d + 1, sets);
        sets.pop_back();
      };
  std::vector<std::vector<uint32_t>> sets;
  place(0, sets);
  return best;
}

TEST(Partition, ExactMatchesBruteForce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 500; ++round) {
    size_t n = 2 + rng() % 9;
    size_t size = 1 + rng() % std::min<size_t>(n, 4);
    PairWeights w = Random(n, &rng);
    std::vector<uint32_t> required;
    if (rng() % 2 == 0) required.push_back(static_cast<uint32_t>(rng() % n));
    if (required.size() == 1 && size > 1 && rng() % 2 == 0) {
      uint32_t other = static_cast<uint32_t>(rng() % n);
      if (other != required[0]) required.push_back(other);
    }
    SCOPED_TRACE(::testing::Message() << "n " << n << " size " << size << " round " << round);
    Partition p = PartitionExactly(w, size, required);
    ASSERT_FALSE(p.sets.empty());
    EXPECT_EQ(p.total, BruteForce(w, size, required));
    int64_t sum = 0;
    size_t devices = 0;
    for (const auto& s : p.sets) {
      sum += w.SetWeight(s);
      devices += s.size();
    }
    EXPECT_EQ(sum, p.total);
    EXPECT_EQ(devices, n);
    const std::vector<uint32_t>& chosen = p.sets[p.chosen];
    EXPECT_EQ(chosen.size(), size);
    for (uint32_t r : required) EXPECT_EQ(std::count(chosen.begin(), chosen.end(), r), 1);

    Partition local = PartitionByLocalSearch(w, size, required);
    ASSERT_FALSE(local.sets.empty());
    EXPECT_LE(local.total, p.total);
    const std::vector<uint32_t>& picked = local.sets[local.chosen];
    EXPECT_EQ(picked.size(), size);
    for (uint32_t r : required) EXPECT_EQ(std::count(picked.begin(), picked.end(), r), 1);
  }
}

TEST(Partition, ImpossibleRequestsGiveNothing) {
  std::mt19937 rng(1);
  PairWeights w = Random(4, &rng);
  EXPECT_TRUE(PartitionExactly(w, 5, {}).sets.empty());
  EXPECT_TRUE(PartitionExactly(w, 1, {0, 1}).sets.empty());
  EXPECT_TRUE(PartitionByLocalSearch(w, 0, {}).sets.empty());
}

}  // namespace
}  // namespace rayaccel
