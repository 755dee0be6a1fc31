// Sums of edge rows into nodes, by source and by target node at once, on CPUs.
//
// sum[n] = rows[order[ptr[n]]] + ... + rows[order[ptr[n + 1] - 1]] for each node n: the edges of
// a node listed contiguously (a CSR of the edges by one endpoint; order null when the edges are
// already sorted by it). Each node's sum is held in registers and written once, nodes are split
// between threads, and a node's edges are added in their order: deterministic, no atomics,
// no zero-filled accumulator, and bf16 rows summed in float32 (rounded once, at the end).
// `index_add_` instead walks the edges and adds each row into memory (for bf16: rounding at
// every addition, or a float32 copy of the rows first).
//
// Storage dtypes float64, float32 and bfloat16 (summed in float64, float32 and float32).
// Built with kernels/norm_activation.cpp by partgnn/models/cpu_kernels.py and registered as
// torch.ops.partgnn.node_sums.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

namespace {

using at::vec::Vectorized;

template <typename scalar_t>
using opmath_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// A node's sum is held in at most this many vectors; wider rows are summed in column blocks.
constexpr int64_t kBlockVecs = 8;
// Nodes whose edges hold at least this many values in total share one task of the thread pool.
constexpr int64_t kGrainValues = 32768;

// The sums of one CSR: rows (E x width) into out (n_nodes x width).
template <typename scalar_t>
void sum_by_node(const scalar_t* rows, int64_t width, const int64_t* ptr, const int64_t* order,
                 int64_t n_nodes, int64_t n_edges, scalar_t* out) {
  using acc_t = opmath_t<scalar_t>;
  using Vec = Vectorized<acc_t>;
  constexpr int64_t lanes = Vec::size();
  constexpr int64_t block = kBlockVecs * lanes;
  const int64_t per_node = std::max<int64_t>(1, n_edges / std::max<int64_t>(1, n_nodes));
  const int64_t grain = std::max<int64_t>(1, kGrainValues / (per_node * width + 1));
  at::parallel_for(0, n_nodes, grain, [&](int64_t begin, int64_t end) {
    acc_t buf[block];
    Vec acc[kBlockVecs];
    for (int64_t node = begin; node < end; ++node) {
      const int64_t first = ptr[node], last = ptr[node + 1];
      for (int64_t column = 0; column < width; column += block) {
        const int64_t count = std::min(block, width - column);
        const int64_t n_vecs = (count + lanes - 1) / lanes;
        for (int64_t v = 0; v < n_vecs; ++v) acc[v] = Vec(acc_t(0));
        for (int64_t j = first; j < last; ++j) {
          const int64_t edge = order ? order[j] : j;
          const scalar_t* row = rows + edge * width + column;
          const acc_t* from;
          if constexpr (std::is_same_v<scalar_t, acc_t>) {
            from = row;
          } else {
            at::vec::convert(row, buf, count);
            from = buf;
          }
          for (int64_t v = 0; v < n_vecs; ++v) {
            const int64_t taken = std::min(lanes, count - v * lanes);
            acc[v] = acc[v] + Vec::loadu(from + v * lanes, taken);
          }
        }
        scalar_t* target = out + node * width + column;
        acc_t* to = std::is_same_v<scalar_t, acc_t> ? reinterpret_cast<acc_t*>(target) : buf;
        for (int64_t v = 0; v < n_vecs; ++v) {
          acc[v].store(to + v * lanes, std::min(lanes, count - v * lanes));
        }
        if constexpr (!std::is_same_v<scalar_t, acc_t>) at::vec::convert(buf, target, count);
      }
    }
  });
}

void check_csr(const at::Tensor& rows, const at::Tensor& ptr,
               const std::optional<at::Tensor>& order, const char* name) {
  TORCH_CHECK(ptr.dim() == 1 && ptr.size(0) >= 1 && ptr.scalar_type() == at::kLong &&
                  ptr.device().is_cpu(),
              "node_sums: ", name, "_ptr must be a CPU int64 vector of n_nodes + 1 offsets");
  TORCH_CHECK(ptr[0].item<int64_t>() == 0 && ptr[-1].item<int64_t>() == rows.size(0),
              "node_sums: ", name, "_ptr must run from 0 to the ", rows.size(0), " rows");
  if (order) {
    TORCH_CHECK(order->dim() == 1 && order->size(0) == rows.size(0) &&
                    order->scalar_type() == at::kLong && order->device().is_cpu(),
                "node_sums: ", name, "_order must be a CPU int64 vector of ", rows.size(0),
                " row indices");
  }
}

// The sums of rows (E x W) over each node's edges for two CSRs of the same edges (by source
// and by target node), each (n_nodes x W) in the rows' dtype.
std::tuple<at::Tensor, at::Tensor> node_sums(const at::Tensor& rows_in, const at::Tensor& a_ptr,
                                             const std::optional<at::Tensor>& a_order,
                                             const at::Tensor& b_ptr,
                                             const std::optional<at::Tensor>& b_order) {
  TORCH_CHECK(rows_in.device().is_cpu() && rows_in.dim() == 2,
              "node_sums: rows must be a CPU matrix (edges x width)");
  check_csr(rows_in, a_ptr, a_order, "a");
  check_csr(rows_in, b_ptr, b_order, "b");
  const auto rows = rows_in.contiguous();
  const auto a_pointers = a_ptr.contiguous(), b_pointers = b_ptr.contiguous();
  const auto a_orders = a_order ? a_order->contiguous() : at::Tensor();
  const auto b_orders = b_order ? b_order->contiguous() : at::Tensor();
  auto a = at::empty({a_ptr.size(0) - 1, rows.size(1)}, rows.options());
  auto b = at::empty({b_ptr.size(0) - 1, rows.size(1)}, rows.options());
  const auto order_or_null = [](const at::Tensor& t) {
    return t.defined() ? t.data_ptr<int64_t>() : nullptr;
  };
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, rows.scalar_type(), "node_sums", [&] {
    sum_by_node<scalar_t>(rows.data_ptr<scalar_t>(), rows.size(1), a_pointers.data_ptr<int64_t>(),
                          order_or_null(a_orders), a.size(0), rows.size(0),
                          a.data_ptr<scalar_t>());
    sum_by_node<scalar_t>(rows.data_ptr<scalar_t>(), rows.size(1), b_pointers.data_ptr<int64_t>(),
                          order_or_null(b_orders), b.size(0), rows.size(0),
                          b.data_ptr<scalar_t>());
  });
  return {a, b};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(partgnn, m) {
  m.def(
      "node_sums(Tensor rows, Tensor a_ptr, Tensor? a_order, Tensor b_ptr, Tensor? b_order) "
      "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(partgnn, CPU, m) { m.impl("node_sums", &node_sums); }
