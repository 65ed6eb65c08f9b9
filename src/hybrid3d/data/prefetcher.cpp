#include "hybrid3d/data/prefetcher.hpp"

namespace h3d {

void Prefetcher::wait() {
  if (worker_.joinable()) worker_.join();
}

void Prefetcher::start(std::vector<int64_t> ids) {
  wait();
  ids_ = std::move(ids);
  ready_ = false;
  failure_ = nullptr;
  if (prepare_) prepare_(ids_, x_);
  worker_ = std::thread([this] {
    try {
      load_(ids_, x_, targets_);
      ready_ = true;
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

void Prefetcher::take(const std::vector<int64_t>& ids, Tensor& x, std::vector<float>& targets) {
  wait();
  if (failure_) {
    auto f = failure_;
    failure_ = nullptr;
    std::rethrow_exception(f);
  }
  if (ready_ && ids == ids_) {
    x = std::move(x_);
    targets.swap(targets_);
    ready_ = false;
    return;
  }
  ready_ = false;
  load_(ids, x, targets);
}

}  // namespace h3d
