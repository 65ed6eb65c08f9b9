// Layer: one step of a network on local (per-rank) tensors.
//
// setup() is called once, before training, with the input's ActShape; it
// validates (a layout that cannot split this layer is a UsageError naming
// it), builds plans (halo exchange, primitive shapes) and returns the output
// ActShape. forward()/backward() then only execute.
//
// Spatial activations are [n, C, block] where block is this rank's box of
// `dist`; dense ones are [n, F], identical on every rank of a spatial group.
// n is the number of samples of this rank's data group.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid3d/backend/backend.hpp"
#include "hybrid3d/core/tensor.hpp"
#include "hybrid3d/parallel/distribution.hpp"
#include "hybrid3d/parallel/process_grid.hpp"

namespace h3d {

// How the gradient of a parameter is completed across ranks.
enum class GradReduce {
  kPartialSum,       // each rank holds a partial sum over its block/samples: sum over all ranks
  kGroupReplicated,  // identical on every rank of a group: sum over data groups only
  kComplete,         // already the global value (the layer reduced it itself)
  kReplicaSum,       // a part (Param::part) summed over this group's samples: sum over the replicas only
};

// A parameter held in parts, one per rank of a spatial group (LBANN's
// distributed fully connected layer): the whole is a [rows, cols] matrix,
// and this rank holds the columns `columns` of it, in that order, as a
// [rows, columns.size()] value and gradient. The parts of a group are
// disjoint and cover the whole; every data group holds the same parts.
struct ParamPart {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> columns;
};

struct Param {
  std::string name;  // PyTorch state_dict name
  Tensor value, grad;
  GradReduce reduce = GradReduce::kPartialSum;
  std::shared_ptr<const ParamPart> part;  // null: the whole value on every rank
  // The shape and size of the whole value (a checkpoint's tensor).
  std::vector<int64_t> whole_shape() const {
    return part ? std::vector<int64_t>{part->rows, part->cols} : value.shape();
  }
  int64_t whole_numel() const { return part ? part->rows * part->cols : value.numel(); }
};

// Non-trained state saved in checkpoints (batch-norm running statistics).
struct StateBuffer {
  std::string name;
  Tensor value;
  bool is_integer = false;  // saved as I64 (num_batches_tracked)
};

struct ActShape {
  bool spatial = true;
  int64_t channels = 0;  // spatial: C
  Distribution dist;     // spatial: the blocks
  int64_t features = 0;  // dense: F
  // --deterministic (see layers/deterministic.hpp): the fixed global tiles
  // on which layers form their partial sums over space, mapped through the
  // layers like `dist`; every block is a union of tiles.
  bool deterministic = false;
  Distribution tiles;
  std::vector<int64_t> local_shape(int64_t n, int spatial_rank) const;
  // The shape after a window op: blocks and tiles both go through it.
  ActShape through(const Window3D& w, const std::string& layer) const;
};

struct StepContext {
  Backend* backend = nullptr;
  const ProcessGrid* grid = nullptr;
  bool training = true;
  uint64_t seed = 0;
  int64_t step = 0;
  std::vector<int64_t> batch_positions;  // position in the global mini-batch of each local sample
  // Window layers compute their interior while the halo travels (off: the
  // blocking baseline that --halo-overlap off measures).
  bool overlap_halo = true;
};

// The one way a step's context is made, for training, validation, test
// evaluation and predict alike: the data group's samples are positions
// [first, first + count) of the global batch.
inline StepContext make_step_context(Backend* backend, const ProcessGrid* grid, uint64_t seed, bool overlap_halo,
                                     bool training, int64_t step, int64_t first, int64_t count) {
  StepContext ctx{backend, grid, training, seed, step, {}};
  ctx.overlap_halo = overlap_halo;
  for (int64_t p = first; p < first + count; ++p) ctx.batch_positions.push_back(p);
  return ctx;
}

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  const std::string& name() const { return name_; }

  virtual ActShape setup(const ActShape& in, const ProcessGrid& grid) = 0;
  virtual void forward(StepContext& ctx, const Tensor& x, Tensor& y) = 0;
  // x and y are the tensors of the forward pass; dx is overwritten. x or y
  // is empty when the layer said backward does not read it (below).
  virtual void backward(StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = 0;

  // Memory planning (see Network). What backward reads of the forward pass;
  // the network frees everything else as soon as it can.
  virtual bool backward_reads_input() const { return true; }
  virtual bool backward_reads_output() const { return true; }
  // forward() when nothing needs x afterwards: the layer may take x's
  // storage (in-place activations, halo-padded copies grown in place).
  // x is left empty.
  virtual void forward_consuming(StepContext& ctx, Tensor& x, Tensor& y) {
    forward(ctx, x, y);
    x.release();
  }
  // backward() when nothing needs dy afterwards: dx may take dy's storage.
  virtual void backward_consuming(StepContext& ctx, const Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) {
    backward(ctx, x, y, dy, dx);
    dy.release();
  }
  // backward_consuming() when nothing needs x afterwards either (the layer
  // before does not read its output in backward): dx may take x's storage
  // (a max pooling whose windows tile its input). x may be left empty.
  virtual void backward_consuming_input(StepContext& ctx, Tensor& x, const Tensor& y, Tensor& dy, Tensor& dx) {
    backward_consuming(ctx, x, y, dy, dx);
  }
  // forward_consuming() hands x's buffer on as y (pointwise layers).
  virtual bool in_place() const { return false; }
  // Floats the input's buffer should hold so that forward_consuming can
  // grow it in place into a halo-padded copy (0: no wish).
  virtual int64_t input_capacity_wish(int64_t /*n*/) const { return 0; }
  // Frees what forward saved for backward (after an inference forward).
  virtual void release_saved() {}
  // The first layer's input gradient is never used: it may skip it (dx is
  // then left empty).
  void set_input_grad_needed(bool needed) { input_grad_needed_ = needed; }
  virtual std::vector<Param*> params() { return {}; }
  virtual std::vector<StateBuffer*> buffers() { return {}; }
  // How much coarser (downsampling) or finer (upsampling) the output grid
  // is than the input's along each axis: a stride-2 convolution or pooling
  // downsamples by 2, a stride-2 transposed convolution upsamples by 2.
  // Network::alignment() multiplies them along the chain.
  virtual int64_t downsampling() const { return 1; }
  virtual int64_t upsampling() const { return 1; }
  // Fusion (Network::setup): the leaky ReLU right after this layer offers
  // itself; a layer that applies it to its own output (for free, in the
  // kernel that writes it) takes it and returns true.
  virtual bool absorb_leaky_relu(float /*slope*/) { return false; }
  // Fusion (Network::setup): the (leaky) ReLU right before this layer, of
  // this slope (0: plain ReLU), offers its backward; a layer whose backward
  // can apply it (it reads the ReLU's output, its input, anyway) takes it
  // and returns true.
  virtual bool absorb_relu_grad(float /*slope*/) { return false; }

 protected:
  std::string name_;
  bool input_grad_needed_ = true;
};

// Deterministic PyTorch-default initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// a pure function of (seed, parameter name, element index).
void init_uniform_fan_in(Tensor& t, int64_t fan_in, uint64_t seed, const std::string& name);
// A layer's "<layer>.weight" of `shape` and, when `bias` is given, its
// "<layer>.bias" of `bias_size`, both initialised as above, gradients zeroed.
void make_weight_and_bias(const std::string& layer, std::vector<int64_t> shape, int64_t fan_in, uint64_t seed,
                          Param& weight, Param* bias, int64_t bias_size);

}  // namespace h3d
