// rlx knobs: the tuning knobs (rlx/tuning.h) with their variables, types, ranges, defaults and
// docs, straight from the registry; --markdown prints the table of docs/development.md.
#include <CLI/CLI.hpp>
#include <iostream>
#include <limits>
#include <memory>

#include "cli.h"

namespace rlx::cli {
namespace {

struct KnobsOptions {
  bool markdown = false;
};

std::string values_text(const KnobInfo& k) {
  switch (k.type) {
    case KnobType::Bool:
      return "0/1";
    case KnobType::Int:
      return "[" + std::to_string(k.lo) + ", " +
             (k.hi == std::numeric_limits<int64_t>::max() ? std::string("2^63-1") : std::to_string(k.hi)) + "]";
    case KnobType::String: {
      std::string r;
      for (const char* c = k.choices; *c; ++c) r += *c == '|' ? std::string(", ") : std::string(1, *c);
      return r.empty() ? "text" : r;
    }
  }
  return "";
}

const char* type_name(KnobType t) { return t == KnobType::Bool ? "bool" : t == KnobType::Int ? "int" : "string"; }

int run_knobs(const KnobsOptions& o) {
  if (o.markdown) {
    std::cout << knob_table_markdown();
    return 0;
  }
  KnobScope scope = KnobScope::Process;
  for (const KnobInfo& k : knob_table()) {
    if (k.scope != scope) {
      scope = k.scope;
      std::cout << (scope == KnobScope::Compile
                        ? "compile knobs (CompileOptions member, else the variable, else the default; --knob NAME=VALUE):\n"
                        : "\nprocess settings (environment only):\n");
    }
    std::cout << "  " << k.name << "  " << k.env << "  " << type_name(k.type) << " " << values_text(k) << ", default "
              << (*k.default_text ? k.default_text : "unset");
    std::cout << "\n      " << k.doc << "\n";
  }
  return 0;
}

}  // namespace

Command add_knobs_command(CLI::App& parent) {
  auto o = std::make_shared<KnobsOptions>();
  CLI::App* sub = parent.add_subcommand(
      "knobs", "List the tuning knobs: name, RLX_* variable, type, range, default and what each does");
  sub->add_flag("--markdown", o->markdown, "Print the Markdown table of docs/development.md instead");
  return {sub, [o] { return run_knobs(*o); }};
}

}  // namespace rlx::cli
