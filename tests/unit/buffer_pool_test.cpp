// BufferPool (core/buffer_pool.hpp): a step's buffers reuse the pages of
// the step before. A large free buffer is cut for a smaller request, pieces
// given back merge, and a request larger than every free region is made of
// their pages (moved, not copied: their old contents show through, where
// fresh memory would read zero). Live buffers never overlap, the dry pool
// (address space only) decides and counts exactly as the real one, and the
// footprint stays within the live peak.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "hybrid3d/core/buffer_pool.hpp"
#include "hybrid3d/core/move_pages.hpp"

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

// How many of the buffer's pages (one float each) hold v.
size_t pages_holding(const FloatBuffer& b, size_t n, float v) {
  size_t count = 0;
  for (size_t i = 0; i < n; i += kFloatsPerPage) count += b.ptr[i] == v;
  return count;
}

// The kernel mappings (lines of /proc/self/maps) that overlap [start, end).
int mappings_over(uintptr_t start, uintptr_t end) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream in(line);
    in >> std::hex >> lo >> dash >> hi;
    count += lo < end && hi > start;
  }
  return count;
}

}  // namespace

TEST(BufferPool, CutsALargeFreeBufferInsteadOfMappingAnother) {
  BufferPool pool(BufferPool::Backing::kMemory);
  FloatBuffer big = pool.take(floats(64));
  fill(big, floats(64), 7.f);
  const uintptr_t lo = address(big) / kPage * kPage, hi = lo + 64 * kMiB + 2 * kPage;
  const int64_t mapped = footprint(pool);
  pool.give(std::move(big));

  FloatBuffer a = pool.take(floats(16)), b = pool.take(floats(16));
  EXPECT_EQ(footprint(pool), mapped) << "a fresh mapping for a piece of a free buffer";
  for (const FloatBuffer* p : {&a, &b}) {
    EXPECT_GE(address(*p), lo);
    EXPECT_LE(address(*p) + floats(16) * sizeof(float), hi);
    EXPECT_EQ(pages_holding(*p, floats(16), 7.f), floats(16) / kFloatsPerPage) << "fresh pages, not the old ones";
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

TEST(BufferPool, GathersFreePagesForABufferLargerThanEachFreeOne) {
  BufferPool pool(BufferPool::Backing::kMemory);
  FloatBuffer a = pool.take(floats(8)), b = pool.take(floats(8)), c = pool.take(floats(8));
  fill(a, floats(8), 1.f);
  fill(c, floats(8), 3.f);
  const int64_t mapped = footprint(pool);
  pool.give(std::move(a));
  pool.give(std::move(c));  // b stays: a and c cannot merge through it

  FloatBuffer large = pool.take(floats(16));
  const size_t pages = floats(16) / kFloatsPerPage;
  // All its pages come from a and c; a page at either end of each may
  // fall outside what was written (the colours differ).
  EXPECT_GE(pages_holding(large, floats(16), 1.f) + pages_holding(large, floats(16), 3.f), pages - 4);
  EXPECT_LE(footprint(pool), mapped) << "the pool mapped fresh memory instead of reusing a and c";
  pool.give(std::move(large));
  pool.give(std::move(b));
}

namespace {
// Kernels before 6.17 refuse to move a range over two mappings; these
// movers stand in for such a kernel, and for one that refuses everything.
uintptr_t g_boundary = 0;
bool refuses_across_boundary(uintptr_t src, uintptr_t dst, size_t bytes) {
  if (src < g_boundary && src + bytes > g_boundary) {
    munmap(reinterpret_cast<void*>(dst), bytes);  // as the kernel may have
    return false;
  }
  return kernel_move(src, dst, bytes);
}
bool refuses_all(uintptr_t, uintptr_t dst, size_t bytes) {
  munmap(reinterpret_cast<void*>(dst), bytes);
  return false;
}

uintptr_t map_pages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(p);
}

float page_value(uintptr_t base, size_t page) { return reinterpret_cast<float*>(base + page * kPage)[5]; }
}  // namespace

TEST(MovePages, MovesEveryPageWhereTheKernelRefusesTheWholeRange) {
  const size_t pages = 13, bytes = pages * kPage;
  for (size_t cut : {1, 6, 12}) {
    const uintptr_t src = map_pages(bytes), dst = map_pages(bytes);
    ASSERT_TRUE(src && dst);
    for (size_t i = 0; i < pages; ++i) reinterpret_cast<float*>(src + i * kPage)[5] = float(i + 1);
    g_boundary = src + cut * kPage;
    move_pages(src, dst, bytes, false, refuses_across_boundary);
    for (size_t i = 0; i < pages; ++i) EXPECT_EQ(page_value(dst, i), float(i + 1)) << "page " << i << ", cut " << cut;
    EXPECT_EQ(mappings_over(src, src + bytes), 0) << "the source is still mapped";
    munmap(reinterpret_cast<void*>(dst), bytes);
  }
}

TEST(MovePages, LeavesFreshMemoryWhereNothingMoves) {
  const size_t pages = 5, bytes = pages * kPage;
  const uintptr_t src = map_pages(bytes), dst = map_pages(bytes);
  ASSERT_TRUE(src && dst);
  for (size_t i = 0; i < pages; ++i) reinterpret_cast<float*>(src + i * kPage)[5] = 9.f;
  move_pages(src, dst, bytes, false, refuses_all);
  for (size_t i = 0; i < pages; ++i) EXPECT_EQ(page_value(dst, i), 0.f) << "page " << i;  // mapped, fresh
  EXPECT_EQ(mappings_over(src, src + bytes), 0) << "the source's memory was kept";
  munmap(reinterpret_cast<void*>(dst), bytes);
}

TEST(BufferPool, MovesPagesOfARegionThatSpansKernelMappings) {
  BufferPool pool(BufferPool::Backing::kMemory);
  // 3 MiB: its whole huge page is advised MADV_HUGEPAGE and the rest not,
  // so the kernel keeps two mappings, and one mremap of both fails.
  FloatBuffer odd = pool.take(floats(3));
  const uintptr_t lo = address(odd) / kPage * kPage;
  const int spans = mappings_over(lo, lo + 3 * kMiB);
  if (spans < 2) GTEST_SKIP() << "this kernel keeps the buffer in one mapping (no transparent huge pages)";
  fill(odd, floats(3), 5.f);
  pool.give(std::move(odd));

  FloatBuffer larger = pool.take(floats(5));
  EXPECT_GE(pages_holding(larger, floats(5), 5.f), floats(3) / kFloatsPerPage - 1)
      << "pages of a region over " << spans << " mappings were lost in the move";
  pool.give(std::move(larger));
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
