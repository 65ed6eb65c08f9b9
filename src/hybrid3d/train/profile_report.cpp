#include "hybrid3d/train/profile_report.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hybrid3d/core/buffer_pool.hpp"
#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/profiler.hpp"

namespace h3d {

namespace {

struct Spread {
  double min = 0, median = 0, max = 0, sum = 0;
};

// Gathers one value per rank to rank 0 and summarises it there.
Spread spread(const Comm& world, double v) {
  std::vector<double> all(size_t(world.size()));
  world.gather(&v, 1, all.data(), 0);
  Spread s;
  if (world.rank() != 0) return s;
  std::sort(all.begin(), all.end());
  size_t n = all.size();
  s.min = all.front();
  s.max = all.back();
  s.median = n % 2 ? all[n / 2] : 0.5 * (all[n / 2 - 1] + all[n / 2]);
  for (double x : all) s.sum += x;
  return s;
}

nlohmann::json to_json(const Spread& s) { return {{"min", s.min}, {"median", s.median}, {"max", s.max}}; }

}  // namespace

void report_profile(const ProcessGrid& grid, const std::vector<std::string>& layers, int64_t steps,
                    const std::string& json_path, bool print) {
  const Comm& world = grid.world();
  const auto& secs = Profiler::instance().seconds();
  // Every rank declared the same names; check before pairing them up.
  int64_t count = int64_t(secs.size());
  H3D_CHECK(world.allreduce_max(double(count)) == -world.allreduce_max(-double(count)),
            "--profile: the ranks timed different regions (an internal error)");
  const double per = 1.0 / double(std::max<int64_t>(steps, 1));
  std::map<std::string, Spread> regions;
  for (const auto& [name, t] : secs) regions[name] = spread(world, t * per);

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  Spread rss = spread(world, double(ru.ru_maxrss) / 1024.0);  // KiB -> MiB
  const BufferPool::Stats pool = BufferPool::instance().stats();
  Spread tensors = spread(world, double(pool.peak_bytes) / (1024.0 * 1024.0));
  if (world.rank() != 0) return;

  nlohmann::json j;
  j["layout"] = grid.describe();
  j["ranks"] = world.size();
  j["steps"] = steps;
  j["unit"] = "seconds per step; memory in MiB";
  for (const auto& [name, s] : regions) j["regions"][name] = to_json(s);
  j["memory"]["peak_rss_per_rank"] = to_json(rss);
  j["memory"]["peak_rss_sum_over_ranks"] = rss.sum;
  j["memory"]["peak_tensor_bytes_per_rank"] = to_json(tensors);  // MiB, like the rest (the name is kept)
  if (!json_path.empty()) {
    std::string tmp = json_path + ".tmp";
    {
      std::ofstream f(tmp);
      H3D_CHECK(f.good(), "--profile: cannot write '" << tmp << "'");
      f << j.dump(2) << "\n";
      H3D_CHECK(f.good(), "--profile: writing '" << tmp << "' failed");
    }
    H3D_CHECK(std::rename(tmp.c_str(), json_path.c_str()) == 0, "--profile: cannot rename to '" << json_path << "'");
  }
  if (!print) return;
  auto ms = [](double s) { return s * 1e3; };
  std::printf("profile over %lld steps, %d ranks (%s); ms per step, min / median / max over ranks\n", (long long)steps,
              world.size(), grid.describe().c_str());
  std::printf("  %-16s %28s %28s\n", "layer", "forward", "backward");
  for (const auto& l : layers) {
    const Spread &f = regions[l + ".forward"], &b = regions[l + ".backward"];
    std::printf("  %-16s %8.1f / %8.1f / %8.1f %8.1f / %8.1f / %8.1f\n", l.c_str(), ms(f.min), ms(f.median), ms(f.max),
                ms(b.min), ms(b.median), ms(b.max));
  }
  for (const char* c : {prof::kHaloTotal, prof::kHaloExposed, prof::kAllreduceTotal, prof::kAllreduceExposed,
                        prof::kDataWait, prof::kOptimizer, prof::kStep}) {
    const Spread& s = regions[c];
    std::printf("  %-16s %8.1f / %8.1f / %8.1f\n", c, ms(s.min), ms(s.median), ms(s.max));
  }
  std::printf("  peak RSS MiB     %8.0f / %8.0f / %8.0f   (sum over ranks %.0f)\n", rss.min, rss.median, rss.max,
              rss.sum);
  std::printf("  peak tensors MiB %8.0f / %8.0f / %8.0f\n", tensors.min, tensors.median, tensors.max);
  std::fflush(stdout);
}

void start_profile(const std::vector<std::string>& layers) {
  Profiler& profiler = Profiler::instance();
  profiler.enable(true);
  profiler.clear();
  for (const auto& name : layers) {
    profiler.declare(name + ".forward");
    profiler.declare(name + ".backward");
  }
  for (const char* c : {prof::kHaloTotal, prof::kHaloExposed, prof::kAllreduceTotal, prof::kAllreduceExposed,
                        prof::kDataWait, prof::kOptimizer, prof::kStep})
    profiler.declare(c);
}

}  // namespace h3d
