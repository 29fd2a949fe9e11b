// The CPU's mixture-of-experts block (MoeSpec, model/layers/layer_specs.h): the router in f32,
// then the tokens grouped by expert so that each chosen expert runs one gate|up product, one
// SiLU-and-multiply and one down product over all of its tokens (kernels/gemm's linear paths:
// the small-M kernel for few tokens, OpenBLAS for many), never one product per token per expert.
// Weights are views into the checkpoint in their stored dtype, except FusedTransposed experts,
// which are copied once at load into the [E, 2I, C] / [E, C, I] layout (same dtype).
// inner_cols() = E + 2 * k * I: the step's `inner` holds the router probabilities [T, E] and the
// gate|up rows of every (token, expert) pair [T * k, 2I]; the gathered inputs and the experts'
// outputs [T * k, C] live in the step's scratch (CpuStep::kMoeIn, kMoeOut).
#pragma once

#include <memory>

#include "model/layers/layer_specs.h"
#include "model/layers/layers.h"

namespace vlm {

std::unique_ptr<Mlp> make_cpu_moe(const WeightSource& w, const MoeSpec& spec);

}  // namespace vlm
