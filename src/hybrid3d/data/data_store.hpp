// DataStore: keeps the blocks a rank has read in memory, so that only the
// first epoch touches the file system (LBANN's data store).
//
// It wraps a file source or the synthetic generator: load() answers from
// memory when this rank loaded the same block of the same sample before,
// and otherwise loads it and keeps it while the run's CacheBudget (shared
// with the other stores) has room (first come, first kept; nothing is
// evicted, so later epochs read the same samples from memory every time,
// and the rest from the source). Sources of int16 counts (the synthetic
// generator, CosmoFlow's int16 files) are kept as counts and transformed on
// the way out. When an epoch's shuffle sends a sample to another
// data group, that group's ranks read it from the file (and keep it then):
// moving blocks between ranks over MPI would need every rank to know, a
// step ahead, who holds what, and at the cost of a second copy in flight;
// re-reading costs one block read per rank and keeps ranks independent.
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "hybrid3d/data/cache_budget.hpp"
#include "hybrid3d/data/sample_source.hpp"

namespace h3d {

class DataStore : public SampleSource {
 public:
  DataStore(std::unique_ptr<SampleSource> inner, std::shared_ptr<CacheBudget> budget);
  int64_t size() const override { return inner_->size(); }
  std::array<int64_t, 3> extent() const override { return inner_->extent(); }
  int64_t channels() const override { return inner_->channels(); }
  int64_t classes() const override { return inner_->classes(); }
  void load(int64_t index, const Box& box, float* out, float* target) override;
  std::string describe() const override;

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t bytes() const { return bytes_; }  // kept by this store
  const CacheBudget& budget() const { return *budget_; }
  // "N blocks from memory, M loaded, X MiB kept (all sets: Y of Z MiB)".
  std::string usage() const;

 private:
  struct Entry {
    Box box;
    std::vector<float> data;      // the transformed block, or
    std::vector<int16_t> counts;  // its counts, for sources that have them (half the bytes)
    std::vector<float> target;
  };
  std::unique_ptr<SampleSource> inner_;
  std::shared_ptr<CacheBudget> budget_;
  int64_t bytes_ = 0, hits_ = 0, misses_ = 0;
  std::map<int64_t, Entry> kept_;
};

}  // namespace h3d
