// Fused LayerNorm + activation over the rows of a matrix, forward and backward, on CPUs.
//
// out = act(LayerNorm(z + shift)) + post, one row at a time: the row is read once, normalised,
// activated and written while it sits in registers and L1, instead of one full pass through
// memory per element-wise operation (add, LayerNorm, activation, residual add) and their
// autograd counterparts. The backward pass keeps nothing but the inputs: it recomputes the
// row's statistics and activation from z on the fly. shift is the bias of the Linear layer
// before (a row vector): added here, the matmul writes its output once instead of first
// copying the bias into every row.
//
// Storage dtypes float64, float32 and bfloat16 (computed in float64, float32 and float32);
// the LayerNorm weight and bias in any floating dtype (used in the compute dtype), their
// gradients in the compute dtype. Built just in time by partgnn/models/fused_norm_activation.py and
// registered as torch.ops.partgnn.norm_activation_forward / _backward.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

namespace {

using at::vec::Vectorized;

enum Activation : int64_t { kIdentity = 0, kRelu = 1, kSilu = 2 };

template <typename scalar_t>
using opmath_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// Rows of at least this many elements in total share one task of the thread pool.
constexpr int64_t kGrainElements = 16384;
// Rows of at most this many vectors are supported (256 float or 128 double values on AVX-512).
constexpr int64_t kMaxVecs = 16;

template <typename acc_t>
inline Vectorized<acc_t> sigmoid(Vectorized<acc_t> u) {
  const Vectorized<acc_t> one(acc_t(1));
  return one / (one + u.neg().exp_u20());
}

template <typename acc_t>
inline acc_t sum_lanes(Vectorized<acc_t> v) {
  return at::vec::vec_reduce_all<acc_t>([](auto a, auto b) { return a + b; }, v);
}

// Vectors a row of `width` values takes.
template <typename scalar_t>
int64_t vectors_per_row(int64_t width) {
  constexpr int64_t lanes = Vectorized<opmath_t<scalar_t>>::size();
  return (width + lanes - 1) / lanes;
}

// One row of `width` values as `n` vectors of the compute dtype; the last vector holds the
// `tail` remaining values (zero beyond them). N > 0: rows of exactly N full vectors, known at
// compile time (the loops over a row's vectors unroll); N = 0: any width.
template <typename scalar_t, int64_t N>
struct RowLayout {
  using acc_t = opmath_t<scalar_t>;
  using Vec = Vectorized<acc_t>;
  int64_t width;
  int64_t n;
  int64_t tail;

  explicit RowLayout(int64_t width_)
      : width(N ? N * Vec::size() : width_),
        n(N ? N : vectors_per_row<scalar_t>(width_)),
        tail(N ? Vec::size() : width_ - (n - 1) * Vec::size()) {}

  // Reads a row into x (through buf, n vectors long and zero beyond the row, for bf16 rows).
  void load(const scalar_t* src, Vec* x, acc_t* buf) const {
    const acc_t* from;
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      from = src;
    } else {
      at::vec::convert(src, buf, width);
      from = buf;
    }
    const int64_t count = N ? N : n;
    for (int64_t v = 0; v + 1 < count; ++v) x[v] = Vec::loadu(from + v * Vec::size());
    x[count - 1] = Vec::loadu(from + (count - 1) * Vec::size(), N ? Vec::size() : tail);
  }

  // Adds a row to x.
  void add(const scalar_t* src, Vec* x, acc_t* buf) const {
    Vec y[kMaxVecs];
    load(src, y, buf);
    for (int64_t v = 0; v < (N ? N : n); ++v) x[v] = x[v] + y[v];
  }

