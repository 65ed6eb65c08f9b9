// BufferPool (core/buffer_pool.hpp): a step's buffers reuse the pages of
// the step before. A large free buffer is cut for a smaller request (its old
// contents show through, where fresh memory would read zero) and pieces
// given back merge. Live buffers never overlap, the dry pool (address space
// only) decides and counts exactly as the real one, the footprint stays
// within the live peak, and repeated steps do not add kernel mappings.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "hybrid3d/core/buffer_pool.hpp"

using namespace h3d;

namespace {

constexpr size_t kMiB = size_t(1) << 20, kPage = 4096, kFloatsPerPage = kPage / sizeof(float);

size_t floats(double mib) { return size_t(mib * double(kMiB) / sizeof(float)); }

// What the pool holds, live and free.
int64_t footprint(const BufferPool& pool) { return pool.stats().live_bytes + pool.stats().pooled_bytes; }

uintptr_t address(const FloatBuffer& b) { return reinterpret_cast<uintptr_t>(b.ptr.get()); }

void fill(FloatBuffer& b, size_t n, float v) {
  for (size_t i = 0; i < n; ++i) b.ptr[i] = v;
}

// How many of the buffer's pages (one float each) that lie in [lo, hi)
// hold v, and how many lie there.
std::pair<size_t, size_t> pages_holding(const FloatBuffer& b, size_t n, float v, uintptr_t lo, uintptr_t hi) {
  size_t holding = 0, inside = 0;
  for (size_t i = 0; i < n; i += kFloatsPerPage) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(&b.ptr[i]);
    if (at < lo || at >= hi) continue;
    ++inside;
    holding += b.ptr[i] == v;
  }
  return {holding, inside};
}

// The process's kernel mappings (lines of /proc/self/maps): a process may
// hold at most vm.max_map_count (65530 by default).
int mappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) ++count;
  return count;
}

}  // namespace

TEST(BufferPool, CutsALargeFreeBufferInsteadOfMappingAnother) {
  BufferPool pool(BufferPool::Backing::kMemory);
  FloatBuffer big = pool.take(floats(64));
  fill(big, floats(64), 7.f);
  const uintptr_t lo = address(big) / kPage * kPage, hi = lo + 64 * kMiB + 2 * kPage;
  const uintptr_t filled_lo = address(big), filled_hi = filled_lo + floats(64) * sizeof(float);
  const int64_t mapped = footprint(pool);
  pool.give(std::move(big));

  FloatBuffer a = pool.take(floats(16)), b = pool.take(floats(16));
  EXPECT_EQ(footprint(pool), mapped) << "a fresh mapping for a piece of a free buffer";
  for (const FloatBuffer* p : {&a, &b}) {
    EXPECT_GE(address(*p), lo);
    EXPECT_LE(address(*p) + floats(16) * sizeof(float), hi);
    // Every page of the piece that big's floats covered still holds them
    // (a piece starts at its own colour, so its first page may lie in the
    // colour page in front of big's floats, which nothing filled).
    const auto [holding, inside] = pages_holding(*p, floats(16), 7.f, filled_lo, filled_hi);
    EXPECT_GE(inside, floats(16) / kFloatsPerPage - 1);
    EXPECT_EQ(holding, inside) << "fresh pages, not the old ones";
  }
  EXPECT_TRUE(address(a) + a.capacity * sizeof(float) <= address(b) ||
              address(b) + b.capacity * sizeof(float) <= address(a))
      << "the two pieces overlap";
  pool.give(std::move(a));
  pool.give(std::move(b));

  // Both pieces and the rest merged again: the whole fits in the same pages.
  FloatBuffer again = pool.take(floats(63));
  EXPECT_EQ(footprint(pool), mapped);
  EXPECT_EQ(address(again) / kPage * kPage, lo);
  pool.give(std::move(again));
}

