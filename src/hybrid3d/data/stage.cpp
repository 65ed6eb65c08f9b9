#include "hybrid3d/data/stage.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/parallel/output_dir.hpp"

namespace h3d {

namespace {

std::string base_name(const std::string& p) {
  const auto s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// The copy is current: same size, same modification time as the source.
bool up_to_date(const struct stat& src, const std::string& dst) {
  struct stat st{};
  return ::stat(dst.c_str(), &st) == 0 && st.st_size == src.st_size && st.st_mtim.tv_sec == src.st_mtim.tv_sec &&
         st.st_mtim.tv_nsec == src.st_mtim.tv_nsec;
}

// Copies src to dst through dst.tmp.HOST.PID; returns the bytes copied.
// Throws runtime_error naming the file.
int64_t copy_file(const std::string& src, const struct stat& st, const std::string& dst) {
  char host[64] = "host";
  gethostname(host, sizeof host - 1);
  const std::string tmp = dst + ".tmp." + host + "." + std::to_string(getpid());
  const int in = ::open(src.c_str(), O_RDONLY);
  if (in < 0) throw std::runtime_error("cannot read '" + src + "': " + std::strerror(errno));
  const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (out < 0) {
    const int e = errno;
    ::close(in);
    throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(e));
  }
  std::vector<char> buf(8 << 20);
  int64_t total = 0;
  std::string failure;
  while (failure.empty()) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0) failure = "cannot read '" + src + "': " + std::strerror(errno);
    if (n <= 0) break;
    for (ssize_t off = 0; off < n && failure.empty();) {
      const ssize_t w = ::write(out, buf.data() + off, size_t(n - off));
      if (w < 0)
        failure = "cannot write '" + tmp + "': " + std::strerror(errno);
      else
        off += w;
    }
    total += n;
  }
  ::close(in);
  if (::close(out) != 0 && failure.empty()) failure = "cannot write '" + tmp + "': " + std::strerror(errno);
  if (failure.empty() && total != int64_t(st.st_size))
    failure = "'" + src + "' changed size while it was copied";
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (failure.empty() && utimensat(AT_FDCWD, tmp.c_str(), times, 0) != 0)
    failure = "cannot set the time of '" + tmp + "': " + std::strerror(errno);
  if (failure.empty() && std::rename(tmp.c_str(), dst.c_str()) != 0)
    failure = "cannot rename '" + tmp + "' to '" + dst + "': " + std::strerror(errno);
  if (!failure.empty()) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(failure);
  }
  return total;
}

// Every rank learns whether one failed; all throw the lowest failing rank's message.
void agree_on_failure(const Comm& world, const std::string& error, const std::string& spec) {
  const int lowest = world.allreduce_min(error.empty() ? world.size() : world.rank());
  if (lowest == world.size()) return;
  char text[512] = {};
  if (world.rank() == lowest) std::snprintf(text, sizeof text, "%s", error.c_str());
  world.bcast(text, sizeof text, lowest);
  H3D_THROW(UsageError, "--stage-dir: staging '" << spec << "' failed: " << text);
}

}  // namespace

std::string stage_dataset(const Comm& world, const std::string& spec, const std::string& dir, const std::string& name,
                          bool quiet) {
  const std::vector<std::string> files = Hdf5Universes::expand(spec);
  H3D_USAGE_CHECK(!files.empty(), "'" << spec << "': no HDF5 files found to stage (give a directory of *.h5 files or a glob)");
  const std::string target = dir + "/" + name;
  Comm node = world.node();
  std::string error;
  std::vector<struct stat> st(files.size());
  try {
    // Nodes may fail apart from each other: every failure goes through agree_on_failure over the world.
    create_output_dir(node, target, "the staging directory");
    struct stat t{};
    if (::stat(target.c_str(), &t) != 0 || access(target.c_str(), W_OK) != 0)
      throw std::runtime_error("'" + target + "' is not a writable directory");
    for (size_t i = 0; i < files.size(); ++i) {
      if (::stat(files[i].c_str(), &st[i]) != 0)
        throw std::runtime_error("cannot read '" + files[i] + "': " + std::strerror(errno));
      struct stat parent{};
      const auto slash = files[i].find_last_of('/');
      const std::string src_dir = slash == std::string::npos ? "." : files[i].substr(0, std::max<size_t>(slash, 1));
      if (::stat(src_dir.c_str(), &parent) == 0 && parent.st_dev == t.st_dev && parent.st_ino == t.st_ino)
        throw std::runtime_error("'" + target + "' holds the dataset itself; give another --stage-dir");
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_failure(world, error, spec);

  std::vector<std::string> names(files.size());
  int64_t total_bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "%06zu_", i);
    names[i] = target + "/" + prefix + base_name(files[i]);
    total_bytes += int64_t(st[i].st_size);
  }
  // Rounds of one file per node rank, with one reduction per round for the
  // progress line (every node takes as many rounds as the smallest needs).
  const int64_t n = int64_t(files.size());
  const int64_t rounds = int64_t(world.allreduce_max(double((n + node.size() - 1) / node.size())));
  const int64_t nodes = world.allreduce_sum(int64_t(node.rank() == 0 ? 1 : 0));
  const auto t0 = std::chrono::steady_clock::now();
  double last_print = 0;
  int64_t mine[4] = {0, 0, 0, 0};  // files copied, files already there, bytes copied, bytes done (this rank)
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t i = r * node.size() + node.rank();
    if (i < n && error.empty()) {
      try {
        if (up_to_date(st[size_t(i)], names[size_t(i)])) {
          ++mine[1];
        } else {
          mine[2] += copy_file(files[size_t(i)], st[size_t(i)], names[size_t(i)]);
          ++mine[0];
        }
        mine[3] += int64_t(st[size_t(i)].st_size);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    agree_on_failure(world, error, spec);
    int64_t all[4] = {mine[0], mine[1], mine[2], mine[3]};
    world.allreduce(all, 4, ReduceOp::kSum);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (world.rank() == 0 && !quiet && (t - last_print > 2.0 || r + 1 == rounds)) {
      constexpr double kMiB = 1 << 20;
      std::printf("staging %s to %s on %lld node(s): %lld/%lld files (%lld copied, %lld already there), "
                  "%.0f/%.0f MiB, %.0f MiB/s\n",
                  name.c_str(), target.c_str(), (long long)nodes, (long long)(all[0] + all[1]),
                  (long long)(n * nodes), (long long)all[0], (long long)all[1], double(all[3]) / kMiB,
                  double(total_bytes * nodes) / kMiB, t > 0 ? double(all[2]) / kMiB / t : 0.0);
      std::fflush(stdout);
      last_print = t;
    }
  }
  // Leftovers of another dataset (or of an interrupted copy) would be read too.
  if (node.rank() == 0) {
    const std::set<std::string> keep(names.begin(), names.end());
    if (DIR* d = opendir(target.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string p = target + "/" + e->d_name;
        if (e->d_name[0] != '.' && !keep.count(p)) ::unlink(p.c_str());
      }
      closedir(d);
    }
  }
  world.barrier();
  return target;
}

}  // namespace h3d