  void store(const Vec* x, scalar_t* dst, acc_t* buf) const {
    acc_t* to;
    if constexpr (std::is_same_v<scalar_t, acc_t>) {
      to = dst;
    } else {
      to = buf;
    }
    const int64_t count = N ? N : n;
    for (int64_t v = 0; v + 1 < count; ++v) x[v].store(to + v * Vec::size());
    x[count - 1].store(to + (count - 1) * Vec::size(), N ? Vec::size() : tail);
    if constexpr (!std::is_same_v<scalar_t, acc_t>) at::vec::convert(buf, dst, width);
  }

  // The vectors of a parameter row (nullptr: `fill` everywhere), zero beyond the row.
  void constant(const acc_t* values, acc_t fill, Vec* x) const {
    std::vector<acc_t> padded(n * Vec::size(), acc_t(0));
    for (int64_t i = 0; i < width; ++i) padded[i] = values ? values[i] : fill;
    for (int64_t v = 0; v < n; ++v) x[v] = Vec::loadu(padded.data() + v * Vec::size());
  }
};

// The rows' inputs and how they are transformed: out = act(norm(z + shift)) + post.
template <typename scalar_t>
struct Rows {
  using scalar_type = scalar_t;
  using acc_t = opmath_t<scalar_t>;
  const scalar_t* z;
  const acc_t* shift;  // nullptr: nothing added before the norm; else a row (compute dtype)
  const acc_t* weight;  // nullptr: no affine weight (in the compute dtype)
  const acc_t* bias;  // nullptr: no affine bias
  int64_t width;
  bool norm;
  double eps;
  int64_t activation;
};

// What one thread needs to transform rows: their layout, the norm's parameters as vectors, a
// mask of the row's lanes and a conversion buffer.
template <typename scalar_t, int64_t N>
struct RowKernel {
  using acc_t = opmath_t<scalar_t>;
  using Vec = Vectorized<acc_t>;
  const Rows<scalar_t>& rows;
  RowLayout<scalar_t, N> layout;
  Vec gamma[kMaxVecs], beta[kMaxVecs], shift[kMaxVecs], lanes[kMaxVecs];
  std::vector<acc_t> buf;

  explicit RowKernel(const Rows<scalar_t>& rows_)
      : rows(rows_), layout(rows_.width), buf(layout.n * Vec::size(), acc_t(0)) {
    layout.constant(rows.weight, acc_t(1), gamma);
    layout.constant(rows.bias, acc_t(0), beta);
    layout.constant(rows.shift, acc_t(0), shift);
    layout.constant(nullptr, acc_t(1), lanes);
  }

