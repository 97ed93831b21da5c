// calibrate.h: `kvlab calibrate`: the sim's decode-attention cost model fitted to measured
// GPU timings, and the fidelity table (predicted vs measured decode-attention time on the
// H100; the target is a median error of at most 10 %).
//
//   kvlab calibrate RESULTS.h5 [more.h5 ...] [--gpu auto|NAME] [--version best|NAME]
//                   [--holdout EXPR] [--out CAL.h5]
//
// Input: the ok, timed decode_attention points of kvlab result files (decode_records.h).
// Models, all predicting seconds from the bytes a call must move (sim/cost/roofline.h):
//   uncalibrated  bytes / R, R = the read ceiling measured in the same run (the files'
//                 provenance; the GPU table's measured figure when a file has none);
//   pooled        fixed + bytes / (R * efficiency): the sim's original two-term calibration
//                 (calibrate_decode_attention), kept as the "before" of the table;
//   calibrated    fixed(launch) + bytes / (R * efficiency(format)): the extended model of
//                 fit_decode_attention_model (calibration.h): eager and CUDA-graph calls get
//                 their own overhead, each KV format its own achieved bandwidth fraction.
// Out-of-sample errors: leave-one-out over the fitted records (always), and a train/test
// split when --holdout EXPR is given (a sweep `where`-style expression over the record's
// axes: the records it selects are left out of the fit and reported as the test set).
//
// Output: a kvlab result file (schema kvlab.results v1) holding one point of kind
// "calibrate" (the calibrate bench): index metrics = the fitted terms and the error
// summary; traces `fidelity` (one row per record: shape, bytes, every prediction, measured,
// errors) and `formats` (efficiency per KV format). analysis/figures/cost_model.py draws predicted
// vs measured from it; `kvlab simulate --set calibration=CAL.h5` (the simulate kind's `calibration`
// axis) times its steps with the fitted model. A sweep may also list `kind = calibrate` studies
// (axes: results, gpu, version, holdout), within the config syntax: no value there may hold '=',
// ',', ';' or ':' (peer versions and holdouts with
// ==, >=, <=, != need `kvlab calibrate`, which builds its point directly).
// Bad input (missing file, another schema, no decode_attention points, unknown GPU or
// version, a malformed holdout, records that cannot determine the model): exit code 2.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/calibrate/decode_records.h"
#include "sim/cost/calibration.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"

namespace kvlab::exp {

struct CalibrateRequest {
  std::vector<std::string> files;
  std::string gpu = "auto";      // a GPU of data/gpus/gpus.csv, or auto: the files' device
  std::string version = "best";  // best: the fastest kvlab version per shape; or a name
  std::string holdout = "none";  // none, or an expression selecting the test records
};

struct CalibrateResult {
  DecodeSelection selection;
  sim::GpuSpec gpu;                     // the table's entry with the files' measured read ceiling
  std::string ceiling_source;           // where R came from
  std::vector<bool> heldout;            // per record: in the test set
  sim::DecodeAttentionModelFit pooled;  // fitted on the training records
  sim::DecodeAttentionModelFit model;
  // Per record (selection order), seconds; the LOO entries are NaN for held-out records.
  std::vector<double> bytes, predicted_uncalibrated, predicted_pooled, predicted, predicted_loo,
      predicted_pooled_loo;
  struct Errors {  // |predicted - measured| / measured over a set of records
    double median = 0, max = 0;
    int64_t count = 0;
  };
  Errors train_uncalibrated, train_pooled, train_pooled_loo, train, train_loo;
  Errors test_uncalibrated, test_pooled, test;  // count 0 without --holdout
};

// Resolves the files (as given, else data/... through sim::find_data_file), reads and
// selects the records, fits both models and predicts every record. InvalidArgument for
// bad input (see the file header).
CalibrateResult run_calibration(const CalibrateRequest& request);

// The GPU of the table a device name belongs to ("NVIDIA H100 80GB HBM3" -> H100-SXM5-80GB):
// the entry whose short name (before the first '-') is a word of the device name.
// InvalidArgument naming the device and the table's GPUs when none matches.
const sim::GpuSpec& gpu_for_device(const std::vector<sim::GpuSpec>& table,
                                   const std::string& device_name);

// A calibration read back from a `kvlab calibrate` output file: the one ok calibrate point.
struct DecodeCalibrationFile {
  std::string path;
  std::string gpu_name;              // the GPU table entry it was fitted for
  std::string summary;               // "fixed 9.8 us (graph 7.4 us), efficiency bf16 0.95 ..."
  sim::DecodeAttentionModelFit fit;  // the fitted terms (no per-record data)
};
// InvalidArgument / ResultFileError: not a result file, no ok calibrate point or several.
DecodeCalibrationFile read_decode_calibration(const std::string& path);
// cfg with the file's calibration, for a simulation on `gpu`: InvalidArgument when the
// calibration was fitted for another GPU.
sim::CostModelConfig apply_decode_calibration(const DecodeCalibrationFile& cal,
                                              const sim::GpuSpec& gpu, sim::CostModelConfig cfg);

std::unique_ptr<Bench> make_calibrate_bench();

// The `kvlab calibrate` subcommand (cli.cpp dispatches to it): exit code as cli.h says.
int cmd_calibrate(const std::vector<std::string>& args, const std::vector<std::string>& full_argv,
                  std::ostream& out);

}  // namespace kvlab::exp
