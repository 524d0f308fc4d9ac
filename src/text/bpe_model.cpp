#include "text/bpe_model.h"

#include <cstdio>
#include <queue>

#include "text/utf8.h"

namespace lt::text {

namespace {

constexpr size_t kMaxCachedWordBytes = 256;  // as tokenizers: longer words are not cached

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

}  // namespace

std::unique_ptr<BpeModel> BpeModel::read(const Json& j, const std::string& where, const JsonReader& r) {
  auto m = std::make_unique<BpeModel>();
  if (const Json* d = r.optional(j, where, "dropout")) {
    if (!d->is_number()) r.fail(field(where, "dropout"), "expected a number");
    if (d->get<double>() != 0.0)
      r.fail(field(where, "dropout"), "BPE dropout (random merges) is not supported",
             "set \"dropout\": null; leantrain tokenizes deterministically");
  }
  // Vocabulary: token -> id, every id once.
  const std::string wv = field(where, "vocab");
  read_vocab(r.object(r.required(j, where, "vocab"), wv), wv, r, m->vocab_, m->tokens_, m->has_token_);

  if (const Json* p = r.optional(j, where, "continuing_subword_prefix"))
    m->prefix_ = r.string(*p, field(where, "continuing_subword_prefix"));
  if (const Json* s = r.optional(j, where, "end_of_word_suffix")) m->suffix_ = r.string(*s, field(where, "end_of_word_suffix"));
  m->fuse_unk_ = r.bool_or(j, where, "fuse_unk", false);
  m->byte_fallback_ = r.bool_or(j, where, "byte_fallback", false);
  m->ignore_merges_ = r.bool_or(j, where, "ignore_merges", false);
  if (const Json* u = r.optional(j, where, "unk_token")) {
    const std::string unk = r.string(*u, field(where, "unk_token"));
    auto it = m->vocab_.find(unk);
    if (it == m->vocab_.end()) r.fail(field(where, "unk_token"), "'" + unk + "' is not in the vocabulary");
    m->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = m->vocab_.find(std::string_view(name));
    m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
  }

  // Merges: rank = position in the list; a pair listed twice keeps its last rank (as tokenizers).
  const std::string wm = field(where, "merges");
  const Json& merges = r.array(r.required(j, where, "merges"), wm);
  m->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& e = merges[rank];
    const std::string w = item(wm, rank);
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(w, "'" + s + "' is not two tokens separated by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = r.string(e[0], item(w, 0));
      b = r.string(e[1], item(w, 1));
    } else {
      r.fail(w, "expected \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = m->vocab_.find(a), ib = m->vocab_.find(b);
    if (ia == m->vocab_.end()) r.fail(w, "'" + a + "' is not in the vocabulary");
    if (ib == m->vocab_.end()) r.fail(w, "'" + b + "' is not in the vocabulary");
    if (b.size() < m->prefix_.size() || b.compare(0, m->prefix_.size(), m->prefix_) != 0)
      r.fail(w, "'" + b + "' does not start with the continuing_subword_prefix '" + m->prefix_ + "'");
    const std::string merged = a + b.substr(m->prefix_.size());
    auto im = m->vocab_.find(merged);
    if (im == m->vocab_.end()) r.fail(w, "the merged token '" + merged + "' is not in the vocabulary");
    if (rank > size_t(INT32_MAX)) r.fail(wm, "too many merges");
    m->merges_[pair_key(ia->second, ib->second)] = Merge{int32_t(rank), im->second};
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() >= kMaxCachedWordBytes) {
    merge_word(word, out);
    return;
  }
  const size_t hash = StringHash{}(word);
  CacheShard& shard = cache_[hash % kCacheShards];
  const size_t slot = (hash / kCacheShards) % kCacheSlotsPerShard;
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (!shard.slots.empty()) {
      const CacheSlot& s = shard.slots[slot];
      if (s.hash == hash && s.word == word) {
        out.insert(out.end(), s.ids.begin(), s.ids.end());
        return;
      }
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.slots.empty()) shard.slots.resize(kCacheSlotsPerShard);
  CacheSlot& s = shard.slots[slot];
  s.hash = hash;
  s.word.assign(word);
  s.ids.assign(out.begin() + ptrdiff_t(first), out.end());
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // The word's symbols: one per character (with prefix/suffix), byte tokens or <unk> for the
  // characters outside the vocabulary, as tokenizers' BPE::merge_word builds them.
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  int32_t pending_unk = -1;  // an <unk> not yet added (fuse_unk joins consecutive ones)
  std::string with_affix;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_char_len(static_cast<unsigned char>(word[i]));
    std::string_view ch = word.substr(i, len);
    const bool first = i == 0, last = i + len >= word.size();
    i += len;
    if ((!first && !prefix_.empty()) || (last && !suffix_.empty())) {
      with_affix.assign(!first ? prefix_ : std::string());
      with_affix.append(ch);
      if (last) with_affix.append(suffix_);
      ch = with_affix;
    }
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        // As tokenizers: a pending <unk> stays pending across byte tokens.
        for (unsigned char b : ch) ids.push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);

  // Merge by rank, leftmost first among equal ranks (a min-heap on (rank, position)).
  const int32_t n = int32_t(ids.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  for (int32_t k = 0; k < n; ++k) {
    prev[size_t(k)] = k - 1;
    next[size_t(k)] = k + 1 < n ? k + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  for (int32_t k = 0; k + 1 < n; ++k)
    if (const Merge* m = find_merge(ids[size_t(k)], ids[size_t(k) + 1])) queue.push({m->rank, k, m->id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const size_t pos = size_t(top.pos);
    if (!alive[pos] || next[pos] < 0) continue;
    const size_t right = size_t(next[pos]);
    const Merge* m = find_merge(ids[pos], ids[right]);
    if (!m || m->id != top.id) continue;  // an entry for a pair that has changed since
    ids[pos] = top.id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[right] >= 0) prev[size_t(next[right])] = int32_t(pos);
    if (prev[pos] >= 0)
      if (const Merge* pm = find_merge(ids[size_t(prev[pos])], ids[pos])) queue.push({pm->rank, prev[pos], pm->id});
    if (next[pos] >= 0)
      if (const Merge* nm = find_merge(ids[pos], ids[size_t(next[pos])])) queue.push({nm->rank, int32_t(pos), nm->id});
  }
  for (int32_t k = 0; k < n; ++k)
    if (alive[size_t(k)]) out.push_back(ids[size_t(k)]);
}

}  // namespace lt::text
