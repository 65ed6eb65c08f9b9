#include "hybrid3d/train/checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/core/rng.hpp"
#include "hybrid3d/layers/param_part.hpp"
#include "hybrid3d/train/safetensors.hpp"

namespace h3d {

namespace {

constexpr const char* kVersion = "hybrid3d 0.5";

std::string checksum(const float* v, size_t n) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(v, n * sizeof(float))));
  return buf;
}

void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) H3D_THROW(Error, "checkpoint: cannot open '" << path << "' to sync it: " << std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) H3D_THROW(Error, "checkpoint: cannot sync '" << path << "': " << std::strerror(errno));
}

std::string ckpt_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%06lld", static_cast<long long>(step));
  return buf;
}

// The checkpoint directories under `dir`, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("ckpt-", 0) == 0 && n.find(".tmp") == std::string::npos) out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

void remove_tree(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ::unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  ::rmdir(dir.c_str());
}

nlohmann::json read_meta(const std::string& path) {
  std::ifstream f(path + "/meta.json");
  if (!f) throw std::runtime_error("has no readable meta.json");
  nlohmann::json m;
  try {
    f >> m;
  } catch (const std::exception&) {
    throw std::runtime_error("has a malformed meta.json");
  }
  // Every field used later is checked here, so a hand-edited or damaged
  // meta.json is reported like any other damage (and the previous one used).
  auto ok = [&](const char* key, bool (nlohmann::json::*is)() const noexcept) {
    return m.is_object() && m.contains(key) && (m[key].*is)();
  };
  if (!ok("step", &nlohmann::json::is_number_unsigned) || !ok("checksums", &nlohmann::json::is_object) ||
      !ok("run", &nlohmann::json::is_object) ||
      (m.contains("optimizer_steps") && !m["optimizer_steps"].is_number_unsigned()))
    throw std::runtime_error("has a meta.json without a valid step, checksums or run");
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const auto& sums = m["checksums"].contains(file) ? m["checksums"][file] : nlohmann::json();
    if (!sums.is_object()) throw std::runtime_error(std::string("has a meta.json without checksums of ") + file);
    for (const auto& v : sums)
      if (!v.is_string()) throw std::runtime_error(std::string("has a meta.json with a malformed checksum of ") + file);
  }
  return m;
}

// Loads both files and checks every tensor against meta.json; throws
// runtime_error saying what is wrong.
void verified(const std::string& path, const nlohmann::json& meta, std::map<std::string, LoadedTensor>& model,
              std::map<std::string, LoadedTensor>& optim) {
  for (auto* pair : {&model, &optim}) {
    const char* file = pair == &model ? "model.safetensors" : "optimizer.safetensors";
    try {
      *pair = load_safetensors(path + "/" + file);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("has a damaged ") + file + " (" + e.what() + ")");
    }
    const auto& sums = meta["checksums"][file];
    for (auto it = sums.begin(); it != sums.end(); ++it) {
      auto t = pair->find(it.key());
      if (t == pair->end()) throw std::runtime_error(std::string(file) + " lacks tensor '" + it.key() + "'");
      if (checksum(t->second.data.data(), t->second.data.size()) != it.value().get<std::string>())
        throw std::runtime_error(std::string(file) + ": tensor '" + it.key() + "' fails its checksum");
    }
  }
}

// The three files of checkpoint `step` in `tmp`, synced.
void write_checkpoint_files(const std::string& tmp, int64_t step, const std::vector<NamedTensor>& model,
                            const OptimizerState& st, const nlohmann::json& info) {
  nlohmann::json sums = {{"model.safetensors", nlohmann::json::object()},
                         {"optimizer.safetensors", nlohmann::json::object()}};
  for (const auto& t : model) sums["model.safetensors"][t.name] = checksum(t.tensor->data(), size_t(t.tensor->numel()));
  std::vector<Tensor> slots;
  slots.reserve(st.tensors.size());
  std::vector<NamedTensor> optim;
  for (const auto& t : st.tensors) {
    slots.emplace_back(std::vector<int64_t>{int64_t(t.second.size())});
    std::copy(t.second.begin(), t.second.end(), slots.back().data());
    optim.push_back({t.first, &slots.back(), false});
    sums["optimizer.safetensors"][t.first] = checksum(t.second.data(), t.second.size());
  }
  save_safetensors(tmp + "/model.safetensors", model, {{"step", std::to_string(step)}});
  save_safetensors(tmp + "/optimizer.safetensors", optim, {{"step", std::to_string(step)}});
  const nlohmann::json meta = {{"step", step},       {"optimizer_steps", st.steps}, {"version", kVersion},
                               {"run", info},        {"checksums", sums}};
  {
    std::ofstream f(tmp + "/meta.json");
    f << meta.dump(1) << "\n";
    f.flush();
    if (!f) H3D_THROW(Error, "checkpoint: cannot write '" << tmp << "/meta.json' (disk full?)");
  }
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "meta.json"}) sync_path(tmp + "/" + f, false);
  sync_path(tmp, true);
}

}  // namespace

