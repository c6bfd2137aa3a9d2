/* Host MPI baseline at one message size, and an emulation of a staged path.
 *
 *   mpirun -np N ./bench [bytes] [iters]
 *
 * Cases (each iteration runs every case once, in turn, between barriers, so
 * all cases see the same load; a case's time per iteration is the slowest
 * rank's):
 *   sendrecv          MPI_Send rank 0 -> MPI_Recv rank 1 (user buffers)
 *   sendrecv_staged   rank 0: memcpy(stage, src) then MPI_Send(stage);
 *                     rank 1: MPI_Recv(stage) then memcpy(dst, stage)
 *                     (unpipelined: the two staging copies a discrete GPU's
 *                     path adds, done as host memcpy here)
 *   allreduce         MPI_Allreduce(src, dst, f32 sum)
 *   allreduce_staged  memcpy(stage_in, src), MPI_Allreduce(stage_in,
 *                     stage_out), memcpy(dst, stage_out)
 * Bandwidths as nccl-tests define them: algbw = bytes / time; busbw =
 * algbw for a message, algbw * 2 (n - 1) / n for allreduce. Rank 0 prints
 * min and median over the iterations (GB/s = 1e9 bytes/s).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SR, SR_STAGED, AR, AR_STAGED, NCASES };
static const char *names[NCASES] = {"sendrecv", "sendrecv_staged", "allreduce",
                                    "allreduce_staged"};

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (64u << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  if (iters < 1 || bytes < sizeof(float) || bytes > ((size_t)1 << 31)) {
    if (rank == 0) fprintf(stderr, "bench: bytes in 4..2^31, iters >= 1\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  bytes -= bytes % sizeof(float); /* whole floats: n matches bytes */
  size_t n = bytes / sizeof(float);
  float *src = malloc(bytes), *dst = malloc(bytes), *st_in = malloc(bytes),
        *st_out = malloc(bytes);
  if (!src || !dst || !st_in || !st_out) {
    fprintf(stderr, "bench: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (size_t i = 0; i < n; i++) {
    src[i] = (float)(i % 7);
    dst[i] = st_in[i] = st_out[i] = 0.0f; /* fault every page in */
  }
  double *t = calloc((size_t)NCASES * iters, sizeof(double));
  if (!t) MPI_Abort(MPI_COMM_WORLD, 2);
  for (int it = -1; it < iters; it++) { /* it == -1: warm-up */
    for (int c = 0; c < NCASES; c++) {
      if (size < 2 && (c == SR || c == SR_STAGED)) continue;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      switch (c) {
      case SR:
        if (rank == 0) MPI_Send(src, (int)n, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
        if (rank == 1)
          MPI_Recv(dst, (int)n, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
      case SR_STAGED:
        if (rank == 0) {
          memcpy(st_in, src, bytes);
          MPI_Send(st_in, (int)n, MPI_FLOAT, 1, 1, MPI_COMM_WORLD);
        }
        if (rank == 1) {
          MPI_Recv(st_out, (int)n, MPI_FLOAT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          memcpy(dst, st_out, bytes);
        }
        break;
      case AR:
        MPI_Allreduce(src, dst, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case AR_STAGED:
        memcpy(st_in, src, bytes);
        MPI_Allreduce(st_in, st_out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        memcpy(dst, st_out, bytes);
        break;
      }
      double mine = MPI_Wtime() - t0, slowest;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= 0) t[(size_t)c * iters + it] = slowest;
    }
  }
  if (rank == 0) {
    double ring = 2.0 * (size - 1) / size;
    for (int c = 0; c < NCASES; c++) {
      if (size < 2 && (c == SR || c == SR_STAGED)) continue;
      double *tc = t + (size_t)c * iters;
      qsort(tc, iters, sizeof(double), cmp);
      double f = (c == AR || c == AR_STAGED) ? ring : 1.0;
      /* fastest time = highest bandwidth */
      double best = bytes / tc[0] / 1e9 * f, med = bytes / tc[iters / 2] / 1e9 * f,
             worst = bytes / tc[iters - 1] / 1e9 * f;
      printf("{\"case\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"iters\":%d,"
             "\"busbw_max\":%.3f,\"busbw_median\":%.3f,\"busbw_min\":%.3f,"
             "\"time_ms_median\":%.2f}\n",
             names[c], size, bytes, iters, best, med, worst, tc[iters / 2] * 1e3);
    }
  }
  MPI_Finalize();
  return 0;
}
