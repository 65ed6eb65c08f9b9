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
  explicit Prefetcher(Load load) : load_(std::move(load)) {}
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
  std::thread worker_;
  std::vector<int64_t> ids_;
  Tensor x_;
  std::vector<float> targets_;
  std::exception_ptr failure_;
  bool ready_ = false;
};

}  // namespace h3d
