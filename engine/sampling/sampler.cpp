#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "kernels/core/check.h"
#include "kernels/ops/ops.h"

namespace vlm {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// A candidate as a key that sorts most likely first, lowest id on ties: its mass's bits inverted
// above its id (masses are >= 0, whose bits order as their values do).
uint64_t mass_key(float p, int32_t id) {
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  return (static_cast<uint64_t>(~bits) << 32) | static_cast<uint32_t>(id);
}
float key_mass(uint64_t k) {
  const uint32_t bits = ~static_cast<uint32_t>(k >> 32);
  float p;
  std::memcpy(&p, &bits, sizeof p);
  return p;
}
int32_t key_id(uint64_t k) { return static_cast<int32_t>(static_cast<uint32_t>(k)); }

// The smallest j whose j first keys in ascending order hold at least `target` of mass (strict:
// more than it), or n when none does (rounding); keys[0, j) are then those keys and keys[j - 1]
// the j-th. A selection, not a sort: halves by nth_element (expected O(n)), a sort of the last 32.
size_t first_reaching(uint64_t* keys, size_t n, double target, bool strict) {
  auto enough = [&](double m) { return strict ? m > target : m >= target; };
  size_t lo = 0, hi = n;
  double before = 0;  // the mass of keys[0, lo), the lo first keys: not enough
  while (hi - lo > 32) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(keys + lo, keys + mid, keys + hi);
    double m = before;
    for (size_t i = lo; i < mid; ++i) m += key_mass(keys[i]);
    if (enough(m)) {
      hi = mid;
    } else {
      before = m;
      lo = mid;
    }
  }
  std::sort(keys + lo, keys + hi);
  for (size_t j = lo; j < hi; ++j)
    if (enough(before += key_mass(keys[j]))) return j + 1;
  return hi;  // enough by the halves' sums, not by this one's (rounding), or none at all
}
}  // namespace

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_token_ids_(std::move(eos_token_ids)) {
  VLM_CHECK(vocab_size > 0, "vocab size {}", vocab_size);
  const auto V = static_cast<size_t>(vocab_size);
  slot_.assign(V, -1);
  counts_.assign(V, 0);
  bmax_.resize(static_cast<size_t>(num_blocks(vocab_size, kMaxBlock)));
  sel_.reserve(bmax_.size());
  block_sums_.resize(static_cast<size_t>(num_blocks(vocab_size, kDrawBlock)));
  scratch_.resize(kDrawBlock);
  terms_.resize(kDrawBlock);
}

void Sampler::build_patches(const float* logits, const Sequence& seq) {
  const SamplingParams& p = seq.params;
  const int64_t V = vocab_size_;
  patches_.clear();
  auto at = [&](int32_t t) -> float& {  // the token's patch, made from the raw logit on first use
    int32_t& s = slot_[t];
    if (s < 0) {
      s = static_cast<int32_t>(patches_.size());
      patches_.push_back({t, logits[t]});
    }
    return patches_[static_cast<size_t>(s)].value;
  };
  if (p.repetition_penalty != 1.0f)
    for (int32_t t : seq.token_ids) {
      if (slot_[t] >= 0) continue;  // once per distinct token (nothing else has a patch yet)
      float& l = at(t);
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    const auto out = seq.output_ids();
    for (int32_t t : out) ++counts_[t];
    for (int32_t t : out) {
      if (counts_[t] == 0) continue;
      at(t) -= p.frequency_penalty * static_cast<float>(counts_[t]) + p.presence_penalty;
      counts_[t] = 0;
    }
  }
  for (const auto& [t, bias] : p.logit_bias) at(t) += bias;
  if (seq.num_output_tokens() < p.min_tokens) {
    for (int32_t t : p.stop_token_ids) at(t) = kNegInf;
    if (!p.ignore_eos)
      for (int32_t t : eos_token_ids_)
        if (t >= 0 && t < V) at(t) = kNegInf;
  }
  for (const LogitPatch& q : patches_) slot_[q.id] = -1;
  std::sort(patches_.begin(), patches_.end(), [](const LogitPatch& a, const LogitPatch& b) { return a.id < b.id; });
}

