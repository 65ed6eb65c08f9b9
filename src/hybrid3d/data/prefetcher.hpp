// Prefetcher: loads the next mini-batch on a background thread while the
// current step computes.
//
// Only for sources whose load() makes no MPI calls (files, the data store):
// the synthetic source generates with collectives on the group's
// communicator, which the step's halo exchanges use too. HDF5 is not
// thread-safe, so everything else must leave it alone while a load is in
// flight: take() (or wait()) before any other use of the source.
#pragma once
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "hybrid3d/core/tensor.hpp"

namespace h3d {

class Prefetcher {
 public:
  using Load = std::function<void(const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& targets)>;
  // prepare (may be empty) runs in start() on the calling thread, before
  // the load: it takes the batch's buffer there (Tensor::reserve), so that
  // the allocator sees that take at the same point of every step, as the
  // memory planner replays it, and not whenever the background thread
  // gets to it (a race that moved a rank's peak by one input block).
  using Prepare = std::function<void(const std::vector<int64_t>& ids, Tensor& x)>;
  explicit Prefetcher(Load load, Prepare prepare = {}) : load_(std::move(load)), prepare_(std::move(prepare)) {}
  ~Prefetcher() { wait(); }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Starts loading `ids` (waits for a load still in flight first).
  void start(std::vector<int64_t> ids);
  // The batch for `ids`: the prefetched one if it is that batch, else loaded
  // now. Rethrows what the background load threw.
  void take(const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& targets);
  // Waits for a load in flight (its result is kept for take()).
  void wait();

 private:
  Load load_;
  Prepare prepare_;
  std::thread worker_;
  std::vector<int64_t> ids_;
  Tensor x_;
  std::vector<float> targets_;
  std::exception_ptr failure_;
  bool ready_ = false;
};

}  // namespace h3d
