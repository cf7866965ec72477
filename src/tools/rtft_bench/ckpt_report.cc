#include "tools/rtft_bench/ckpt_report.h"

#include <functional>
#include <string>

namespace rtft::bench {
namespace {

using nlohmann::json;

double MedianOf(const std::vector<VariantResult>& runs,
                const std::function<double(const VariantResult&)>& field) {
  std::vector<double> v;
  for (const VariantResult& r : runs) v.push_back(field(r));
  return Median(v);
}

double MedianGbps(const std::vector<VariantResult>& runs, uint64_t bytes,
                  double VariantResult::*f) {
  return MedianOf(runs, [&](const VariantResult& r) { return Gbps(bytes, r.*f); });
}

json OrNull(double v) { return v > 0 ? json(v) : json(nullptr); }

json Common(const CkptMeasurements& m, const char* variant) {
  return json{{"name", "ckpt"},
              {"variant", variant},
              {"bytes", m.bytes},
              {"tensors", m.tensors},
              {"state", m.gpu ? "gpu" : "host"},
              {"repeat", m.raw.size()}};
}

json VariantLine(const CkptMeasurements& m, const char* variant,
                 const std::vector<VariantResult>& runs, double raw_gbps, double naive_gbps) {
  json j = Common(m, variant);
  j["blocking_s"] = MedianOf(runs, [](const VariantResult& r) { return r.blocking_s; });
  j["persist_s"] = MedianOf(runs, [](const VariantResult& r) { return r.persist_s; });
  const double capture_s = MedianOf(runs, [](const VariantResult& r) { return r.capture_s; });
  j["capture_s"] = OrNull(capture_s);
  j["capture_gbps"] =
      capture_s > 0 ? json(MedianGbps(runs, m.bytes, &VariantResult::capture_s)) : json(nullptr);
  j["persist_gbps"] = MedianGbps(runs, m.bytes, &VariantResult::persist_s);
  if (std::string(variant) == "rtft")
    j["call_s"] = MedianOf(runs, [](const VariantResult& r) { return r.call_s; });
  j["raw_gbps"] = raw_gbps;
  j["naive_gbps"] = naive_gbps;
  j["pcie_gbps"] = OrNull(m.pcie_gbps);
  j["io"] = runs.empty() ? "" : runs.front().io;
  j["direct_io"] = !runs.empty() && runs.front().direct_io;
  j["page_cache_dropped"] = m.page_cache_dropped;
  return j;
}

}  // namespace

void EmitCkptResults(const CkptMeasurements& m, JsonLines* out) {
  const double raw = MedianGbps(m.raw, m.bytes, &VariantResult::persist_s);
  const double naive = MedianGbps(m.naive, m.bytes, &VariantResult::persist_s);
  out->Emit(VariantLine(m, "raw", m.raw, raw, naive));
  out->Emit(VariantLine(m, "naive", m.naive, raw, naive));
  const json rt = VariantLine(m, "rtft", m.rtft, raw, naive);
  out->Emit(rt);

  const double persist = rt["persist_gbps"].get<double>();
  const double capture = rt["capture_gbps"].is_number() ? rt["capture_gbps"].get<double>() : 0;
  const double naive_blocking =
      MedianOf(m.naive, [](const VariantResult& r) { return r.blocking_s; });
  const double blocking_ratio =
      naive_blocking > 0 ? rt["blocking_s"].get<double>() / naive_blocking : 0;
  json s = Common(m, "summary");
  s["raw_gbps"] = raw;
  s["naive_gbps"] = naive;
  s["persist_gbps"] = persist;
  s["capture_gbps"] = OrNull(capture);
  s["blocking_s"] = rt["blocking_s"];
  s["pcie_gbps"] = OrNull(m.pcie_gbps);
  s["rtft_over_raw"] = raw > 0 ? persist / raw : 0;
  s["rtft_over_naive"] = naive > 0 ? persist / naive : 0;
  s["blocking_rtft_over_naive"] = blocking_ratio;
  s["capture_over_pcie"] = m.gpu && m.pcie_gbps > 0 ? json(capture / m.pcie_gbps) : json(nullptr);
  s["targets"] = {{"persist_ge_90pct_raw", persist >= kPersistOfRawTarget * raw},
                  {"persist_ge_4x_naive", persist >= kTimesNaiveTarget * naive},
                  {"blocking_lt_5pct_naive", blocking_ratio < kBlockingOfNaiveTarget},
                  {"gpu_capture_ge_85pct_pcie",
                   m.gpu ? json(capture >= kCaptureOfPcieTarget * m.pcie_gbps) : json(nullptr)}};
  out->Emit(s);
}

}  // namespace rtft::bench
