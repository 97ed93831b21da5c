// strings.h: the one whitespace trim of kvlab's text parsers (sweep configs, command-line
// values, sim's CSV / key = value / INI data files).
#pragma once

#include <string>

namespace kvlab {

// s without leading and trailing whitespace (space, \t, \n, \v, \f, \r: isspace in the C
// locale, independent of the process locale).
inline std::string trim(const std::string& s) {
  constexpr const char* kSpace = " \t\n\v\f\r";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

}  // namespace kvlab