  // Rows r .. r + R - 1: their pre-activations u[i] = norm(z + shift); with the norm, x[i]
  // becomes the normalised row (x - mean) * rstd (zero beyond the row) and rstd[i] its
  // 1 / sqrt(variance + eps) (1 without the norm). The R rows' dependency chains (two row
  // reductions each) are independent: written side by side, the CPU overlaps them.
  template <int64_t R>
  void normalise(int64_t r, Vec (*x)[kMaxVecs], Vec (*u)[kMaxVecs], acc_t* rstd) {
    const int64_t n = N ? N : layout.n, width = rows.width;
    for (int64_t i = 0; i < R; ++i) layout.load(rows.z + (r + i) * width, x[i], buf.data());
    if (rows.shift) {
      for (int64_t v = 0; v < n; ++v) {
        for (int64_t i = 0; i < R; ++i) x[i][v] = x[i][v] + shift[v];
      }
    }
    if (!rows.norm) {
      for (int64_t i = 0; i < R; ++i) {
        for (int64_t v = 0; v < n; ++v) u[i][v] = x[i][v];
        rstd[i] = acc_t(1);
      }
      return;
    }
    Vec total[R], squares[R];
    for (int64_t i = 0; i < R; ++i) total[i] = squares[i] = Vec(acc_t(0));
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t i = 0; i < R; ++i) total[i] = total[i] + x[i][v];
    }
    Vec mean[R];
    for (int64_t i = 0; i < R; ++i) mean[i] = Vec(sum_lanes(total[i]) / acc_t(width));
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t i = 0; i < R; ++i) {
        x[i][v] = (x[i][v] - mean[i]) * lanes[v];
        squares[i] = at::vec::fmadd(x[i][v], x[i][v], squares[i]);
      }
    }
    for (int64_t i = 0; i < R; ++i) {
      rstd[i] = acc_t(1) / std::sqrt(sum_lanes(squares[i]) / acc_t(width) + acc_t(rows.eps));
    }
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t i = 0; i < R; ++i) {
        x[i][v] = x[i][v] * Vec(rstd[i]);
        u[i][v] = at::vec::fmadd(x[i][v], gamma[v], beta[v]);
      }
    }
  }

  // Rows r .. r + R - 1 of the backward pass: their gradient into grad_z, the row parameters'
  // gradients added to dshift, dweight and dbias.
  template <int64_t R>
  void backward(int64_t r, const scalar_t* grad_out, scalar_t* grad_z, Vec* dshift,
                Vec* dweight, Vec* dbias) {
    const int64_t n = N ? N : layout.n, width = rows.width;
    Vec x[R][kMaxVecs], u[R][kMaxVecs], g[R][kMaxVecs];
    acc_t rstd[R];
    normalise<R>(r, x, u, rstd);
    for (int64_t i = 0; i < R; ++i) {
      layout.load(grad_out + (r + i) * width, g[i], buf.data());
      times_activation_slope(u[i], g[i]);
    }
    if (rows.norm) {
      // Through the norm: dz = rstd (dxh - mean(dxh) - xh mean(dxh xh)), dxh = g gamma.
      Vec total[R], dot[R];
      for (int64_t i = 0; i < R; ++i) total[i] = dot[i] = Vec(acc_t(0));
      for (int64_t v = 0; v < n; ++v) {
        for (int64_t i = 0; i < R; ++i) {
          dweight[v] = at::vec::fmadd(g[i][v], x[i][v], dweight[v]);
          dbias[v] = dbias[v] + g[i][v];
          g[i][v] = g[i][v] * gamma[v];
          total[i] = total[i] + g[i][v];
          dot[i] = at::vec::fmadd(g[i][v], x[i][v], dot[i]);
        }
      }
      Vec mean_g[R], mean_gx[R];
      for (int64_t i = 0; i < R; ++i) {
        mean_g[i] = Vec(sum_lanes(total[i]) / acc_t(width));
        mean_gx[i] = Vec(sum_lanes(dot[i]) / acc_t(width));
      }
      for (int64_t v = 0; v < n; ++v) {
        for (int64_t i = 0; i < R; ++i) {
          g[i][v] = Vec(rstd[i]) * (g[i][v] - mean_g[i] - x[i][v] * mean_gx[i]);
        }
      }
    }
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t i = 0; i < R; ++i) dshift[v] = dshift[v] + g[i][v];
    }
    for (int64_t i = 0; i < R; ++i) layout.store(g[i], grad_z + (r + i) * width, buf.data());
  }

  void activate(Vec* u) const {
    for (int64_t v = 0; v < (N ? N : layout.n); ++v) {
      if (rows.activation == kRelu) {
        u[v] = at::vec::clamp_min(u[v], Vec(acc_t(0)));
      } else if (rows.activation == kSilu) {
        u[v] = u[v] * sigmoid(u[v]);
      }
    }
  }

  // g *= d act(u) / du.
  void times_activation_slope(const Vec* u, Vec* g) const {
    const Vec zero(acc_t(0)), one(acc_t(1));
    for (int64_t v = 0; v < (N ? N : layout.n); ++v) {
      if (rows.activation == kRelu) {
        g[v] = Vec::blendv(zero, g[v], u[v] > zero);
      } else if (rows.activation == kSilu) {
        const Vec s = sigmoid(u[v]);
        g[v] = g[v] * s * (one + u[v] * (one - s));
      }
    }
  }
};

