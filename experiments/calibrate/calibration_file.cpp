// calibration_file.cpp: a `kvlab calibrate` output read back as cost-model terms, for the
// simulate kind's `calibration` axis (see calibrate.h).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/calibrate/calibrate.h"
#include "experiments/h5/durable.h"
#include "experiments/h5/h5.h"
#include "experiments/results/result_file.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::exp {

DecodeCalibrationFile read_decode_calibration(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0)
    throw InvalidArgument("calibration file " + path +
                          " does not exist or is unreadable (make one with kvlab "
                          "calibrate RESULTS.h5 --out " +
                          path + ")");
  if (access(h5::DurableFile::journal_path(path).c_str(), F_OK) == 0)
    throw ResultFileError(path + " has an interrupted commit: run `kvlab recover " + path +
                          "` first");
  if (!h5::File::is_hdf5(path))
    throw ResultFileError("calibration file " + path + " is not an HDF5 file");
  DecodeCalibrationFile out;
  out.path = path;
  try {
    h5::File f = h5::File::open(path);
    ResultFile::check_schema(f, path);
    const h5::Table t = h5::Table::open(f, "index");
    const auto kind = t.read_strings("kind"), status = t.read_strings("status");
    std::vector<size_t> rows;
    for (size_t i = 0; i < kind.size(); ++i)
      if (kind[i] == "calibrate" && status[i] == "ok") rows.push_back(i);
    if (rows.empty())
      throw InvalidArgument(
          path + " holds no calibrate point with status ok (make one with kvlab calibrate)");
    if (rows.size() > 1)
      throw InvalidArgument(
          path + " holds " + std::to_string(rows.size()) +
          " calibrate points; a simulation needs a file with exactly one (kvlab calibrate --out)");
    const size_t i = rows.front();
    auto num = [&](const char* c) {
      if (!t.has_column(c))
        throw ResultFileError(path + ": /index lacks the calibrate column '" + std::string(c) +
                              "'");
      const double v = t.read_doubles(c)[i];
      if (!std::isfinite(v))
        throw ResultFileError(path + ": calibrate metric " + c + " is not finite");
      return v;
    };
    sim::DecodeAttentionModelFit& fit = out.fit;
    fit.read_ceiling_bytes_per_s = num("fit_read_ceiling_bytes_per_s");
    fit.fixed_s = num("fixed_us") * 1e-6;
    fit.graph_fixed_s = num("graph_fixed_us") * 1e-6;
    fit.graph_fixed_fitted = num("graph_fixed_fitted") != 0;
    fit.mem_efficiency = num("fallback_efficiency");
    out.gpu_name = t.read_strings("gpu_name")[i];
    const h5::Group g = f.open_group(t.read_strings("group")[i]);
    const h5::Table formats = h5::Table::open(g, "formats");
    const auto names = formats.read_strings("kv_format");
    const auto eff = formats.read_doubles("efficiency");
    const auto n = formats.read_ints("records");
    char buf[160];
    std::snprintf(buf, sizeof buf, "fixed %.2f us", fit.fixed_s * 1e6);
    out.summary = buf;
    if (fit.graph_fixed_fitted) {
      std::snprintf(buf, sizeof buf, " (graph %.2f us)", fit.graph_fixed_s * 1e6);
      out.summary += buf;
    }
    for (size_t k = 0; k < names.size(); ++k) {
      KvFormat fmt;
      try {
        fmt = parse_kv_format(names[k]);
      } catch (const kvlab::Error& e) {
        throw ResultFileError(path + ": formats trace: " + e.what());
      }
      if (!(std::isfinite(eff[k]) && eff[k] > 0))
        throw ResultFileError(path + ": formats trace: efficiency of " + names[k] + " is not > 0");
      fit.format_efficiency[fmt] = eff[k];
      fit.format_records[fmt] = n[k];
      std::snprintf(buf, sizeof buf, ", %s %.3f", names[k].c_str(), eff[k]);
      out.summary += buf;
    }
    std::snprintf(buf, sizeof buf, " of %.3g B/s (others %.3f)", fit.read_ceiling_bytes_per_s,
                  fit.mem_efficiency);
    out.summary += buf;
  } catch (const h5::Error& e) {
    throw ResultFileError(path + ": not a readable calibration (" + e.what() + ")");
  }
  return out;
}

sim::CostModelConfig apply_decode_calibration(const DecodeCalibrationFile& cal,
                                              const sim::GpuSpec& gpu, sim::CostModelConfig cfg) {
  if (cal.gpu_name != gpu.name)
    throw InvalidArgument("calibration " + cal.path + " was fitted on " + cal.gpu_name +
                          ", the simulation runs on " + gpu.name +
                          ": calibrate with timings of that GPU");
  return sim::with_decode_attention_calibration(std::move(cfg), cal.fit, gpu);
}

}  // namespace kvlab::exp