void Sampler::compute_block_max(const LogitsView& v) {
  const int64_t V = v.size();
  block_max(v.row(), V, kMaxBlock, bmax_.data());
  const std::span<const LogitPatch> patches = v.patches();
  for (size_t k = 0; k < patches.size();) {  // the blocks that hold patches, again with them
    const int64_t b = patches[k].id / kMaxBlock, b0 = b * kMaxBlock, b1 = std::min(V, b0 + kMaxBlock);
    block_max(v.range(b0, b1, scratch_.data()), b1 - b0, kMaxBlock, &bmax_[static_cast<size_t>(b)]);
    while (k < patches.size() && patches[k].id < b1) ++k;
  }
}

float Sampler::row_max() const {
  float m = kNegInf;
  block_max(bmax_.data(), static_cast<int64_t>(bmax_.size()), static_cast<int64_t>(bmax_.size()), &m);
  return m;
}

int32_t Sampler::argmax(const LogitsView& v) {
  const float m = row_max();
  const auto nb = static_cast<int64_t>(bmax_.size());
  int64_t b = 0;
  while (b < nb && bmax_[static_cast<size_t>(b)] != m) ++b;
  if (b == nb) return 0;  // NaN logits
  const int64_t b0 = b * kMaxBlock, b1 = std::min(v.size(), b0 + kMaxBlock);
  const float* x = v.range(b0, b1, scratch_.data());
  for (int64_t i = 0; i < b1 - b0; ++i)
    if (x[i] == m) return static_cast<int32_t>(b0 + i);
  return static_cast<int32_t>(b0);
}

double Sampler::row_mass(const LogitsView& v, float s, float m) {
  const int64_t V = v.size(), nb = num_blocks(V, kDrawBlock);
  double total = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t b0 = b * kDrawBlock, b1 = std::min(V, b0 + kDrawBlock);
    block_sums_[static_cast<size_t>(b)] = exp_sum(v.range(b0, b1, scratch_.data()), b1 - b0, s, m, nullptr);
    total += block_sums_[static_cast<size_t>(b)];
  }
  return total;
}

int32_t Sampler::draw_all(const LogitsView& v, float s, float m, std::mt19937_64& rng) {
  // Nothing cut (the server's default sampling): the total and the search go by blocks, then the
  // masses of one block's tokens are computed again (the same f32 terms) and scanned.
  const int64_t V = v.size(), nb = num_blocks(V, kDrawBlock);
  const double total = row_mass(v, s, m);
  VLM_CHECK(total > 0, "no probability mass left");
  const double u = uniform01(rng) * total;
  double acc = 0;
  int64_t b = 0;
  for (; b + 1 < nb && u >= acc + block_sums_[static_cast<size_t>(b)]; ++b) acc += block_sums_[static_cast<size_t>(b)];
  // In block b; u within rounding of the block's end: its last possible token (or an earlier
  // block's, when b has none).
  for (bool first = true; b >= 0; --b, first = false) {
    const int64_t b0 = b * kDrawBlock, b1 = std::min(V, b0 + kDrawBlock);
    exp_sum(v.range(b0, b1, scratch_.data()), b1 - b0, s, m, terms_.data());
    int64_t last = -1;
    for (int64_t i = 0; i < b1 - b0; ++i) {
      if (terms_[static_cast<size_t>(i)] == 0.0f) continue;
      last = b0 + i;
      acc += terms_[static_cast<size_t>(i)];
      if (first && u < acc) return static_cast<int32_t>(last);
    }
    if (last >= 0) return static_cast<int32_t>(last);
  }
  return 0;
}

void Sampler::collect(const LogitsView& v, float s, float cut) {
  cand_ids_.clear();
  cand_vals_.clear();
  const int64_t V = v.size();
  for (size_t b = 0; b < bmax_.size(); ++b) {
    if (bmax_[b] * s < cut) continue;  // rounding keeps the order: nothing here reaches the cut
    const int64_t b0 = static_cast<int64_t>(b) * kMaxBlock, b1 = std::min(V, b0 + kMaxBlock);
    const float* x = v.range(b0, b1, scratch_.data());
    for (int64_t i = 0; i < b1 - b0; ++i) {
      const float l = x[i] * s;
      if (l < cut) continue;
      cand_ids_.push_back(static_cast<int32_t>(b0 + i));
      cand_vals_.push_back(l);
    }
  }
}