// Rows processed side by side (see RowKernel::normalise).
constexpr int64_t kRowsAtOnce = 4;

template <typename scalar_t, int64_t N>
void forward_rows(const Rows<scalar_t>& rows, const scalar_t* post, scalar_t* out,
                  int64_t n_rows) {
  using acc_t = opmath_t<scalar_t>;
  using Vec = Vectorized<acc_t>;
  const int64_t width = rows.width;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / width);
  at::parallel_for(0, n_rows, grain, [&](int64_t begin, int64_t end) {
    RowKernel<scalar_t, N> kernel(rows);
    Vec x[kRowsAtOnce][kMaxVecs], u[kRowsAtOnce][kMaxVecs];
    acc_t rstd[kRowsAtOnce];
    const auto finish = [&](int64_t r, Vec* row) {
      kernel.activate(row);
      if (post) kernel.layout.add(post + r * width, row, kernel.buf.data());
      kernel.layout.store(row, out + r * width, kernel.buf.data());
    };
    int64_t r = begin;
    for (; r + kRowsAtOnce <= end; r += kRowsAtOnce) {
      kernel.template normalise<kRowsAtOnce>(r, x, u, rstd);
      for (int64_t i = 0; i < kRowsAtOnce; ++i) finish(r + i, u[i]);
    }
    for (; r < end; ++r) {
      kernel.template normalise<1>(r, x, u, rstd);
      finish(r, u[0]);
    }
  });
}

// The gradients of the row parameters, summed over rows (nullptr: not wanted).
template <typename acc_t>
struct RowGradients {
  acc_t* shift;
  acc_t* weight;
  acc_t* bias;
};

template <typename scalar_t, int64_t N>
void backward_rows(const Rows<scalar_t>& rows, const scalar_t* grad_out, scalar_t* grad_z,
                   const RowGradients<opmath_t<scalar_t>>& sums, int64_t n_rows) {
  using acc_t = opmath_t<scalar_t>;
  using Vec = Vectorized<acc_t>;
  const int64_t width = rows.width;
  // One partial sum of the row parameters' gradients (shift, weight, bias) per task, added up
  // in a fixed order afterwards: the result does not depend on which thread ran which task.
  const int64_t grain = std::max<int64_t>(1, kGrainElements / width);
  const int64_t n_tasks = std::max<int64_t>(1, (n_rows + grain - 1) / grain);
  const bool summed = sums.shift || sums.weight || sums.bias;
  const RowLayout<scalar_t, N> layout(width);
  const int64_t padded = layout.n * Vec::size();
  std::vector<acc_t> partial(summed ? 3 * n_tasks * padded : 0, acc_t(0));
  at::parallel_for(0, n_tasks, 1, [&](int64_t task_begin, int64_t task_end) {
    RowKernel<scalar_t, N> kernel(rows);
    const int64_t n = N ? N : layout.n;
    Vec dshift[kMaxVecs], dweight[kMaxVecs], dbias[kMaxVecs];
    for (int64_t task = task_begin; task < task_end; ++task) {
      for (int64_t v = 0; v < n; ++v) dshift[v] = dweight[v] = dbias[v] = Vec(acc_t(0));
      const int64_t end = std::min(n_rows, (task + 1) * grain);
      int64_t r = task * grain;
      for (; r + kRowsAtOnce <= end; r += kRowsAtOnce) {
        kernel.template backward<kRowsAtOnce>(r, grad_out, grad_z, dshift, dweight, dbias);
      }
      for (; r < end; ++r) kernel.template backward<1>(r, grad_out, grad_z, dshift, dweight, dbias);
      if (summed) {
        acc_t* task_partial = partial.data() + 3 * task * padded;
        for (int64_t v = 0; v < n; ++v) {
          dshift[v].store(task_partial + v * Vec::size());
          dweight[v].store(task_partial + padded + v * Vec::size());
          dbias[v].store(task_partial + 2 * padded + v * Vec::size());
        }
      }
    }
  });
  if (!summed) return;
  for (int64_t task = 0; task < n_tasks; ++task) {
    const acc_t* task_partial = partial.data() + 3 * task * padded;
    for (int64_t i = 0; i < width; ++i) {
      if (sums.shift) sums.shift[i] += task_partial[i];
      if (sums.weight) sums.weight[i] += task_partial[padded + i];
      if (sums.bias) sums.bias[i] += task_partial[2 * padded + i];
    }
  }
}