TEST(BufferPool, RepeatedStepsAddNoMappings) {
  // Training repeats one step's takes and gives thousands of times. Random
  // steps (sizes of 2 to 80 MiB, random lifetimes within the step), each
  // repeated 60 times: after the first few, the count of kernel mappings
  // may not grow.
  for (unsigned seed = 0; seed < 8; ++seed) {
    std::mt19937 rng(seed);
    const std::vector<double> sizes_mib = {2.5, 4, 9, 17, 33, 67};
    struct Event {
      bool take;
      int id;
      size_t n;
    };
    std::vector<Event> program;
    std::vector<int> live;
    for (int id = 0; id < 24; ++id) {
      const double mib = sizes_mib[rng() % sizes_mib.size()] * (0.8 + 0.4 * double(rng() % 100) / 100);
      program.push_back({true, id, floats(mib)});
      live.push_back(id);
      while (live.size() > 4 || (!live.empty() && rng() % 3 == 0)) {
        const size_t k = rng() % live.size();
        program.push_back({false, live[k], 0});
        live.erase(live.begin() + long(k));
      }
    }
    for (int id : live) program.push_back({false, id, 0});

    BufferPool pool(BufferPool::Backing::kMemory);
    std::vector<FloatBuffer> held(24);
    auto step = [&] {
      for (const Event& e : program) {
        if (e.take) {
          held[size_t(e.id)] = pool.take(e.n);
          held[size_t(e.id)].ptr[0] = 1.f;
        } else {
          pool.give(std::move(held[size_t(e.id)]));
        }
      }
    };
    for (int s = 0; s < 4; ++s) step();
    const int after_warmup = mappings();
    for (int s = 0; s < 60; ++s) step();
    EXPECT_LE(mappings(), after_warmup + 2) << "seed " << seed << ": each step leaves kernel mappings behind";
  }
}

TEST(BufferPool, RandomStepsNeverOverlapAndTheDryPoolAgrees) {
  BufferPool real(BufferPool::Backing::kMemory), dry(BufferPool::Backing::kAddressSpace);
  std::mt19937 rng(3);
  const std::vector<double> sizes_mib = {0.3, 1.5, 2.5, 4, 9, 17, 33, 67};
  struct Live {
    FloatBuffer real, dry;
    size_t n;
    float id;
  };
  std::vector<Live> live;
  int cuts_or_gathers = 0;
  for (int op = 0; op < 400; ++op) {
    if (live.size() < 8 && (live.empty() || rng() % 2)) {
      const double mib = sizes_mib[rng() % sizes_mib.size()] * (0.8 + 0.4 * double(rng() % 100) / 100);
      Live l{{}, {}, floats(mib), float(op + 1)};
      const int64_t held = footprint(real);
      l.real = real.take(l.n);
      l.dry = dry.take(l.n);
      cuts_or_gathers += l.n * sizeof(float) >= 2 * kMiB && footprint(real) == held;
      // Written at each page and at the end: a neighbour's pages overlapping
      // it would overwrite some of these.
      for (size_t i = 0; i < l.n; i += kFloatsPerPage) l.real.ptr[i] = l.id;
      l.real.ptr[l.n - 1] = l.id;
      live.push_back(std::move(l));
    } else {
      const size_t k = rng() % live.size();
      Live& l = live[k];
      for (size_t i = 0; i < l.n; i += kFloatsPerPage) ASSERT_EQ(l.real.ptr[i], l.id) << "op " << op << ", float " << i;
      ASSERT_EQ(l.real.ptr[l.n - 1], l.id) << "op " << op;
      real.give(std::move(l.real));
      dry.give(std::move(l.dry));
      live.erase(live.begin() + k);
    }
    const BufferPool::Stats r = real.stats(), d = dry.stats();
    ASSERT_EQ(r.live_bytes, d.live_bytes) << "op " << op;
    ASSERT_EQ(r.pooled_bytes, d.pooled_bytes) << "op " << op;
    ASSERT_EQ(r.peak_bytes, d.peak_bytes) << "op " << op;
    ASSERT_EQ(r.peak_live_bytes, d.peak_live_bytes) << "op " << op;
    ASSERT_LE(r.live_bytes + r.pooled_bytes, r.peak_live_bytes)
        << "op " << op << ": the footprint passed the live peak";
  }
  EXPECT_GT(cuts_or_gathers, 20) << "the sequence hardly reused free memory for new sizes";
  for (Live& l : live) {
    real.give(std::move(l.real));
    dry.give(std::move(l.dry));
  }
}
