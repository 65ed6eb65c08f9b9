#include "hybrid3d/data/open_data.hpp"

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/hdf5_segmentation.hpp"
#include "hybrid3d/data/hdf5_source.hpp"
#include "hybrid3d/data/nifti_segmentation.hpp"
#include "hybrid3d/data/synthetic_segmentation.hpp"
#include "hybrid3d/data/synthetic_universe.hpp"

namespace h3d {

std::unique_ptr<SampleSource> open_dataset(const Comm& group, const std::string& spec, const DataRequest& r,
                                           const char* flag, int64_t count, int64_t offset) {
  const InputTransform transform = parse_transform(r.transform);
  const ReadMode mode = parse_read_mode(r.read_mode);  // a bad value is refused whatever the data
  if (spec == "synthetic") {
    if (r.segmentation) return std::make_unique<SyntheticSegmentation>(r.side, count, r.seed, offset);
    return std::make_unique<SyntheticUniverses>(group, r.side, count, r.seed, offset, transform);
  }
  if (!r.segmentation) return std::make_unique<Hdf5Universes>(group, spec, transform, mode, flag);
  H3D_USAGE_CHECK(mode == ReadMode::kIndependent,
                  "--read-mode " << r.read_mode << " is for CosmoFlow files so far; segmentation cases are read "
                                 << "independently (leave --read-mode out)");
  const IntensityWindow window = parse_intensity_window(r.intensity_window, "--intensity-window");
  if (NiftiSegmentation::recognises(spec))
    return std::make_unique<NiftiSegmentation>(group, spec, r.classes, window, r.side, flag);
  return std::make_unique<Hdf5Segmentation>(group, spec, r.classes, window, flag, r.require_labels);
}

void require_model_input(const SampleSource& data, const DataRequest& r, int64_t channels) {
  const auto ext = data.extent();
  H3D_USAGE_CHECK(ext[0] == r.side && ext[1] == ext[0] && ext[2] == ext[0],
                  "the data (" << data.describe() << ") does not match --input-size " << r.side << "; use --input-size "
                               << ext[0] << " (cubic samples, the size the model is trained at)");
  H3D_USAGE_CHECK(data.channels() == channels, "the data has " << data.channels() << " channels, the model expects "
                                                               << channels << " (--in-channels)");
}

}  // namespace h3d
