// Calls of tmrt_add as a runtime lowering writes them
// (runtime-call-names.test).
#include "trainmem/Conversion/RuntimeLowering.h"

using namespace mlir;
using namespace mlir::train;

LogicalResult lowerAdd(Operation *op, RuntimeCallBuilder &builder, Value lhs,
                       Value rhs, Value result) {
#if defined(SWAPPED)
  return builder.emitContiguous(op, rt::add{.b = builder.offset(rhs),
                                            .a = builder.offset(lhs),
                                            .out = builder.offset(result),
                                            .n = 4});
#elif defined(MISSING)
  return builder.emitContiguous(op, rt::add{.a = builder.offset(lhs),
                                            .b = builder.offset(rhs),
                                            .out = builder.offset(result)});
#elif defined(UNKNOWN)
  return builder.emitContiguous(op, rt::add{.a = builder.offset(lhs),
                                            .b = builder.offset(rhs),
                                            .out = builder.offset(result),
                                            .rows = 4});
#else
  return builder.emitContiguous(op, rt::add{.a = builder.offset(lhs),
                                            .b = builder.offset(rhs),
                                            .out = builder.offset(result),
                                            .n = 4});
#endif
}