float Sampler::kth_largest(const LogitsView& v, float s, int64_t k) {
  // The k-th largest block maximum t: k blocks reach it, so at least k tokens are >= t, and
  // the k largest are among the tokens >= t.
  float t = kNegInf;
  if (k <= static_cast<int64_t>(bmax_.size())) {
    sel_.assign(bmax_.begin(), bmax_.end());
    std::nth_element(sel_.begin(), sel_.begin() + (k - 1), sel_.end(), std::greater<float>());
    t = sel_[static_cast<size_t>(k - 1)] * s;
  }
  collect(v, s, t);
  sel_.assign(cand_vals_.begin(), cand_vals_.end());
  std::nth_element(sel_.begin(), sel_.begin() + (k - 1), sel_.end(), std::greater<float>());
  return sel_[static_cast<size_t>(k - 1)];
}

double Sampler::nucleus(double target) {
  keys_.resize(cand_ids_.size());
  for (size_t j = 0; j < keys_.size(); ++j) keys_[j] = mass_key(cand_p_[j], cand_ids_[j]);
  keys_.resize(std::max<size_t>(first_reaching(keys_.data(), keys_.size(), target, false), 1));
  double total = 0;
  for (uint64_t k : keys_) total += key_mass(k);
  return total;
}

int32_t Sampler::sample_random(const LogitsView& v, const SamplingParams& p, std::mt19937_64& rng) {
  const int64_t V = vocab_size_;
  const float s = 1.0f / p.temperature;
  const float m = row_max() * s;  // the largest scaled logit (rounding keeps the order)
  VLM_CHECK(m > kNegInf, "every token is masked");
  // min_p and top_k as one threshold on the scaled logits: keep l >= cut.
  float cut = kNegInf;
  if (p.min_p > 0.0f) cut = m + std::log(p.min_p);
  const bool top_k = p.top_k > 0 && p.top_k < V;
  if (top_k) cut = std::max(cut, kth_largest(v, s, p.top_k));  // leaves its candidates
  if (cut == kNegInf && p.top_p >= 1.0f) return draw_all(v, s, m, rng);
  double total = 0;
  if (cut != kNegInf) {
    if (top_k) {  // keep the candidates >= cut, in id order
      size_t n = 0;
      for (size_t j = 0; j < cand_ids_.size(); ++j)
        if (cand_vals_[j] >= cut) cand_ids_[n] = cand_ids_[j], cand_vals_[n++] = cand_vals_[j];
      cand_ids_.resize(n);
      cand_vals_.resize(n);
    } else {
      collect(v, s, cut);
    }
    cand_p_.resize(cand_vals_.size());
    total = exp_sum(cand_vals_.data(), static_cast<int64_t>(cand_vals_.size()), 1.0f, m, cand_p_.data());
  } else {
    // top_p alone: the tokens >= the j-th largest block maximum are the most likely ones; grow j
    // until they hold top_p of the row's mass (then the nucleus is among them).
    total = row_mass(v, s, m);
    const double target = static_cast<double>(p.top_p) * total;
    sel_.assign(bmax_.begin(), bmax_.end());
    for (size_t j = 64;; j *= 4) {
      float t = kNegInf;
      if (j < sel_.size()) {
        std::nth_element(sel_.begin(), sel_.begin() + static_cast<int64_t>(j - 1), sel_.end(), std::greater<float>());
        t = sel_[j - 1] * s;
      }
      collect(v, s, t);
      cand_p_.resize(cand_vals_.size());
      const double mass = exp_sum(cand_vals_.data(), static_cast<int64_t>(cand_vals_.size()), 1.0f, m, cand_p_.data());
      if (mass >= target || t == kNegInf) break;
    }
  }
  VLM_CHECK(total > 0, "no probability mass left after the cut");
  if (p.top_p < 1.0f) {  // the CDF of the nucleus, most likely first
    total = nucleus(static_cast<double>(p.top_p) * total);
    const double u = uniform01(rng) * total;
    return key_id(keys_[first_reaching(keys_.data(), keys_.size(), u, true) - 1]);
  }
  const double u = uniform01(rng) * total;
  double acc = 0;
  for (size_t j = 0; j < cand_ids_.size(); ++j) {
    acc += cand_p_[j];
    if (u < acc) return cand_ids_[j];
  }
  for (size_t j = cand_ids_.size(); j-- > 0;)  // u within rounding of the total: the last possible token
    if (cand_p_[j] > 0.0f) return cand_ids_[j];
  return cand_ids_.back();
}

