/* How fast one core reads 2 MiB that another core has just written: the
 * hand-over of a staged message's piece on lavapipe (the sender's device
 * copy writes a pinned buffer, the receiver's MPI copy reads it). Thread
 * A, on CPU 0, copies into a shared buffer; thread B, on CPU 1, copies it
 * out; they take turns 200 times. Prints B's rate in GB/s. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PIECE (2u << 20)
#define ROUNDS 200

static char *shared, *in, *out;
static atomic_int turn;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "probe: cannot run on CPU %d\n", cpu);
        exit(1);
    }
}

static void *writer(void *unused) {
    (void)unused;
    pin(0);
    for (int r = 0; r < ROUNDS; r++) {
        while (atomic_load(&turn) != 0) {
        }
        memcpy(shared, in, PIECE);
        atomic_store(&turn, 1);
    }
    return NULL;
}

int main(void) {
    shared = malloc(PIECE);
    in = malloc(PIECE);
    out = malloc(PIECE);
    if (!shared || !in || !out) return 1;
    memset(shared, 1, PIECE);
    memset(in, 2, PIECE);
    memset(out, 3, PIECE);
    pin(1);
    pthread_t thread;
    pthread_create(&thread, NULL, writer, NULL);
    double reading = 0;
    for (int r = 0; r < ROUNDS; r++) {
        while (atomic_load(&turn) != 1) {
        }
        double start = now();
        memcpy(out, shared, PIECE);
        __asm__ volatile("" : : "r"(out) : "memory");
        reading += now() - start;
        atomic_store(&turn, 0);
    }
    pthread_join(thread, NULL);
    printf("%.1f\n", (double)PIECE * ROUNDS / reading / 1e9);
    return 0;
}
