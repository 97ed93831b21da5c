// scheme_axes.cpp: see scheme_axes.h.
#include "experiments/kinds/scheme_axes.h"

#include <string>

namespace kvlab::exp {

std::vector<AxisSpec> scheme_override_axes(bool with_hadamard) {
  std::vector<AxisSpec> axes = {
      AxisSpec{"group_size", AxisType::kInt, "0", {},
               "values per scale (per-group schemes); 0 = the preset's"}
          .range(0, 4096)
          .powers_of_two(),
      {"scale_rule", AxisType::kEnum, "preset", ref::scale_rule_override_names(),
       "scale rule override; preset = the preset's"},
  };
  if (with_hadamard)
    axes.push_back(
        AxisSpec{"hadamard", AxisType::kInt, "0", {},
                 "Walsh-Hadamard rotation of each run of n values before quantizing (0: none)"}
            .range(0, 32768)
            .powers_of_two()
            .checked_by([](const std::string& v) -> std::string {
              return v == "1" ? "a Hadamard rotation needs n >= 2 (0: none)" : "";
            }));
  return axes;
}

ref::SchemeOverride scheme_override(const Point& p) {
  ref::SchemeOverride o;
  o.group_size = static_cast<int>(p.integer("group_size"));
  o.scale_rule = p.str("scale_rule");
  if (p.has("hadamard")) o.hadamard = static_cast<int>(p.integer("hadamard"));
  return o;
}

}  // namespace kvlab::exp
