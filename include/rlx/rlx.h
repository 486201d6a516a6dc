#pragma once
// Umbrella header for the rlx public API.
#include "rlx/dtype.h"
#include "rlx/error.h"
#include "rlx/graph.h"
#include "rlx/ops.h"
#include "rlx/serialize.h"
#include "rlx/session.h"
#include "rlx/shape.h"
#include "rlx/tensor.h"
