// Scores a graph with a TorchScript edge classifier the way ACTS's GNN plugin does
// (Plugins/Gnn/src/TorchEdgeClassifier.cpp): torch::jit::load on the device, eval, inference
// mode, forward({node features, edge index}), the output as float32 squeezed to (E,), sigmoid.
//
//   acts_like_classifier MODEL NODES.bin EDGES.bin N F E SCORES.bin
//
// NODES.bin: N x F float32 (row-major); EDGES.bin: 2 x E int64; SCORES.bin: E float32.
#include <torch/script.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

template <typename T>
std::vector<T> readValues(const std::string& path, std::size_t count) {
  std::vector<T> values(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()), count * sizeof(T));
  if (!in) {
    throw std::runtime_error("cannot read " + std::to_string(count) + " values from " + path);
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: acts_like_classifier MODEL NODES.bin EDGES.bin N F E SCORES.bin\n";
    return 2;
  }
  const std::int64_t nNodes = std::stoll(argv[4]);
  const std::int64_t nFeatures = std::stoll(argv[5]);
  const std::int64_t nEdges = std::stoll(argv[6]);
  try {
    torch::Device device(torch::kCPU);
    torch::jit::Module model = torch::jit::load(argv[1], device);
    model.eval();
    torch::InferenceMode guard(true);
    auto nodeValues = readValues<float>(argv[2], nNodes * nFeatures);
    auto edgeValues = readValues<std::int64_t>(argv[3], 2 * nEdges);
    auto nodeFeatures =
        torch::from_blob(nodeValues.data(), {nNodes, nFeatures}, torch::kFloat32).clone();
    auto edgeIndex = torch::from_blob(edgeValues.data(), {2, nEdges}, torch::kInt64).clone();
    std::vector<torch::jit::IValue> inputs{nodeFeatures.to(device), edgeIndex.to(device)};
    auto output = model.forward(inputs).toTensor().to(torch::kFloat32).squeeze();
    output.sigmoid_();
    auto scores = output.contiguous().cpu();
    std::ofstream out(argv[7], std::ios::binary);
    out.write(reinterpret_cast<const char*>(scores.data_ptr<float>()), nEdges * sizeof(float));
    std::cout << "scored " << nEdges << " edges\n";
  } catch (const std::exception& error) {
    std::cerr << "acts_like_classifier: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
