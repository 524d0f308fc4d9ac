// The text being tokenized, as tokenizers' PreTokenizedString holds it: a list of pieces, each
// either plain text still to be normalized / split / tokenized, or an added token already found.
//
// tokenizers tracks, for every normalized byte, the original bytes it came from. The only use
// of that alignment that changes ids is Metaspace's prepend_scheme "first" ("does this piece
// start at offset 0 of the input?"), so a piece keeps just `from_start`: how many of its leading
// bytes come from the input's first character. Each transformation updates it by the rule
// tokenizers' NormalizedString applies to alignments (see prepend_text / replace_spans).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/regex.h"

namespace lt::text {

struct Piece {
  std::string text;
  int32_t id = -1;        // >= 0: an added token, kept whole
  size_t from_start = 0;  // leading bytes of `text` that come from the input's first character
};

// tokenizers' SplitDelimiterBehavior.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The bytes [begin, end) of p as a piece of its own.
Piece slice(const Piece& p, size_t begin, size_t end);

// NormalizedString::split: the pieces of p along `spans` (which cover p.text in order), appended
// to `out`; empty pieces are dropped, as PreTokenizedString::split drops them.
void split_piece(const Piece& p, const std::vector<Span>& spans, SplitBehavior behavior, std::vector<Piece>& out);

// Each occurrence of a non-empty literal as its own match (tokenizers' char / string patterns).
std::vector<Span> literal_spans(std::string_view text, std::string_view needle);

// NormalizedString::prepend (nothing on empty text).
void prepend_text(Piece& p, std::string_view s);
// NormalizedString::replace: every match span becomes `content`.
void replace_spans(Piece& p, const std::vector<Span>& spans, std::string_view content);

// Applies f(const Piece&, std::vector<Piece>& out) to every plain piece, keeping added tokens as
// they are; empty pieces are dropped (PreTokenizedString::split).
template <class F>
void split_each(std::vector<Piece>& pieces, F&& f) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    const size_t first = out.size();
    f(p, out);
    size_t keep = first;
    for (size_t i = first; i < out.size(); ++i)
      if (!out[i].text.empty() || out[i].id >= 0) {
        if (keep != i) out[keep] = std::move(out[i]);
        ++keep;
      }
    out.resize(keep);
  }
  pieces = std::move(out);
}

}  // namespace lt::text
