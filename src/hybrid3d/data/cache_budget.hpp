// CacheBudget: the bytes a rank may keep in its sample caches, shared by
// all of them (the training, validation and test data stores, file or
// synthetic), so that caching never grows past one limit however many
// samples a run has: a block that does not fit is not kept, and is read or
// generated again when it is next needed.
//
// Where a cache's decisions must agree across the ranks of a group (a
// collective reader, the synthetic generator's distributed FFT), the limit
// and every request must be the same on those ranks: the trainer makes the
// limit the minimum over the world, and the caches charge a block at the
// group's largest size (SampleSource::group_max).
#pragma once
#include <cstdint>

namespace h3d {

class CacheBudget {
 public:
  explicit CacheBudget(int64_t limit_bytes) : limit_(limit_bytes > 0 ? limit_bytes : 0) {}
  // Takes `bytes` if they fit; false (and nothing taken) otherwise.
  bool take(int64_t bytes) {
    if (bytes < 0 || used_ + bytes > limit_) return false;
    used_ += bytes;
    return true;
  }
  int64_t limit() const { return limit_; }
  int64_t used() const { return used_; }

 private:
  int64_t limit_ = 0, used_ = 0;
};

// A quarter of this node's available memory (MemAvailable), shared by its
// ranks: the default --data-store-mib.
int64_t default_cache_bytes(int ranks_on_node);

}  // namespace h3d
