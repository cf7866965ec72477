#include "grid_model.h"

#include <cmath>

#include "rtft/testing.h"

namespace train {
namespace {

using rtft::DType;
using rtft::ReduceOp;
using rtft::Status;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1), exactly representable.
float Uniform(uint64_t key) {
  return static_cast<float>(static_cast<int64_t>(Mix(key) >> 40) - (1 << 23)) / (1 << 23);
}

uint64_t Key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return Mix(Mix(Mix(a) ^ b) ^ c) ^ d;
}

// Micro-batch `m`'s inputs (rows x H) for (step, d), and its target: half the tanh of the input.
void Batch(const GridShape& s, uint64_t seed, uint64_t step, int d, int m, std::vector<float>* x,
           std::vector<float>* y) {
  const int rows = s.batch / s.micro;
  x->resize(size_t(rows) * s.hidden);
  if (y) y->resize(x->size());
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < s.hidden; ++i) {
      const size_t at = size_t(r) * s.hidden + i;
      (*x)[at] = Uniform(Key(seed, step, (uint64_t(d) << 32) | uint64_t(m * rows + r), i));
      if (y) (*y)[at] = 0.5f * std::tanh((*x)[at]);
    }
}

}  // namespace

GridBlock::GridBlock(const GridShape& shape, const rtft::GridPlace& at, uint64_t seed)
    : shape_(shape), f_(shape.inner() / at.tensor) {
  const int h = shape.hidden;
  w1_ = size_t(h) * f_;
  b1_ = f_;
  w2_ = size_t(f_) * h;
  p_.assign(params(), 0.0f);
  const uint64_t stage = Mix(seed) ^ uint64_t(at.p);
  // The global column (W1) or row (W2) of each element, so that a block's values do not depend
  // on how many ranks share it.
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < f_; ++j)
      p_[size_t(i) * f_ + j] =
          Uniform(Key(stage, 1, i, at.t * f_ + j)) / std::sqrt(static_cast<float>(h));
  for (int j = 0; j < f_; ++j)
    for (int k = 0; k < h; ++k)
      p_[w1_ + b1_ + size_t(j) * h + k] =
          0.5f * Uniform(Key(stage, 2, at.t * f_ + j, k)) / std::sqrt(float(shape.inner()));
}

Status GridBlock::Forward(rtft::StepContext& c, const std::vector<float>& x, Saved* s,
                          std::vector<float>* out) {
  const int h = shape_.hidden, rows = static_cast<int>(x.size() / h);
  const float *w1 = p_.data(), *b1 = w1 + w1_, *w2 = b1 + b1_;
  s->x = x;
  s->h.assign(size_t(rows) * f_, 0.0f);
  std::vector<float> y(x.size(), 0.0f);
  for (int r = 0; r < rows; ++r) {
    float* hr = &s->h[size_t(r) * f_];
    for (int j = 0; j < f_; ++j) hr[j] = b1[j];
    for (int i = 0; i < h; ++i) {
      const float a = x[size_t(r) * h + i];
      for (int j = 0; j < f_; ++j) hr[j] += a * w1[size_t(i) * f_ + j];
    }
    for (int j = 0; j < f_; ++j) hr[j] = std::tanh(hr[j]);
    for (int j = 0; j < f_; ++j)
      for (int k = 0; k < h; ++k) y[size_t(r) * h + k] += hr[j] * w2[size_t(j) * h + k];
  }
  // The row-parallel product's partial sums, added over the tensor group in its ring's order.
  if (c.tensor) {
    rtft::FaultPoint("train.tensor");
    std::vector<float> sum(y.size());
    RTFT_RETURN_IF_ERROR(
        c.tensor->AllReduce(y.data(), sum.data(), y.size(), DType::kFloat32, ReduceOp::kSum));
    y.swap(sum);
  }
  out->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) (*out)[i] = x[i] + y[i];
  return Status::Ok();
}

