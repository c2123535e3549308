// What the actor layer's MPI code shares: a dtype's MPI type, and a duplicate of MPI_COMM_WORLD
// owned for an object's life.
#pragma once

#include <mpi.h>

#include "base/dtype.h"

namespace fr::actor {

inline MPI_Datatype MpiTypeOf(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI64: return MPI_INT64_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kBool:
    case DType::kU8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// MPI_COMM_WORLD duplicated (so its traffic meets no one else's), returning errors rather than
// aborting; freed with the object unless MPI was finalised first.
class WorldDup {
 public:
  WorldDup() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~WorldDup() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  WorldDup(const WorldDup&) = delete;
  WorldDup& operator=(const WorldDup&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace fr::actor