// Calls body with std::integral_constant<int64_t, N>: N full vectors per row for the common
// widths (whole multiples of the vector width up to 8 vectors), else 0 (any width).
template <typename scalar_t, typename Body>
void with_vectors_per_row(int64_t width, Body&& body) {
  constexpr int64_t lanes = Vectorized<opmath_t<scalar_t>>::size();
  const int64_t n = width % lanes == 0 ? width / lanes : 0;
  switch (n) {
    case 1: return body(std::integral_constant<int64_t, 1>{});
    case 2: return body(std::integral_constant<int64_t, 2>{});
    case 4: return body(std::integral_constant<int64_t, 4>{});
    case 8: return body(std::integral_constant<int64_t, 8>{});
    default: return body(std::integral_constant<int64_t, 0>{});
  }
}

void check_width(const at::Tensor& z) {
  TORCH_CHECK(z.dim() >= 1, "norm_activation: z needs a last dimension");
  const int64_t lanes = z.scalar_type() == at::kDouble ? Vectorized<double>::size()
                                                       : Vectorized<float>::size();
  TORCH_CHECK(z.size(-1) <= kMaxVecs * lanes, "norm_activation: rows of ", z.size(-1),
              " values are wider than the kernel's ", kMaxVecs * lanes);
}

void check_rows(const at::Tensor& z, const std::optional<at::Tensor>& other, const char* name) {
  if (!other) return;
  TORCH_CHECK(other->sizes() == z.sizes() && other->scalar_type() == z.scalar_type(),
              "norm_activation: ", name, " must match z (", z.sizes(), ", ", z.scalar_type(),
              "), got ", other->sizes(), ", ", other->scalar_type());
}

template <typename T>
const T* data_or_null(const std::optional<at::Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

std::optional<at::Tensor> contiguous(const std::optional<at::Tensor>& t) {
  return t ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
}

// The norm's weight or bias in the compute dtype of rows of dtype z_type.
std::optional<at::Tensor> in_compute_dtype(const std::optional<at::Tensor>& t,
                                           at::ScalarType z_type) {
  if (!t) return std::nullopt;
  return t->to(z_type == at::kDouble ? at::kDouble : at::kFloat).contiguous();
}

// The checked, contiguous inputs of either pass (the norm's parameters in the compute dtype).
struct Inputs {
  at::Tensor z;
  std::optional<at::Tensor> shift, weight, bias;
  bool norm;
  double eps;
  int64_t activation;

  Inputs(const at::Tensor& z_in, const std::optional<at::Tensor>& shift_in,
         const std::optional<at::Tensor>& weight_in, const std::optional<at::Tensor>& bias_in,
         bool norm_, double eps_, int64_t activation_)
      : norm(norm_), eps(eps_), activation(activation_) {
    TORCH_CHECK(z_in.device().is_cpu(), "norm_activation: CPU tensors only");
    check_width(z_in);
    TORCH_CHECK(!shift_in || (shift_in->dim() == 1 && shift_in->size(0) == z_in.size(-1)),
                "norm_activation: shift must be one row of ", z_in.size(-1), " values");
    z = z_in.contiguous();
    shift = in_compute_dtype(shift_in, z.scalar_type());
    weight = in_compute_dtype(weight_in, z.scalar_type());
    bias = in_compute_dtype(bias_in, z.scalar_type());
  }

  int64_t width() const { return z.size(-1); }
  int64_t n_rows() const { return width() ? z.numel() / width() : 0; }

  // Calls body(rows, std::integral_constant<int64_t, N>{}) for the rows' dtype and width.
  template <typename Body>
  void dispatch(Body&& body) const {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, z.scalar_type(), "norm_activation", [&] {
      using acc_t = opmath_t<scalar_t>;
      const Rows<scalar_t> rows{z.data_ptr<scalar_t>(), data_or_null<acc_t>(shift),
                                data_or_null<acc_t>(weight), data_or_null<acc_t>(bias),
                                width(), norm, eps, activation};
      with_vectors_per_row<scalar_t>(width(), [&](auto fixed) { body(rows, fixed); });
    });
  }
};

