/* model_pack.c: the model's pair-packed decode copies (skv_weight.pack): which matrices
 * get one, making them (in parallel over row ranges) and releasing them. The layout and
 * its kernels live in kernels/cpu/vecdot_pack.c; the GEMV uses a copy when it is there
 * (kernels/cpu/matmul.c). */
#include <omp.h>
#include <stdlib.h>
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

static int pack_one(skv_weight *w) {
    if (w->pack || !w->data || !skv_pack_supported(w->type, w->cols)) return 0;
    const size_t rb = skv_row_bytes(w->type, w->cols);
    size_t bytes;
    if (!skv_mul_ok(rb, (size_t)w->rows, &bytes)) return skv_error("pack: %lld rows of %zu bytes overflow", (long long)w->rows, rb);
    uint8_t *dst = skv_aligned_alloc(bytes, "decode copy of a weight matrix");
    if (!dst) return -1;
    const int64_t chunk = 64;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int64_t r = 0; r < w->rows; r += chunk) {
        const int64_t nr = w->rows - r < chunk ? w->rows - r : chunk;
        skv_pack_rows(w->type, (const uint8_t *)w->data + (size_t)r * rb, dst + (size_t)r * rb, nr, w->cols);
    }
    w->pack = dst;
    return 1;
}

size_t skv_model_pack_size(skv_model *m) {
    size_t total = 0;
    for (int i = 0; i < n_mats(m); i++) {
        const skv_weight *w = mat_at(m, i);
        if (w->data && skv_pack_supported(w->type, w->cols))
            total += skv_row_bytes(w->type, w->cols) * (size_t)w->rows;
    }
    return total;
}

int skv_model_pack(skv_model *m) {
    for (int i = 0; i < n_mats(m); i++) {
        skv_weight *w = mat_at(m, i);
        const int r = pack_one(w);
        if (r < 0) { skv_model_unpack(m); return -1; }
        if (r > 0) m->pack_bytes += skv_row_bytes(w->type, w->cols) * (size_t)w->rows;
    }
    return 0;
}

void skv_model_unpack(skv_model *m) {
    for (int i = 0; i < n_mats(m); i++) {
        skv_weight *w = mat_at(m, i);
        free((void *)w->pack);
        w->pack = NULL;
    }
    m->pack_bytes = 0;
}
