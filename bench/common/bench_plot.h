// --plot for every subcommand: writes the run's JSON lines next to the chart and, when python3
// with matplotlib is available, draws it with scripts/plot-bench.py. A missing plotter is a note
// on stderr, never a failure: the JSON lines are the result.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rtft::bench {

void WritePlot(const std::string& png_path, const std::vector<nlohmann::json>& lines);

}  // namespace rtft::bench
