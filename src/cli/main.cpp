// `leantrain`: see cli/cli.h. All the work (and every catch) is in lt::cli::run.
#include "cli/cli.h"

int main(int argc, char** argv) { return lt::cli::run(argc, argv); }