TokenLogprobs Sampler::logprobs_of(const float* logits, int32_t token, int num_top) {
  const int64_t V = vocab_size_;
  const LogitsView raw(logits, V, {});
  compute_block_max(raw);
  const float m = row_max();
  const double lse = m + std::log(exp_sum(logits, V, 1.0f, m, nullptr));
  auto lp = [&](int32_t t) { return static_cast<float>(logits[t] - lse); };
  TokenLogprobs r;
  r.token_id = token;
  r.logprob = lp(token);
  const float lt = logits[token];
  for (size_t b = 0; b < bmax_.size(); ++b) {
    if (!(bmax_[b] > lt)) continue;
    const int64_t b0 = static_cast<int64_t>(b) * kMaxBlock, b1 = std::min(V, b0 + kMaxBlock);
    for (int64_t i = b0; i < b1; ++i) r.rank += logits[i] > lt;
  }
  const int64_t k = num_top < 0 ? V : std::min<int64_t>(num_top, V);
  if (k > 0) {
    // The candidates: every token >= the k-th largest block maximum (all when k exceeds the blocks).
    float t = kNegInf;
    if (k <= static_cast<int64_t>(bmax_.size())) {
      sel_.assign(bmax_.begin(), bmax_.end());
      std::nth_element(sel_.begin(), sel_.begin() + (k - 1), sel_.end(), std::greater<float>());
      t = sel_[static_cast<size_t>(k - 1)];
    }
    collect(raw, 1.0f, t);
    order_.resize(cand_ids_.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
      return cand_vals_[a] > cand_vals_[b] || (cand_vals_[a] == cand_vals_[b] && cand_ids_[a] < cand_ids_[b]);
    });
    for (int64_t i = 0; i < k; ++i) r.top.push_back({cand_ids_[order_[i]], lp(cand_ids_[order_[i]])});
  }
  return r;
}

void Sampler::apply_constraint(const Sequence& seq, float* l) {
  structured::GrammarMatcher& m = *seq.params.constraint;
  const int64_t V = vocab_size_;
  const std::vector<uint64_t>& mask = m.token_mask(seq.constraint_state);
  const bool accepting = m.accepting(seq.constraint_state);
  eos_saved_.clear();
  for (int32_t t : eos_token_ids_)
    if (t >= 0 && t < V) eos_saved_.push_back(l[t]);
  const int64_t covered = std::min<int64_t>(V, static_cast<int64_t>(mask.size()) * 64);
  for (int64_t w = 0; w * 64 < covered; ++w) {
    const uint64_t bits = mask[static_cast<size_t>(w)];
    const int64_t end = std::min<int64_t>(covered, (w + 1) * 64);
    if (bits == ~uint64_t{0}) continue;
    for (int64_t i = w * 64; i < end; ++i)
      if (!((bits >> (i & 63)) & 1)) l[i] = kNegInf;
  }
  std::fill(l + covered, l + V, kNegInf);  // ids the tokenizer does not have
  size_t k = 0;
  for (int32_t t : eos_token_ids_)  // EOS exactly where the grammar accepts
    if (t >= 0 && t < V) l[t] = accepting ? eos_saved_[k++] : kNegInf;
  // Nothing left (a grammar the vocabulary cannot continue, or min_tokens masking the only way
  // out): EOS ends the sequence rather than a token outside the grammar.
  if (std::all_of(l, l + V, [](float x) { return x == kNegInf; }))
    for (int32_t t : eos_token_ids_)
      if (t >= 0 && t < V) l[t] = 0.0f;
}

const float* Sampler::constrained_row(const float* logits, const Sequence& seq) {
  work_.resize(static_cast<size_t>(vocab_size_));  // allocated on the first constrained request
  std::copy(logits, logits + vocab_size_, work_.data());
  for (const LogitPatch& q : patches_) work_[static_cast<size_t>(q.id)] = q.value;
  apply_constraint(seq, work_.data());
  return work_.data();
}

SampleResult Sampler::sample(const float* logits, Sequence& seq) {
  const SamplingParams& p = seq.params;
  build_patches(logits, seq);
  const LogitsView v = p.constraint ? LogitsView(constrained_row(logits, seq), vocab_size_, {})
                                    : LogitsView(logits, vocab_size_, patches_);
  compute_block_max(v);
  SampleResult r;
  r.token_id = p.greedy() ? argmax(v) : sample_random(v, p, seq.rng);
  if (p.constraint) {
    const uint32_t next = p.constraint->advance_token(seq.constraint_state, r.token_id);
    if (next != structured::GrammarMatcher::kDead) seq.constraint_state = next;
  }
  if (p.logprobs) r.logprobs = logprobs_of(logits, r.token_id, *p.logprobs);
  return r;
}

}  // namespace vlm
