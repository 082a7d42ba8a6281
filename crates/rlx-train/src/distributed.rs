//! Data-parallel training: every rank holds the whole model, trains on its slice of each
//! global batch, and the ranks sum their weighted gradients (allreduce, in buckets of a
//! few MiB) so every rank applies the same update to the same params.
//!
//! [`Collective`] is what that needs from a process group; [`Mpi`] (cargo feature `mpi`)
//! implements it over MPI, the process group HPC clusters run (`mpirun`, Slurm's `srun`).
//! [`Solo`] is the one-process group.

use crate::trainer::GraphTrainer;
use rlx_ir::{Error, Result};
use std::ops::Range;
use std::time::Instant;

/// A group of processes that reduce and broadcast together. Every rank calls the same
/// operations in the same order with the same lengths.
pub trait Collective {
    /// This process's index, `0..size()`.
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// `recv` = the element-wise sum of every rank's `send`, on every rank.
    fn all_reduce_sum(&self, send: &[f32], recv: &mut [f32]) -> Result<()>;
    /// Rank 0's `bytes` on every rank.
    fn broadcast(&self, bytes: &mut [u8]) -> Result<()>;
    /// Ends the whole group after this rank failed (so the others do not wait forever).
    fn abort(&self, code: i32) -> !;
}

/// The group of one process.
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, send: &[f32], recv: &mut [f32]) -> Result<()> {
        recv.copy_from_slice(send);
        Ok(())
    }
    fn broadcast(&self, _: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// The gradient exchange of one step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReduceStats {
    /// Bytes each rank contributed (gradients and the loss, f32).
    pub bytes: usize,
    pub buckets: usize,
    pub seconds: f64,
}

/// 4 MiB buckets: PyTorch DDP uses 25 MB for GPU models; the models trained here are
/// 0.1-10 MB, and a bucket of a few MiB keeps each MPI call large (per-call latency is
/// ~10-50 us over loopback TCP) without a second full copy of a big model's gradients
/// in flight.
pub const DEFAULT_BUCKET_BYTES: usize = 4 << 20;

/// Data-parallel steps over a [`Collective`].
pub struct DataParallel<'a> {
    pub group: &'a dyn Collective,
    bucket_elems: usize,
    send: Vec<f32>,
    recv: Vec<f32>,
}

impl<'a> DataParallel<'a> {
    pub fn new(group: &'a dyn Collective, bucket_bytes: usize) -> DataParallel<'a> {
        DataParallel { group, bucket_elems: (bucket_bytes / 4).max(1), send: Vec::new(), recv: Vec::new() }
    }

    /// This rank's examples of a global batch of `global` (contiguous, sizes differing
    /// by at most one); an error when some rank would get none.
    pub fn shard(&self, global: usize) -> Result<Range<usize>> {
        let (r, n) = (self.group.rank(), self.group.size());
        if global < n {
            return Err(Error::input(format!(
                "a global batch of {global} cannot give each of the {n} ranks an example: use --batch {n} or more"
            )));
        }
        Ok(r * global / n..(r + 1) * global / n)
    }

    /// Rank 0's params and optimizer state on every rank (at the start, and after a
    /// resume), so every rank starts from the same point whatever it read or drew.
    pub fn sync(&mut self, trainer: &mut GraphTrainer) -> Result<()> {
        let buffers = trainer.params.iter_mut().chain(trainer.optimizer.state.moments.iter_mut().flatten());
        for buffer in buffers {
            let mut bytes = rlx_ir::encode_le(buffer, f32::to_le_bytes);
            self.group.broadcast(&mut bytes)?;
            for (v, b) in buffer.iter_mut().zip(bytes.chunks_exact(4)) {
                *v = f32::from_le_bytes(b.try_into().expect("4 bytes"));
            }
        }
        let mut step = trainer.optimizer.state.step.to_le_bytes();
        self.group.broadcast(&mut step)?;
        trainer.optimizer.state.step = u64::from_le_bytes(step);
        Ok(())
    }

    /// Replaces this rank's `grads` and `loss` (over its shard) by the global batch's:
    /// each rank's scaled by `weight` (its share of the global batch), then summed over
    /// ranks. Every rank ends with the same values.
    pub fn reduce(&mut self, grads: &mut [Vec<f32>], loss: &mut f32, weight: f32) -> Result<ReduceStats> {
        let start = Instant::now();
        self.send.clear();
        for g in grads.iter() {
            self.send.extend(g.iter().map(|&v| v * weight));
        }
        self.send.push(*loss * weight);
        self.recv.resize(self.send.len(), 0.0);
        let mut buckets = 0;
        for (send, recv) in self.send.chunks(self.bucket_elems).zip(self.recv.chunks_mut(self.bucket_elems)) {
            self.group.all_reduce_sum(send, recv)?;
            buckets += 1;
        }
        let mut at = 0;
        for g in grads.iter_mut() {
            let n = g.len();
            g.copy_from_slice(&self.recv[at..at + n]);
            at += n;
        }
        *loss = self.recv[at];
        Ok(ReduceStats { bytes: self.send.len() * 4, buckets, seconds: start.elapsed().as_secs_f64() })
    }

    /// Checks that every rank holds rank 0's params (by their SHA-256); an error naming
    /// the rank and `when` otherwise.
    pub fn check_same_params(&self, trainer: &GraphTrainer, when: &str) -> Result<String> {
        let mine = trainer.params_sha256();
        let mut root = mine.clone().into_bytes();
        self.group.broadcast(&mut root)?;
        if root != mine.as_bytes() {
            return Err(Error::internal(format!(
                "rank {}'s params differ from rank 0's {when} (sha256 {mine} against {})",
                self.group.rank(),
                String::from_utf8_lossy(&root)
            )));
        }
        Ok(mine)
    }
}

#[cfg(feature = "mpi")]
pub use self::mpi_group::Mpi;

#[cfg(feature = "mpi")]
mod mpi_group {
    use super::Collective;
    use mpi::collective::SystemOperation;
    use mpi::environment::Universe;
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::{Communicator, CommunicatorCollectives, Root};
    use rlx_ir::{Error, Result};

    /// `MPI_COMM_WORLD` of the job this process was started in (by `mpirun`, `srun`, or
    /// alone as a group of one). MPI's default error handler ends the job on a failed
    /// call, and `mpirun` ends every rank when one dies, so no rank waits on a dead one.
    pub struct Mpi {
        world: SimpleCommunicator,
        // Finalizes MPI when dropped, after `world`.
        _universe: Universe,
    }

    impl Mpi {
        /// Initializes MPI (once per process).
        pub fn init() -> Result<Mpi> {
            let universe =
                mpi::initialize().ok_or_else(|| Error::input("MPI is already initialized in this process"))?;
            Ok(Mpi { world: universe.world(), _universe: universe })
        }
    }

    impl Collective for Mpi {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }
        fn size(&self) -> usize {
            self.world.size() as usize
        }
        fn all_reduce_sum(&self, send: &[f32], recv: &mut [f32]) -> Result<()> {
            self.world.all_reduce_into(send, recv, SystemOperation::sum());
            Ok(())
        }
        fn broadcast(&self, bytes: &mut [u8]) -> Result<()> {
            self.world.process_at_rank(0).broadcast_into(bytes);
            Ok(())
        }
        fn abort(&self, code: i32) -> ! {
            self.world.abort(code)
        }
    }
}
