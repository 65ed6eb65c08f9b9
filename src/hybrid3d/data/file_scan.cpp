#include "hybrid3d/data/file_scan.hpp"

#include <glob.h>

#include <algorithm>
#include <cstring>

#include "hybrid3d/core/error.hpp"

namespace h3d {

std::vector<std::string> glob_sorted(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ScanResult> scan_in_parallel(const Comm& comm, const std::vector<std::string>& files,
                                         const std::function<ScanResult(const std::string&)>& inspect) {
  // Fixed-size records (error text kept to its first 400 bytes), each filled
  // by exactly one rank and zero elsewhere: a byte-wise maximum combines them.
  constexpr size_t kText = 400;
  struct Record {
    int64_t v[8];
    char error[kText];
  };
  const size_t n = files.size();
  std::vector<Record> recs(n);
  std::memset(recs.data(), 0, n * sizeof(Record));
  for (size_t i = size_t(comm.rank()); i < n; i += size_t(comm.size())) {
    ScanResult r;
    try {
      r = inspect(files[i]);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    for (size_t k = 0; k < 8; ++k) recs[i].v[k] = r.v[k];
    std::strncpy(recs[i].error, r.error.c_str(), kText - 1);
  }
  // Each record is filled by one rank and zero on the others: the bytewise
  // max over ranks is the filled one.
  comm.allreduce(reinterpret_cast<uint8_t*>(recs.data()), int64_t(n * sizeof(Record)), ReduceOp::kMax);
  std::vector<ScanResult> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].error = std::string(recs[i].error, strnlen(recs[i].error, kText));
    for (size_t k = 0; k < 8; ++k) out[i].v[k] = recs[i].v[k];
  }
  return out;
}

void refuse_bad_files(const char* flag, const std::string& spec, const std::vector<std::string>& files,
                      const std::vector<ScanResult>& results) {
  std::ostringstream bad;
  int nbad = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].error.empty()) continue;
    if (nbad < 10) bad << "\n  '" << files[i] << "' " << results[i].error;
    ++nbad;
  }
  H3D_USAGE_CHECK(nbad == 0, flag << " '" << spec << "': " << nbad << " of " << files.size() << " files are unusable"
                                  << (nbad > 10 ? " (the first 10)" : "") << ":" << bad.str());
}

}  // namespace h3d