template <typename Rows_>
using row_type = typename std::decay_t<Rows_>::scalar_type;

at::Tensor norm_activation_forward(const at::Tensor& z, const std::optional<at::Tensor>& shift,
                                   const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias,
                                   const std::optional<at::Tensor>& post_in, bool norm,
                                   double eps, int64_t activation) {
  const Inputs inputs(z, shift, weight, bias, norm, eps, activation);
  check_rows(z, post_in, "post");
  const auto post = contiguous(post_in);
  auto out = at::empty_like(inputs.z);
  inputs.dispatch([&](const auto& rows, auto fixed) {
    using scalar_t = row_type<decltype(rows)>;
    forward_rows<scalar_t, decltype(fixed)::value>(rows, data_or_null<scalar_t>(post),
                                                   out.data_ptr<scalar_t>(), inputs.n_rows());
  });
  return out;
}

// Gradients of z and of the row parameters given (shift, weight, bias), each of the latter
// summed over the rows in the compute dtype when wanted (else undefined).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> norm_activation_backward(
    const at::Tensor& grad_out_in, const at::Tensor& z, const std::optional<at::Tensor>& shift,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, bool norm,
    double eps, int64_t activation, bool parameter_grads) {
  const Inputs inputs(z, shift, weight, bias, norm, eps, activation);
  check_rows(z, grad_out_in, "grad_out");
  const auto grad_out = grad_out_in.contiguous();
  auto grad_z = at::empty_like(inputs.z);
  const auto acc_options =
      inputs.z.options().dtype(z.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  const auto sum_of = [&](const std::optional<at::Tensor>& parameter, bool wanted) {
    return parameter_grads && wanted && parameter ? at::zeros({inputs.width()}, acc_options)
                                                  : at::Tensor();
  };
  auto grad_shift = sum_of(shift, true);
  auto grad_weight = sum_of(weight, norm);
  auto grad_bias = sum_of(bias, norm);
  inputs.dispatch([&](const auto& rows, auto fixed) {
    using scalar_t = row_type<decltype(rows)>;
    using acc_t = opmath_t<scalar_t>;
    const auto pointer = [](at::Tensor& t) { return t.defined() ? t.data_ptr<acc_t>() : nullptr; };
    const RowGradients<acc_t> sums{pointer(grad_shift), pointer(grad_weight), pointer(grad_bias)};
    backward_rows<scalar_t, decltype(fixed)::value>(
        rows, grad_out.data_ptr<scalar_t>(), grad_z.data_ptr<scalar_t>(), sums, inputs.n_rows());
  });
  return {grad_z, grad_shift, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY(partgnn, m) {
  m.def(
      "norm_activation_forward(Tensor z, Tensor? shift, Tensor? weight, Tensor? bias, "
      "Tensor? post, bool norm, float eps, int activation) -> Tensor");
  m.def(
      "norm_activation_backward(Tensor grad_out, Tensor z, Tensor? shift, Tensor? weight, "
      "Tensor? bias, bool norm, float eps, int activation, bool parameter_grads) "
      "-> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(partgnn, CPU, m) {
  m.impl("norm_activation_forward", &norm_activation_forward);
  m.impl("norm_activation_backward", &norm_activation_backward);
}
