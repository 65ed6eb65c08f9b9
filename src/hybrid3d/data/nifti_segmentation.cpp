#include "hybrid3d/data/nifti_segmentation.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "hybrid3d/core/error.hpp"
#include "hybrid3d/data/file_scan.hpp"
#include "hybrid3d/data/nifti_io.hpp"

namespace h3d {

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::string base_name(const std::string& p) {
  const auto s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// The pairs under `path`: (image, label or empty when the image has none).
void find_pairs(const std::string& path, std::vector<std::string>& images, std::vector<std::string>& labels) {
  if (!is_dir(path)) {  // one image file; its label partner if one is there
    images.push_back(path);
    std::string partner;
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    const std::string name = base_name(path);
    if (name.rfind("volume-", 0) == 0) partner = dir + "/segmentation-" + name.substr(7);
    if (dir.size() >= 8 && dir.compare(dir.size() - 8, 8, "imagesTr") == 0)
      partner = dir.substr(0, dir.size() - 8) + "labelsTr/" + name;
    labels.push_back(!partner.empty() && exists(partner) ? partner : "");
    return;
  }
  if (is_dir(path + "/imagesTr")) {  // the Decathlon layout
    for (const auto& img : glob_sorted(path + "/imagesTr/*.nii*")) {
      if (base_name(img)[0] == '.') continue;  // the Decathlon's macOS ._ files
      images.push_back(img);
      labels.push_back(path + "/labelsTr/" + base_name(img));
    }
    return;
  }
  for (const auto& img : glob_sorted(path + "/volume-*.nii*")) {  // LiTS
    images.push_back(img);
    labels.push_back(path + "/segmentation-" + base_name(img).substr(7));
  }
}

}  // namespace

bool NiftiSegmentation::recognises(const std::string& path) {
  if (!is_dir(path)) return is_nifti_path(path);
  return is_dir(path + "/imagesTr") || !glob_sorted(path + "/volume-*.nii*").empty();
}

NiftiSegmentation::NiftiSegmentation(const Comm& comm, const std::string& path, int64_t classes,
                                     IntensityWindow window, int64_t side, const char* flag)
    : pattern_(path), classes_(classes), side_(side), window_(window) {
  find_pairs(path, images_, labels_);
  H3D_USAGE_CHECK(!images_.empty(), flag << " '" << path << "': no NIfTI images found (a .nii / .nii.gz file, a "
                                         << "directory with imagesTr/ and labelsTr/, or volume-N / segmentation-N files)");
  // v: D, H, W of the image, has labels.
  std::vector<ScanResult> results = scan_in_parallel(comm, images_, [&](const std::string& img) {
    const size_t i = size_t(std::find(images_.begin(), images_.end(), img) - images_.begin());
    ScanResult r;
    const NiftiInfo im = read_nifti_info(img);
    const std::string& lab = labels_[i];
    if (!lab.empty()) {
      if (!exists(lab)) H3D_SCAN_FAIL("has no label file '" << lab << "'");
      NiftiInfo li;
      try {
        li = read_nifti_info(lab);
      } catch (const std::exception& e) {
        H3D_SCAN_FAIL("has a label file '" << lab << "' that " << e.what());
      }
      if (!li.integer) H3D_SCAN_FAIL("has labels '" << lab << "' that are not integers");
      if (li.extent != im.extent)
        H3D_SCAN_FAIL("is " << im.extent[0] << "x" << im.extent[1] << "x" << im.extent[2] << " but its labels '" << lab
                            << "' are " << li.extent[0] << "x" << li.extent[1] << "x" << li.extent[2]);
    }
    r.v = {im.extent[0], im.extent[1], im.extent[2], int64_t(!lab.empty()), 0, 0, 0, 0};
    return r;
  });
  refuse_bad_files(flag, path, images_, results);
  for (const auto& r : results) {
    sizes_.push_back({r.v[0], r.v[1], r.v[2]});
    has_labels_ = has_labels_ && r.v[3];
  }
  if (side_ > 0) {
    extent_ = {side_, side_, side_};
  } else {
    extent_ = sizes_[0];
    for (const auto& s : sizes_)
      H3D_USAGE_CHECK(s == extent_, flag << " '" << path << "': cases of different sizes; give one case to predict");
  }
}

void NiftiSegmentation::load(int64_t index, const Box& box, float* out, float* target) {
  const auto& E = sizes_.at(size_t(index));
  // The cube's box in case coordinates (centred), and the part inside the case.
  Box in_case = box, inside;
  for (int d = 0; d < 3; ++d) {
    const int64_t off = side_ > 0 ? (E[size_t(d)] - side_) / 2 : 0;
    in_case.r[size_t(d)] = Range{box.r[size_t(d)].lo + off, box.r[size_t(d)].hi + off};
  }
  const Box whole{{Range{0, E[0]}, Range{0, E[1]}, Range{0, E[2]}}};
  inside = in_case.intersect(whole);
  const float pad = window_.on ? window_.lo : 0.0f;
  const int64_t n = box.volume();
  std::fill_n(out, n, pad);
  std::fill_n(target, n, 0.0f);
  if (!inside.empty()) {
    const auto ie = inside.extents(), be = box.extents();
    scratch_.resize(size_t(inside.volume()));
    auto place = [&](float* dst) {
      for (int64_t z = 0; z < ie[0]; ++z)
        for (int64_t y = 0; y < ie[1]; ++y)
          for (int64_t x = 0; x < ie[2]; ++x) {
            const int64_t bz = z + inside.r[0].lo - in_case.r[0].lo, by = y + inside.r[1].lo - in_case.r[1].lo,
                          bx = x + inside.r[2].lo - in_case.r[2].lo;
            dst[(bz * be[1] + by) * be[2] + bx] = scratch_[size_t((z * ie[1] + y) * ie[2] + x)];
          }
    };
    read_nifti_box(images_[size_t(index)], inside, scratch_.data());
    place(out);
    if (!labels_[size_t(index)].empty()) {
      read_nifti_box(labels_[size_t(index)], inside, scratch_.data());
      place(target);
    }
  }
  window_.apply(out, n);
}

std::string NiftiSegmentation::describe() const {
  std::ostringstream os;
  os << images_.size() << " NIfTI case(s) from '" << pattern_ << "'";
  if (side_ > 0) os << ", each cut or padded to " << side_ << "^3 around its centre";
  if (window_.on) os << ", intensity window " << window_.lo << ".." << window_.hi;
  return os.str();
}

}  // namespace h3d
