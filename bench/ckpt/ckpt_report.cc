#include "bench/ckpt/ckpt_report.h"

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

// GB/s, medians; each ratio the median over the runs of a restore over the raw read right
// before it (0 where there is none).
struct RestoreFigures {
  double raw_read = 0, raw_read_device = 0, host = 0, device = 0;
  double host_of_raw = 0, device_of_raw = 0;
  bool evicted = true;
};

RestoreFigures RestoreMedians(const CkptMeasurements& m) {
  RestoreFigures f;
  std::vector<double> raw, raw_device, host, device, host_of_raw, device_of_raw;
  auto of = [](double gbps, double raw_gbps) { return raw_gbps > 0 ? gbps / raw_gbps : 0; };
  for (const RestoreResult& r : m.restore) {
    raw.push_back(Gbps(r.raw_read_bytes, r.raw_read_s));
    host.push_back(Gbps(m.bytes, r.restore_s));
    host_of_raw.push_back(of(host.back(), raw.back()));
    if (m.gpu_restore) {
      raw_device.push_back(Gbps(r.raw_read_bytes, r.raw_read_device_s));
      device.push_back(Gbps(m.bytes, r.restore_device_s));
      device_of_raw.push_back(of(device.back(), raw_device.back()));
    }
    f.evicted &= r.page_cache_evicted;
  }
  auto median = [](const std::vector<double>& v) { return v.empty() ? 0 : Median(v); };
  f.raw_read = median(raw);
  f.raw_read_device = median(raw_device);
  f.host = median(host);
  f.device = median(device);
  f.host_of_raw = median(host_of_raw);
  f.device_of_raw = median(device_of_raw);
  return f;
}

void AddRestore(const RestoreFigures& f, json* j) {
  (*j)["raw_read_gbps"] = OrNull(f.raw_read);
  (*j)["raw_read_before_device_gbps"] = OrNull(f.raw_read_device);
  (*j)["restore_gbps"] = OrNull(f.host);
  (*j)["restore_device_gbps"] = OrNull(f.device);
  (*j)["restore_page_cache_evicted"] = f.evicted;
}

// blocking <= 1.2 x (state - pool) / raw, for a pool smaller than the state; null otherwise.
json BlockingOfDrain(const CkptMeasurements& m, const json& rt, double raw_gbps) {
  const uint64_t pool = m.rtft.empty() ? 0 : m.rtft.front().pool_bytes;
  if (pool >= m.bytes || raw_gbps <= 0) return nullptr;
  const double drain_s = static_cast<double>(m.bytes - pool) / (raw_gbps * 1e9);
  return rt["blocking_s"].get<double>() <= kBlockingOfDrainTarget * drain_s;
}

}  // namespace

void EmitCkptResults(const CkptMeasurements& m, JsonLines* out) {
  const double raw = MedianGbps(m.raw, m.bytes, &VariantResult::persist_s);
  const double naive = MedianGbps(m.naive, m.bytes, &VariantResult::persist_s);
  out->Emit(VariantLine(m, "raw", m.raw, raw, naive));
  out->Emit(VariantLine(m, "naive", m.naive, raw, naive));
  json rt = VariantLine(m, "rtft", m.rtft, raw, naive);
  const RestoreFigures restore = RestoreMedians(m);
  rt["pool_bytes"] = m.rtft.empty() ? 0 : m.rtft.front().pool_bytes;
  AddRestore(restore, &rt);
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
  s["pool_bytes"] = rt["pool_bytes"];
  AddRestore(restore, &s);
  s["restore_over_raw_read"] = OrNull(restore.host_of_raw);
  s["restore_device_over_raw_read"] = OrNull(restore.device_of_raw);
  auto met = [&](double of_raw) {
    return of_raw > 0 ? json(of_raw >= kRestoreOfRawReadTarget) : json(nullptr);
  };
  s["targets"] = {{"persist_ge_95pct_raw", persist >= kPersistOfRawTarget * raw},
                  {"blocking_lt_2pct_naive", blocking_ratio < kBlockingOfNaiveTarget},
                  {"gpu_capture_ge_90pct_pcie",
                   m.gpu ? json(capture >= kCaptureOfPcieTarget * m.pcie_gbps) : json(nullptr)},
                  {"blocking_le_1p2x_drain", BlockingOfDrain(m, rt, raw)},
                  {"restore_ge_90pct_raw_read", met(restore.host_of_raw)},
                  {"restore_device_ge_90pct_raw_read", met(restore.device_of_raw)}};
  out->Emit(s);
}

}  // namespace rtft::bench