uint64_t checkpoint_bytes(Network& net, int slots) {
  uint64_t floats = 0, tensors = 0;
  for (auto* p : net.params()) floats += uint64_t(p->whole_numel()) * uint64_t(1 + slots), tensors += 1 + slots;
  for (auto* b : net.buffers()) floats += uint64_t(b->value.numel()) * 2, ++tensors;  // I64 at most
  return 4 * floats + 256 * tensors + 4096;  // headers, meta.json with a checksum per tensor
}

std::string check_checkpoint_space(const std::string& dir, uint64_t bytes, int keep) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return "";  // unknown: the write will tell
  const uint64_t free_bytes = uint64_t(fs.f_bavail) * fs.f_frsize;
  const double mib = 1 << 20;
  H3D_USAGE_CHECK(free_bytes >= bytes, "--checkpoint-dir '" << dir << "' has " << free_bytes / mib
                                           << " MiB free, but one checkpoint of this model takes about "
                                           << bytes / mib << " MiB; free space there or choose another directory");
  const uint64_t peak = bytes * uint64_t(keep + 1);
  if (free_bytes >= peak) return "";
  std::ostringstream os;
  os.precision(3);
  os << "--checkpoint-dir '" << dir << "' has " << free_bytes / mib << " MiB free; --keep " << keep << " needs about "
     << peak / mib << " MiB (" << keep + 1 << " checkpoints while the newest is written). Training stops cleanly "
     << "(exit 5) if a checkpoint does not fit";
  return os.str();
}

void write_checkpoint(const std::string& dir, int64_t step, const std::vector<NamedTensor>& model,
                      const OptimizerState& opt, const nlohmann::json& info, int keep) {
  const std::string name = ckpt_name(step), final_dir = dir + "/" + name, tmp = final_dir + ".tmp";
  remove_tree(tmp);  // a leftover of a crash
  if (::mkdir(tmp.c_str(), 0777) != 0)
    H3D_THROW(Error, "checkpoint: cannot create '" << tmp << "': " << std::strerror(errno));
  try {
    write_checkpoint_files(tmp, step, model, opt, info);
  } catch (...) {
    remove_tree(tmp);  // give the space back: the disk may be full
    throw;
  }
  remove_tree(final_dir);  // the same step written before (a rerun)
  if (std::rename(tmp.c_str(), final_dir.c_str()) != 0)
    H3D_THROW(Error, "checkpoint: cannot rename '" << tmp << "': " << std::strerror(errno));
  const std::string latest = dir + "/latest", latest_tmp = latest + ".tmp";
  {
    std::ofstream f(latest_tmp);
    f << name << "\n";
    f.flush();
    if (!f) H3D_THROW(Error, "checkpoint: cannot write '" << latest_tmp << "'");
  }
  sync_path(latest_tmp, false);
  if (std::rename(latest_tmp.c_str(), latest.c_str()) != 0)
    H3D_THROW(Error, "checkpoint: cannot rename '" << latest_tmp << "': " << std::strerror(errno));
  sync_path(dir, true);
  const std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = size_t(std::max(keep, 1)); i < all.size(); ++i) remove_tree(dir + "/" + all[i]);
}

