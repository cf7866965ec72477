#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace train {

ParamOffsets Offsets(const ModelShape& s) {
  ParamOffsets o;
  o.w1 = 0;
  o.b1 = o.w1 + size_t(s.inputs) * s.hidden;
  o.w2 = o.b1 + s.hidden;
  o.b2 = o.w2 + size_t(s.hidden) * s.hidden;
  o.w3 = o.b2 + s.hidden;
  o.b3 = o.w3 + size_t(s.hidden) * s.classes;
  o.end = o.b3 + s.classes;
  return o;
}

namespace {

// out[b][j] = bias[j] + sum_i in[b][i] * w[i][j]  (w is in x out, row major).
void Dense(const float* in, const float* w, const float* bias, int batch, int n_in, int n_out,
           float* out) {
  for (int b = 0; b < batch; ++b) {
    float* o = out + size_t(b) * n_out;
    std::copy(bias, bias + n_out, o);
    for (int i = 0; i < n_in; ++i) {
      const float a = in[size_t(b) * n_in + i];
      const float* row = w + size_t(i) * n_out;
      for (int j = 0; j < n_out; ++j) o[j] += a * row[j];
    }
  }
}

// Given d_out (batch x n_out): adds dW = in^T d_out to gw, db = sum d_out to gb, and writes
// d_in = d_out w^T (when d_in is not null).
void DenseBackward(const float* in, const float* w, const float* d_out, int batch, int n_in,
                   int n_out, float* gw, float* gb, float* d_in) {
  for (int b = 0; b < batch; ++b) {
    const float* d = d_out + size_t(b) * n_out;
    for (int j = 0; j < n_out; ++j) gb[j] += d[j];
    for (int i = 0; i < n_in; ++i) {
      const float a = in[size_t(b) * n_in + i];
      float* g = gw + size_t(i) * n_out;
      const float* row = w + size_t(i) * n_out;
      float acc = 0;
      for (int j = 0; j < n_out; ++j) {
        g[j] += a * d[j];
        acc += row[j] * d[j];
      }
      if (d_in) d_in[size_t(b) * n_in + i] = acc;
    }
  }
}

}  // namespace

size_t ModelShape::params() const { return Offsets(*this).end; }

InitScales Scales(const ModelShape& shape) {
  return {1.0f / std::sqrt(float(shape.inputs)), 1.0f / std::sqrt(float(shape.hidden)),
          1.0f / std::sqrt(float(shape.hidden))};
}

void InitParams(const ModelShape& shape, uint64_t seed, float* p) {
  const ParamOffsets o = Offsets(shape);
  const InitScales s = Scales(shape);
  for (size_t i = 0; i < o.end; ++i) p[i] = InitialValue(o, s, seed, i);
}

void MakeBatch(const ModelShape& s, uint64_t seed, uint64_t step, int rank, int batch,
               std::vector<float>* x, std::vector<int>* y) {
  x->resize(size_t(batch) * s.inputs);
  y->resize(batch);
  // The teacher's weights, the same for every sample, drawn once per call (input-major), and the
  // classes' scores summed side by side: each score adds its products in input order as before,
  // so every bit of the batch is what drawing them per sample and class gave.
  const int classes = s.classes;
  std::vector<float> teacher(size_t(s.inputs) * classes);
  for (int c = 0; c < classes; ++c)
    for (int i = 0; i < s.inputs; ++i)
      teacher[size_t(i) * classes + c] = Uniform(Mix(seed + 7) ^ (uint64_t(c) << 20) ^ uint64_t(i));
  std::vector<float> score(classes);
  const uint64_t input_key = Mix(seed);
  for (int b = 0; b < batch; ++b) {
    const uint64_t sample = (step << 24) ^ (uint64_t(rank) << 12) ^ uint64_t(b);
    float* v = x->data() + size_t(b) * s.inputs;
    for (int i = 0; i < s.inputs; ++i) v[i] = Uniform(input_key ^ (sample << 10) ^ uint64_t(i));
    // Eight classes at a time in registers (a fixed count the compiler can vectorize).
    for (int c0 = 0; c0 < classes; c0 += 8) {
      float acc[8] = {};
      if (classes - c0 >= 8) {
        for (int i = 0; i < s.inputs; ++i) {
          const float* w = teacher.data() + size_t(i) * classes + c0;
          for (int k = 0; k < 8; ++k) acc[k] += v[i] * w[k];
        }
      } else {
        for (int i = 0; i < s.inputs; ++i)
          for (int k = 0; k < classes - c0; ++k)
            acc[k] += v[i] * teacher[size_t(i) * classes + c0 + k];
      }
      for (int k = 0; k < 8 && c0 + k < classes; ++k) score[c0 + k] = acc[k];
    }
    float best = -1e30f;
    int label = 0;
    for (int c = 0; c < classes; ++c) {
      if (score[c] > best) {
        best = score[c];
        label = c;
      }
    }
    (*y)[b] = label;
  }
}

float LossAndGradient(const ModelShape& s, const float* p, const std::vector<float>& x,
                      const std::vector<int>& y, int batch, float* g) {
  const ParamOffsets o = Offsets(s);
  std::memset(g, 0, o.end * sizeof(float));
  std::vector<float> h1(size_t(batch) * s.hidden), h2(size_t(batch) * s.hidden),
      logits(size_t(batch) * s.classes);
  Dense(x.data(), p + o.w1, p + o.b1, batch, s.inputs, s.hidden, h1.data());
  for (float& v : h1) v = std::tanh(v);
  Dense(h1.data(), p + o.w2, p + o.b2, batch, s.hidden, s.hidden, h2.data());
  for (float& v : h2) v = std::tanh(v);
  Dense(h2.data(), p + o.w3, p + o.b3, batch, s.hidden, s.classes, logits.data());
  // Softmax cross-entropy, mean over the batch.
  float loss = 0;
  std::vector<float> d3(logits.size());
  for (int b = 0; b < batch; ++b) {
    const float* l = &logits[size_t(b) * s.classes];
    const float m = *std::max_element(l, l + s.classes);
    float sum = 0;
    for (int c = 0; c < s.classes; ++c) sum += std::exp(l[c] - m);
    loss += std::log(sum) + m - l[y[b]];
    for (int c = 0; c < s.classes; ++c)
      d3[size_t(b) * s.classes + c] =
          (std::exp(l[c] - m) / sum - (c == y[b] ? 1.0f : 0.0f)) / batch;
  }
  std::vector<float> d2(h2.size()), d1(h1.size());
  DenseBackward(h2.data(), p + o.w3, d3.data(), batch, s.hidden, s.classes, g + o.w3, g + o.b3,
                d2.data());
  for (size_t i = 0; i < d2.size(); ++i) d2[i] *= 1.0f - h2[i] * h2[i];
  DenseBackward(h1.data(), p + o.w2, d2.data(), batch, s.hidden, s.hidden, g + o.w2, g + o.b2,
                d1.data());
  for (size_t i = 0; i < d1.size(); ++i) d1[i] *= 1.0f - h1[i] * h1[i];
  DenseBackward(x.data(), p + o.w1, d1.data(), batch, s.inputs, s.hidden, g + o.w1, g + o.b1,
                nullptr);
  return loss / batch;
}

}  // namespace train
