// Profiler: accumulates wall time per named region on this rank, for
// --profile. Off by default; a disabled scope costs one branch.
//
// Names: "<layer>.forward", "<layer>.backward", and the categories below.
// Communication is timed twice: "*.exposed" is the time the rank spent
// inside the communication calls (waiting or packing: what the step paid),
// "*.total" spans from the start of an operation to its completion (what
// an overlap could at most hide). They are equal while a call blocks.
#pragma once
#include <chrono>
#include <map>
#include <string>

namespace h3d {

namespace prof {
constexpr const char* kHaloTotal = "halo.total";
constexpr const char* kHaloExposed = "halo.exposed";
constexpr const char* kAllreduceTotal = "allreduce.total";
constexpr const char* kAllreduceExposed = "allreduce.exposed";
constexpr const char* kDataWait = "data.wait";
constexpr const char* kOptimizer = "optimizer";
constexpr const char* kStep = "step";
}  // namespace prof

class Profiler {
 public:
  static Profiler& instance();
  bool enabled() const { return enabled_; }
  void enable(bool on) { enabled_ = on; }
  void add(const std::string& name, double seconds) {
    if (enabled_) seconds_[name] += seconds;
  }
  // Makes `name` appear (with 0) even if never timed: every rank reports
  // the same names.
  void declare(const std::string& name) {
    if (enabled_) seconds_[name] += 0.0;
  }
  void clear() { seconds_.clear(); }
  const std::map<std::string, double>& seconds() const { return seconds_; }

  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

 private:
  bool enabled_ = false;
  std::map<std::string, double> seconds_;
};

// Times the enclosing block into one or two names (a null first name: not
// timed).
class ProfileScope {
 public:
  explicit ProfileScope(const char* a, const char* b = nullptr) : a_(a ? a : ""), b_(b), on_(a != nullptr) {
    if (on_ && Profiler::instance().enabled()) t0_ = Profiler::now();
  }
  explicit ProfileScope(const std::string& a) : ProfileScope(a.c_str()) {}
  ~ProfileScope() {
    auto& p = Profiler::instance();
    if (!on_ || !p.enabled()) return;
    double dt = Profiler::now() - t0_;
    p.add(a_, dt);
    if (b_) p.add(b_, dt);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  std::string a_;
  const char* b_;
  bool on_;
  double t0_ = 0;
};

}  // namespace h3d