Status GridBlock::Backward(rtft::StepContext& c, const Saved& s, const std::vector<float>& dout,
                           std::vector<float>* grad, std::vector<float>* dx) {
  const int h = shape_.hidden, rows = static_cast<int>(dout.size() / h);
  const float *w1 = p_.data(), *w2 = w1 + w1_ + b1_;
  float *g1 = grad->data(), *gb = g1 + w1_, *g2 = gb + b1_;
  std::vector<float> part(dout.size(), 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* hr = &s.h[size_t(r) * f_];
    const float* dy = &dout[size_t(r) * h];
    std::vector<float> dz(f_, 0.0f);
    for (int j = 0; j < f_; ++j) {
      float dh = 0;
      for (int k = 0; k < h; ++k) {
        g2[size_t(j) * h + k] += hr[j] * dy[k];
        dh += dy[k] * w2[size_t(j) * h + k];
      }
      dz[j] = dh * (1.0f - hr[j] * hr[j]);
      gb[j] += dz[j];
    }
    for (int i = 0; i < h; ++i) {
      const float a = s.x[size_t(r) * h + i];
      float acc = 0;
      for (int j = 0; j < f_; ++j) {
        g1[size_t(i) * f_ + j] += a * dz[j];
        acc += dz[j] * w1[size_t(i) * f_ + j];
      }
      part[size_t(r) * h + i] = acc;
    }
  }
  if (c.tensor) {
    std::vector<float> sum(part.size());
    RTFT_RETURN_IF_ERROR(
        c.tensor->AllReduce(part.data(), sum.data(), part.size(), DType::kFloat32, ReduceOp::kSum));
    part.swap(sum);
  }
  dx->resize(dout.size());
  for (size_t i = 0; i < dout.size(); ++i) (*dx)[i] = dout[i] + part[i];  // and the residual
  return Status::Ok();
}

Status GridBlock::Step(rtft::StepContext& c, uint64_t seed, std::vector<float>* grad, float* loss) {
  const int p = c.place.p, last = c.place.pipeline - 1, m_count = shape_.micro;
  grad->assign(params(), 0.0f);
  *loss = 0;
  std::vector<Saved> saved(m_count);
  std::vector<std::vector<float>> outs(m_count);
  std::vector<float> x, y;
  for (int m = 0; m < m_count; ++m) {
    Batch(shape_, seed, c.step, c.data_rank, m, &x, nullptr);
    if (p > 0) RTFT_RETURN_IF_ERROR(c.pipeline->Recv(x.data(), x.size(), DType::kFloat32, p - 1));
    RTFT_RETURN_IF_ERROR(Forward(c, x, &saved[m], &outs[m]));
    if (p < last) {
      rtft::FaultPoint("train.pipeline");
      RTFT_RETURN_IF_ERROR(
          c.pipeline->Send(outs[m].data(), outs[m].size(), DType::kFloat32, p + 1));
    }
  }
  const float scale = 1.0f / (static_cast<float>(shape_.batch) * shape_.hidden);
  std::vector<float> dout, dx;
  for (int m = m_count - 1; m >= 0; --m) {
    dout.resize(outs[m].size());
    if (p == last) {
      Batch(shape_, seed, c.step, c.data_rank, m, &x, &y);
      for (size_t i = 0; i < dout.size(); ++i) {
        const float e = outs[m][i] - y[i];
        *loss += 0.5f * e * e * scale;
        dout[i] = e * scale;
      }
    } else {
      RTFT_RETURN_IF_ERROR(c.pipeline->Recv(dout.data(), dout.size(), DType::kFloat32, p + 1));
    }
    RTFT_RETURN_IF_ERROR(Backward(c, saved[m], dout, grad, &dx));
    if (p > 0) RTFT_RETURN_IF_ERROR(c.pipeline->Send(dx.data(), dx.size(), DType::kFloat32, p - 1));
  }
  return Status::Ok();
}

}  // namespace train
