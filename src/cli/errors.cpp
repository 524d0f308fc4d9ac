// One-line errors. lt::Error already reads "what: why (fix)"; a CLI11 parse error gets a why and
// a fix added; anything else is a bug and says so, still on one line and never as an abort.
#include <cctype>
#include <new>

#include "cli/cli.h"

namespace lt::cli {

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void print(std::FILE* err, const std::string& msg) {
  std::fprintf(err, "leantrain: error: %s\n", one_line(msg).c_str());
  std::fflush(err);
}

std::string strip_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

}  // namespace

int report(const std::exception& e, std::FILE* err) {
  if (auto* u = dynamic_cast<const UsageError*>(&e)) {
    print(err, u->what());
    return kExitUsage;
  }
  if (dynamic_cast<const Error*>(&e)) {
    print(err, e.what());
    return kExitRuntime;
  }
  if (dynamic_cast<const std::bad_alloc*>(&e)) {
    print(err, "out of host memory: an allocation failed (use a smaller --batch or --micro-batch)");
    return kExitRuntime;
  }
  print(err, std::string("internal error: ") + e.what() + " (please report this as a bug)");
  return kExitRuntime;
}

int report_parse_error(const CLI::ParseError& e, const std::string& command, std::FILE* err) {
  std::string help = command.empty() ? "leantrain --help" : "leantrain " + command + " --help";
  std::string msg = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::string args = strip_prefix(strip_prefix(msg, "The following arguments were not expected: "),
                                    "The following argument was not expected: ");
    // CLI11 lists the leftovers (not always in command-line order); name a flag if there is one.
    std::string first = args.substr(0, args.find(' '));
    for (size_t p = 0; p < args.size();) {
      size_t q = args.find(' ', p);
      std::string a = args.substr(p, q == std::string::npos ? std::string::npos : q - p);
      // "-1" is a leftover value (of a flag that does not exist), not the unknown flag itself.
      const bool number = a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.');
      if (a.rfind("-", 0) == 0 && !number) {
        first = a;
        break;
      }
      p = q == std::string::npos ? args.size() : q + 1;
    }
    if (command.empty() && first.rfind("-", 0) == 0)
      print(err, "unknown flag '" + first + "': flags go after a command, e.g. 'leantrain train " + first +
                     "' (run 'leantrain --help')");
    else if (command.empty())
      print(err, "unknown command '" + first + "': the commands are train, plan, profile, generate and eval (run 'leantrain --help')");
    else if (first.rfind("-", 0) == 0)
      print(err, "unknown flag '" + first + "': 'leantrain " + command + "' has no such option (run '" + help +
                     "' to list the flags)");
    else
      print(err, "unexpected argument '" + first + "': 'leantrain " + command +
                     "' takes no positional arguments (values go after a flag, e.g. --data " + first + ")");
  } else if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    print(err, "bad value: " + strip_prefix(msg, "Could not convert: ") +
                   " has the wrong form, e.g. a word where a number is expected (run '" + help + "')");
  } else if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    print(err, "missing flag: " + msg + " (run '" + help + "')");
  } else if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && msg.find(": At Most ") != std::string::npos) {
    // "--steps: At Most 1 required but received 2": the flag was given more than once.
    const std::string flag = msg.substr(0, msg.find(": At Most "));
    const size_t n = msg.rfind(' ');
    print(err, flag + " is given " + msg.substr(n + 1) + " times: it takes one value (give " + flag +
                   " once)");
  } else if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    print(err, "missing value: " + msg + " (write the value after the flag, e.g. --batch 64)");
  } else {
    print(err, "bad command line: " + msg + " (run '" + help + "')");
  }
  return kExitUsage;
}

}  // namespace lt::cli
