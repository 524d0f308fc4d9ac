// TEMPORARY (branch wt-data only): load_tokenizer_json is implemented by branch wt-tok; this
// stand-in lets wt-data link until that branch is merged, and is deleted by that merge commit.
#include "leantrain/error.h"
#include "text/tokenizer.h"

namespace lt::text {

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  fail("cannot read tokenizer " + path, "this build has no tokenizer.json reader yet", "use the byte tokenizer");
}

}  // namespace lt::text
