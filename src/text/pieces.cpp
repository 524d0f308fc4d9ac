#include "text/pieces.h"

#include <algorithm>

namespace lt::text {

Piece slice(const Piece& p, size_t begin, size_t end) {
  Piece s;
  s.text = p.text.substr(begin, end - begin);
  s.from_start = begin < p.from_start ? std::min(p.from_start, end) - begin : 0;
  return s;
}

void split_piece(const Piece& p, const std::vector<Span>& spans, SplitBehavior behavior, std::vector<Piece>& out) {
  struct Cut {
    size_t begin, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& s : spans) cuts.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::Removed:
      for (const Span& s : spans) cuts.push_back({s.begin, s.end, s.is_match});
      break;
    case SplitBehavior::Contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !cuts.empty()) cuts.back().end = s.end;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !cuts.empty()) cuts.back().begin = s.begin;
        else cuts.push_back({s.begin, s.end, false});
        previous_match = s.is_match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const Cut& c : cuts)
    if (!c.remove && c.end > c.begin) out.push_back(slice(p, c.begin, c.end));
}

std::vector<Span> literal_spans(std::string_view text, std::string_view needle) {
  std::vector<Span> out;
  if (text.empty() || needle.empty()) {
    out.push_back({0, text.size(), false});
    return out;
  }
  size_t prev = 0;
  for (size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + needle.size())) {
    if (at > prev) out.push_back({prev, at, false});
    out.push_back({at, at + needle.size(), true});
    prev = at + needle.size();
  }
  if (prev < text.size()) out.push_back({prev, text.size(), false});
  return out;
}

void prepend_text(Piece& p, std::string_view s) {
  if (p.text.empty()) return;
  p.text.insert(0, s);
  // The new bytes take the alignment of the first character.
  if (p.from_start > 0) p.from_start += s.size();
}

void replace_spans(Piece& p, const std::vector<Span>& spans, std::string_view content) {
  std::string text;
  text.reserve(p.text.size() + content.size() * 4);
  size_t from_start = 0;
  bool in_prefix = true;  // still inside the bytes that come from the input's first character
  for (const Span& s : spans) {
    if (!s.is_match) {
      text.append(p.text, s.begin, s.end - s.begin);
      const size_t kept = s.begin < p.from_start ? std::min(p.from_start, s.end) - s.begin : 0;
      if (in_prefix) from_start += kept;
      if (kept < s.end - s.begin) in_prefix = false;
    } else {
      text.append(content);
      // Inserted characters take the alignment of the byte before them: the match's last byte.
      const bool from_first = s.end > s.begin ? s.end - 1 < p.from_start : (s.begin == 0 ? p.from_start > 0 : s.begin - 1 < p.from_start);
      if (in_prefix && from_first) from_start += content.size();
      else if (!content.empty()) in_prefix = false;
    }
  }
  p.text = std::move(text);
  p.from_start = from_start;
}

}  // namespace lt::text
