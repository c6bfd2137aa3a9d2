//! The transports: how a rank's data meets MPI or its peers. Over MPI
//! through pinned host memory (staged: [`pool`], [`message`]), or where a
//! device buffer lies, mapped (the mapped path); or through device memory
//! exported to the peers of one node ([`same_node`]). Beside them, what
//! every transport needs on the device: where a message's elements are
//! and the copies between buffers ([`place`]), and the reduction kernels
//! ([`kernels`]).

pub(crate) mod ends;
pub(crate) mod kernels;
pub(crate) mod message;
pub(crate) mod place;
pub(crate) mod pool;
pub(crate) mod same_node;
