/* bench_pair.c: decode speed of two builds of the library, measured side by side in one
 * process, as a ratio. This VM's memory bandwidth jumps between ~35 and ~65 GB/s and its
 * clock between ~3.2 and ~3.7 GHz within seconds, so two benchmark runs made one after the
 * other differ by more than most changes do; here both builds (shared objects made from
 * the two source trees, scripts/bench-ab.sh) are loaded with dlopen, each with its own copy
 * of the model and KV cache, prefilled with the same tokens, and they decode in alternating
 * windows (A B B A ...), so each window pair sees nearly the same machine state.
 *
 *   bench_pair LIB_A LIB_B MODEL [--ctx N] [--windows W] [--steps S]
 * prints one row: model, context, ms per decode step of A and of B, and B/A.
 * Both builds must share the decode API as this file uses it (skv_model_load,
 * skv_state_new, skv_forward with skv_fwd_opts from runtime/engine/forward.h); the token ids stay
 * below 1000 so no vocabulary size is needed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"

typedef skv_model *(*load_fn)(const char *);
typedef skv_state *(*state_fn)(const skv_model *, int, int, bool);
typedef int (*forward_fn)(skv_state *, const int *, int, const skv_fwd_opts *);
typedef void (*state_free_fn)(skv_state *);
typedef void (*model_free_fn)(skv_model *);

typedef struct {
    void *lib;
    forward_fn forward;
    state_free_fn state_free;
    model_free_fn model_free;
    skv_model *m;
    skv_state *s;
} build;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_pair LIB_A LIB_B MODEL [--ctx N] [--windows W] [--steps S]\n"
               "  decode ms/step of two library builds (shared objects) in alternating windows\n"
               "  --ctx N      tokens prefilled before the timed decode (default 512)\n"
               "  --windows W  window pairs (default 30)\n"
               "  --steps S    decode steps per window (default 10)\n");
}

static int open_build(build *b, const char *path, const char *model, int cap) {
    memset(b, 0, sizeof *b);
    if (!(b->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "bench_pair: %s\n", dlerror());
        return -1;
    }
    load_fn load = (load_fn)dlsym(b->lib, "skv_model_load");
    state_fn state = (state_fn)dlsym(b->lib, "skv_state_new");
    b->forward = (forward_fn)dlsym(b->lib, "skv_forward");
    b->state_free = (state_free_fn)dlsym(b->lib, "skv_state_free");
    b->model_free = (model_free_fn)dlsym(b->lib, "skv_model_free");
    if (!load || !state || !b->forward || !b->state_free || !b->model_free) {
        fprintf(stderr, "bench_pair: %s lacks the decode API\n", path);
        return -1;
    }
    if (!(b->m = load(model)) || !(b->s = state(b->m, cap, 64, true))) {
        fprintf(stderr, "bench_pair: %s could not load %s\n", path, model);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 4) {
        usage(stderr);
        return 2;
    }
    int ctx = 512, windows = 30, steps = 10;
    for (int i = 4; i < argc; i++) {
        int *dst = !strcmp(argv[i], "--ctx") ? &ctx : !strcmp(argv[i], "--windows") ? &windows
                 : !strcmp(argv[i], "--steps") ? &steps : NULL;
        char *end = NULL;
        long v = dst && i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
        if (!dst || !end || *end || v < 1 || v > 1000000) {
            usage(stderr);
            return 2;
        }
        *dst = (int)v;
        i++;
    }
    const int decode = windows * steps, total = ctx + decode;
    build b[2];
    for (int i = 0; i < 2; i++)
        if (open_build(&b[i], argv[1 + i], argv[3], total + 8)) return 1;
    int *ids = malloc(sizeof(int) * (size_t)total);
    if (!ids) return 1;
    for (int i = 0; i < total; i++) ids[i] = (i * 7919 + 13) % 1000;
    const skv_fwd_opts last = {.logits = SKV_LOGITS_LAST};
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < ctx; p += 64)
            if (b[i].forward(b[i].s, ids + p, ctx - p < 64 ? ctx - p : 64, &last)) return 1;
    double t[2] = {0, 0};
    int done[2] = {0, 0};
    for (int w = 0; w < windows; w++)
        for (int k = 0; k < 2; k++) {
            const int i = (w & 1) ? 1 - k : k;   /* A B, then B A */
            const double t0 = now();
            for (int j = 0; j < steps; j++, done[i]++)
                if (b[i].forward(b[i].s, &ids[ctx + done[i]], 1, &last)) return 1;
            t[i] += now() - t0;
        }
    const double a = t[0] / done[0] * 1e3, bb = t[1] / done[1] * 1e3;
    const char *name = strrchr(argv[3], '/');
    printf("| %s | %d | %.3f | %.3f | %.3f |\n", name ? name + 1 : argv[3], ctx, a, bb, bb / a);
    for (int i = 0; i < 2; i++) {
        b[i].state_free(b[i].s);
        b[i].model_free(b[i].m);
    }
    free(ids);
    return 0;
}
