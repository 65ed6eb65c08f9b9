// Checkpoints: everything a run needs to continue, in a directory.
//
//   DIR/ckpt-000120/model.safetensors      weights and batch-norm statistics
//                                          (PyTorch names: loads in PyTorch)
//   DIR/ckpt-000120/optimizer.safetensors  momentum / Adam moments per parameter
//   DIR/ckpt-000120/meta.json              step, optimizer steps, the model and
//                                          run options, layout, version, and a
//                                          checksum (FNV-1a) of every tensor
//   DIR/latest                             the name of the newest checkpoint
//
// Everything else a run depends on is a pure function of (seed, step): the
// sample order of every epoch, dropout masks, augmentation draws, synthetic
// data, the learning-rate schedule. So the step is the whole of the
// "random state", and a run resumed under another layout sees the same
// samples and masks.
//
// Writing is atomic: files go into DIR/ckpt-N.tmp, are synced, the
// directory is synced and renamed, then `latest` is replaced by a rename.
// A crash at any moment leaves the previous checkpoint whole. Only the
// newest `keep` checkpoints are kept. Loading verifies every checksum; a
// damaged checkpoint is reported and the one before it used. Only rank 0
// calls these functions but the last (which broadcasts what rank 0 loads),
// so the directory need only be on rank 0's node.
#pragma once
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/models/network.hpp"
#include "hybrid3d/parallel/comm.hpp"
#include "hybrid3d/train/safetensors.hpp"
#include "hybrid3d/train/optimizer.hpp"

namespace h3d {

// A checkpoint could not be written (a full disk, a directory gone): thrown
// on every rank alike, so the job stops cleanly with one message (exit 5);
// the checkpoints written before are intact.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// The bytes one checkpoint of `net` takes, with `slots` optimizer tensors per
// parameter (SGD with momentum 1, Adam 2), headers included.
uint64_t checkpoint_bytes(Network& net, int slots);

// Before the first step: UsageError if `dir` has less free space than one
// checkpoint of `bytes`; returns a warning (else "") if it has less than the
// keep + 1 that exist while the newest is written.
std::string check_checkpoint_space(const std::string& dir, uint64_t bytes, int keep);

// Writes checkpoint `step` (call on one rank; `model`: every parameter
// whole and every buffer, whole_model_tensors(); `opt` is the optimizer's
// whole state, whole_optimizer_state()).
// `info` goes into meta.json as "run". Throws Error naming what failed; the
// previous checkpoint is untouched then, and the partial one removed.
void write_checkpoint(const std::string& dir, int64_t step, const std::vector<NamedTensor>& model,
                      const OptimizerState& opt, const nlohmann::json& info, int keep);

struct FoundCheckpoint {
  std::string path;      // empty: none usable
  std::string warnings;  // damaged ones skipped, one line each
};
// The newest checkpoint under `spec` whose checksums hold: `spec` is a
// checkpoint directory itself or a directory of them (newest first).
FoundCheckpoint find_checkpoint(const std::string& spec);

struct LoadedCheckpoint {
  int64_t step = 0;
  nlohmann::json run;        // the `info` it was written with
  OptimizerState optimizer;  // every slot saved, whole
  // The whole values of the parameters held in parts (Param::part), which
  // `net` cannot take whole.
  std::map<std::string, std::vector<float>> parts;
};
// Loads weights and buffers of a checkpoint found above into `net` (but
// for the parameters held in parts: into `parts`), and returns its
// optimizer state.
LoadedCheckpoint load_checkpoint(const std::string& path, Network& net);

// Collective: rank 0 loads `path` as above; every rank gets its weights,
// buffers and run record over `world`, and `opt` takes the part of the saved
// state that `slices` (whole_params, or this rank's shard) cover. A
// checkpoint rank 0 cannot load is a UsageError on every rank.
LoadedCheckpoint load_checkpoint_everywhere(const Comm& world, const std::string& path, Network& net, Optimizer& opt,
                                            const std::vector<ParamSlice>& slices);

}  // namespace h3d
