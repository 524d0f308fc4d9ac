// Running tests/chat/render_reference.py (jinja2, as transformers configures it) from a test and
// reading the cases it writes, one JSON object per line.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

namespace lt_test {

inline std::string chat_data_dir() { return std::string(LT_TEST_DATA_DIR) + "/chat_templates"; }
inline std::string chat_script_dir() { return std::string(LT_TEST_DATA_DIR) + "/../chat"; }

// Runs the script with `args`, returns its cases; a test failure (not a skip: CI installs
// python3-jinja2 through scripts/deps.sh --tests) when python3 or jinja2 is missing.
inline std::vector<nlohmann::ordered_json> reference_cases(const std::string& args) {
  char tmpl[] = "/tmp/lt_chat_ref_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return {};
  }
  close(fd);
  const char* py = std::getenv("LT_PYTHON");
  const std::string cmd = std::string(py && *py ? py : "python3") + " " + chat_script_dir() +
                          "/render_reference.py --templates " + chat_data_dir() + " --out " + tmpl + " " + args;
  const int rc = std::system(cmd.c_str());
  std::vector<nlohmann::ordered_json> cases;
  if (rc != 0) {
    ADD_FAILURE() << "'" << cmd << "' failed (exit " << rc
                  << "): it needs python3 with jinja2 (Debian: apt-get install python3-jinja2, or scripts/deps.sh --tests)";
  } else {
    std::ifstream in(tmpl);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) cases.push_back(nlohmann::ordered_json::parse(line));
  }
  std::remove(tmpl);
  return cases;
}

// Where two texts first differ, shown with some context.
inline std::string first_difference(const std::string& want, const std::string& got) {
  size_t d = 0;
  while (d < want.size() && d < got.size() && want[d] == got[d]) ++d;
  const size_t from = d > 40 ? d - 40 : 0;
  return "first difference at byte " + std::to_string(d) + "\n  want: " +
         nlohmann::json(want.substr(from, 120)).dump() + "\n  got:  " + nlohmann::json(got.substr(from, 120)).dump();
}

}  // namespace lt_test