FoundCheckpoint find_checkpoint(const std::string& spec) {
  FoundCheckpoint found;
  std::vector<std::string> candidates;
  struct stat st {};
  if (::stat((spec + "/meta.json").c_str(), &st) == 0) {
    candidates.push_back(spec);
  } else {
    for (const auto& n : list_checkpoints(spec)) candidates.push_back(spec + "/" + n);
  }
  for (const auto& c : candidates) {
    try {
      const nlohmann::json meta = read_meta(c);
      std::map<std::string, LoadedTensor> model, optim;
      verified(c, meta, model, optim);
      found.path = c;
      return found;
    } catch (const std::exception& e) {
      found.warnings += "checkpoint '" + c + "' " + e.what() + "; trying the one before\n";
    }
  }
  return found;
}

LoadedCheckpoint load_checkpoint(const std::string& path, Network& net) {
  nlohmann::json meta;
  std::map<std::string, LoadedTensor> model, optim;
  try {
    meta = read_meta(path);
    verified(path, meta, model, optim);
  } catch (const std::exception& e) {
    H3D_THROW(UsageError, "--resume: checkpoint '" << path << "' " << e.what());
  }
  LoadedCheckpoint out;
  for (auto* p : net.params()) {
    auto it = model.find(p->name);
    H3D_USAGE_CHECK(it != model.end() && it->second.shape == p->whole_shape(),
                    "--resume: checkpoint '" << path << "' has no tensor '" << p->name << "' of shape "
                                             << Tensor(p->whole_shape()).shape_str() << " (another model?)");
    if (p->part)
      out.parts[p->name] = std::move(it->second.data);
    else
      std::copy(it->second.data.begin(), it->second.data.end(), p->value.data());
  }
  for (auto* b : net.buffers()) {
    auto it = model.find(b->name);
    H3D_USAGE_CHECK(it != model.end() && int64_t(it->second.data.size()) == b->value.numel(),
                    "--resume: checkpoint '" << path << "' has no buffer '" << b->name << "'");
    std::copy(it->second.data.begin(), it->second.data.end(), b->value.data());
  }
  out.optimizer.steps = meta.value("optimizer_steps", int64_t(0));
  for (auto& kv : optim) out.optimizer.tensors.push_back({kv.first, kv.second.data});
  out.step = meta["step"].get<int64_t>();
  out.run = meta["run"];
  return out;
}

LoadedCheckpoint load_checkpoint_everywhere(const Comm& world, const std::string& path, Network& net, Optimizer& opt,
                                            const std::vector<ParamSlice>& slices) {
  LoadedCheckpoint c;
  std::string run_text;
  const std::string failure = run_on_root(world, [&] {
    c = load_checkpoint(path, net);
    run_text = c.run.dump();
  });
  if (!failure.empty()) throw UsageError(failure);
  world.bcast(&c.step, sizeof c.step, 0);
  broadcast_string(world, run_text);
  if (world.rank() != 0) c.run = nlohmann::json::parse(run_text);
  for (auto* p : net.params())
    if (p->part)
      scatter_whole(world, *p, world.rank() == 0 ? c.parts[p->name].data() : nullptr, p->value.data());
    else
      world.bcast(p->value.data(), p->value.numel() * int64_t(sizeof(float)), 0);
  c.parts.clear();
  for (auto* b : net.buffers()) world.bcast(b->value.data(), b->value.numel() * int64_t(sizeof(float)), 0);
  OptimizerState& st = c.optimizer;
  int64_t count = int64_t(st.tensors.size());
  world.bcast(&st.steps, sizeof st.steps, 0);
  world.bcast(&count, sizeof count, 0);
  st.tensors.resize(size_t(count));
  for (auto& t : st.tensors) {
    broadcast_string(world, t.first);
    int64_t n = int64_t(t.second.size());
    world.bcast(&n, sizeof n, 0);
    t.second.resize(size_t(n));
    world.bcast(t.second.data(), n * int64_t(sizeof(float)), 0);
  }
  // The slots of a parameter held in parts: this rank's part of each.
  for (auto* p : net.params())
    if (p->part)
      for (auto& t : st.tensors)
        for (const auto& k : opt.slot_names())
          if (t.first == p->name + "." + k && int64_t(t.second.size()) == p->whole_numel()) {
            std::vector<float> mine(size_t(p->value.numel()));
            take_part(*p, t.second.data(), mine.data());
            t.second = std::move(mine);
          }
  opt.load_state(slices, st);
  return c;
}

}  // namespace h3d
