/* memcpy bandwidth of one 64 MiB copy, one thread: ./memcpy [bytes] [iters]
 * Prints min/median/max GB/s (1e9 bytes/s) of the copy (bytes / time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (64u << 20);
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  memcpy(b, a, bytes); /* warm-up */
  double *t = malloc(sizeof(double) * iters);
  for (int i = 0; i < iters; i++) {
    double t0 = now();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
    t[i] = now() - t0;
  }
  qsort(t, iters, sizeof(double), cmp);
  printf("{\"case\":\"memcpy\",\"bytes\":%zu,\"iters\":%d,\"gbps_max\":%.3f,"
         "\"gbps_median\":%.3f,\"gbps_min\":%.3f,\"time_ms_median\":%.2f}\n",
         bytes, iters, bytes / t[0] / 1e9, bytes / t[iters / 2] / 1e9,
         bytes / t[iters - 1] / 1e9, t[iters / 2] * 1e3);
  return a[0] + b[0] == 0;
}
