/* model_pack.c: the model's pair-packed decode copies (skv_weight.pack): which matrices
 * get one, making them (in parallel over row ranges) and releasing them. The layout and
 * its kernels live in kernels/cpu/vecdot_pack.c; the GEMV uses a copy when it is there
 * (kernels/cpu/matmul.c). */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include "hugemem.h"
#include "model.h"
#include "util.h"
#include "../kernels/cpu/quant.h"
#include "../kernels/cpu/vecdot.h"

/* the matrices the decode GEMV reads: 7 per layer, then the LM head (i < n_mats) */
static int n_mats(const skv_model *m) { return (m->layers ? 7 * m->cfg.n_layer : 0) + 1; }
static skv_weight *mat_at(skv_model *m, int i) {
    if (i == n_mats(m) - 1) return &m->output;
    skv_layer *L = &m->layers[i / 7];
    skv_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return w[i % 7];
}

static bool packable(const skv_weight *w) { return w->data && skv_pack_supported(w->type, w->cols); }

/* bytes of w's copy in the arena: its rows, rounded up to 64 (so every copy is aligned) */
static size_t pack_len(const skv_weight *w) {
    return (skv_row_bytes(w->type, w->cols) * (size_t)w->rows + 63) & ~(size_t)63;
}

/* w's copy made at dst (pack_len(w) bytes), in parallel over 64-row ranges */
static void pack_one(skv_weight *w, uint8_t *dst) {
    const size_t rb = skv_row_bytes(w->type, w->cols);
    const int64_t chunk = 64;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int64_t r = 0; r < w->rows; r += chunk) {
        const int64_t nr = w->rows - r < chunk ? w->rows - r : chunk;
        skv_pack_rows(w->type, (const uint8_t *)w->data + (size_t)r * rb, dst + (size_t)r * rb, nr, w->cols);
    }
    w->pack = dst;
}

size_t skv_model_pack_size(skv_model *m) {
    size_t total = 0;
    for (int i = 0; i < n_mats(m); i++) {
        const skv_weight *w = mat_at(m, i);
        if (packable(w) && !skv_add_ok(total, pack_len(w), &total)) return SIZE_MAX;
    }
    return total;
}

/* All copies live in one arena (m->pack_arena, m->pack_bytes) of huge-page memory
 * (runtime/hugemem.h), in the order of mat_at. */
int skv_model_pack(skv_model *m) {
    if (m->pack_arena) return 0;
    const size_t total = skv_model_pack_size(m);
    if (total == SIZE_MAX) return skv_error("pack: the decode copies' size overflows");
    if (total == 0) return 0;
    uint8_t *arena = skv_huge_alloc(total, "decode copies of the weight matrices");
    if (!arena) return -1;
    size_t off = 0;
    for (int i = 0; i < n_mats(m); i++) {
        skv_weight *w = mat_at(m, i);
        if (!packable(w)) continue;
        pack_one(w, arena + off);
        off += pack_len(w);
    }
    m->pack_arena = arena;
    m->pack_bytes = total;
    return 0;
}

void skv_model_unpack(skv_model *m) {
    for (int i = 0; i < n_mats(m); i++) mat_at(m, i)->pack = NULL;
    skv_huge_free(m->pack_arena, m->pack_bytes);
    m->pack_arena = NULL;
    m->pack_bytes = 0;
}
