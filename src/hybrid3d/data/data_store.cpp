#include "hybrid3d/data/data_store.hpp"

#include "hybrid3d/core/bytes.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace h3d {

DataStore::DataStore(std::unique_ptr<SampleSource> inner, std::shared_ptr<CacheBudget> budget)
    : inner_(std::move(inner)), budget_(std::move(budget)) {}

void DataStore::load(int64_t index, const Box& box, float* out, float* target) {
  const int64_t n = box.volume() * channels();
  auto it = kept_.find(index);
  if (it != kept_.end() && it->second.box == box) {
    const Entry& e = it->second;
    if (e.counts.empty())
      std::copy_n(e.data.data(), n, out);
    else
      transform_counts(inner_->counts_transform(), e.counts.data(), out, n);
    std::copy(e.target.begin(), e.target.end(), target);
    ++hits_;
    return;
  }
  ++misses_;
  // Whether to keep the block is decided before it is read, so that one not
  // kept is loaded straight into `out`, with no buffer besides. Under a
  // collective reader every rank of the group must keep the same samples, or
  // they would stop making the same reads: each block is charged at the
  // group's largest. (A load that throws ends the run: its charge is moot.)
  const bool counts = inner_->has_counts();
  const int64_t nt = targets_of(box);
  const int64_t bytes = n * int64_t(counts ? sizeof(int16_t) : sizeof(float)) + nt * int64_t(sizeof(float));
  const int64_t need = inner_->group_max(bytes);
  if (it != kept_.end() || !budget_->take(need)) {
    inner_->load(index, box, out, target);
    return;
  }
  Entry e{box, {}, {}, {}};
  if (counts) {
    e.counts.resize(size_t(n));
    inner_->load_counts(index, box, e.counts.data(), target);
    transform_counts(inner_->counts_transform(), e.counts.data(), out, n);
  } else {
    inner_->load(index, box, out, target);
    e.data.assign(out, out + n);
  }
  e.target.assign(target, target + nt);
  kept_.emplace(index, std::move(e));
  bytes_ += need;
}

std::string DataStore::describe() const {
  std::ostringstream os;
  os << inner_->describe() << "; data store up to " << budget_->limit() / (1 << 20)
     << " MiB per rank (shared by the training, validation and test sets)";
  return os.str();
}

int64_t default_cache_bytes(int ranks_on_node) {
  return available_memory_bytes() / 4 / std::max(1, ranks_on_node);
}

std::string DataStore::usage() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%lld blocks from memory, %lld loaded, %.1f MiB kept (all sets: %.1f of %.1f MiB)",
                (long long)hits_, (long long)misses_, double(bytes_) / (1 << 20), double(budget_->used()) / (1 << 20),
                double(budget_->limit()) / (1 << 20));
  return buf;
}

}  // namespace h3d
