// Matrices whose rows are a stride apart: a linear layer's outputs left in the padded width its product ran
// at (linear_autocast), which cross-entropy reads and writes in place. Views over them where a view can
// say what a reshape or a copy would, so that GPT-2's 823 MB logits are not copied on their way.
#pragma once
#include <optional>

#include "kestrel/tensor.h"

namespace kestrel::fn {

// x as `shape` without a copy, where x's rows (innermost axis contiguous) are evenly spaced and only the
// dimensions before the last change: (N x T, C) <-> (N, T, C). Nothing where that takes a copy.
std::optional<Tensor> rows_view(const Tensor& x, const Shape& shape);

// rows_view where it applies, else x.reshape(shape) (contiguous x: a view; otherwise a copy).
Tensor rows_reshaped(const Tensor& x, const Shape& shape);

// A new (R, C) tensor laid out as x (R, C) is where x's rows are padded (a few columns wider than C, at
// most max(64, C / 8)): in rows of x's row stride, whose columns past C are allocated and left unwritten.
// Contiguous otherwise.
Tensor empty_like_rows(const Tensor& x);

// dy (R, C) seen whole as (R, width): where dy's rows are `width` apart from the start of a buffer no other
// tensor views (so that the columns past C are dy's own to overwrite), a view with them; else nothing.
std::optional<Tensor> sole_padded_rows(const Tensor& dy, int64_t width);

}  // namespace kestrel::fn
