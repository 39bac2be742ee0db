//===- trainmem-tblgen.cpp - trainmem's TableGen driver -------------------===//
//
// mlir-tblgen's driver with trainmem's backends registered beside MLIR's
// (each backend registers itself: mlir::GenRegistration).
//
//===----------------------------------------------------------------------===//

#include "mlir/Tools/mlir-tblgen/MlirTblgenMain.h"

int main(int argc, char **argv) { return mlir::MlirTblgenMain(argc, argv); }
