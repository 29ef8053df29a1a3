/* model_pack.c: the model's decode layouts: the pair-packed copies (skv_weight.pack,
 * kernels/cpu/vecdot_pack.c) and the in-place 8-row groups (skv_weight.x8,
 * kernels/cpu/vecdot_x8.c): which matrices get one, making them (in parallel), undoing
 * them, and reading stored rows back from either layout. The GEMV picks the layout a
 * matrix has (kernels/cpu/matmul.c). */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/format/gguf.h"
#include "common/hugemem.h"
#include "model.h"
#include "common/util.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/vecdot.h"

/* the matrices the decode GEMV reads: 7 per layer, then the LM head (i < n_mats) */
static int n_mats(const skv_model *m) { return (m->layers ? 7 * m->cfg.n_layer : 0) + 1; }
static skv_weight *mat_at(skv_model *m, int i) {
    if (i == n_mats(m) - 1) return &m->output;
    skv_layer *L = &m->layers[i / 7];
    skv_weight *w[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return w[i % 7];
}

/* a pair-packed copy for the nibble types the 8-row groups do not cover (rows % 8 != 0, or
 * weights in a read-only mapping) */
static bool packable(const skv_weight *w) { return w->data && !w->x8 && skv_pack_supported(w->type, w->cols); }

static size_t wbytes_of(const skv_weight *w) { return skv_row_bytes(w->type, w->cols) * (size_t)w->rows; }

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

/* What a load into writable memory (the default) does: bytes regrouped in place, bytes of
 * pair-packed copies. */
void skv_model_layout_plan(skv_model *m, size_t *x8_bytes, size_t *copy_bytes) {
    *x8_bytes = *copy_bytes = 0;
    for (int i = 0; i < n_mats(m); i++) {
        const skv_weight *w = mat_at(m, i);
        if (!w->data) continue;
        if (w->x8 || skv_x8_supported(w->type, w->rows, w->cols)) *x8_bytes += wbytes_of(w);
        else if (skv_pack_supported(w->type, w->cols)) *copy_bytes += pack_len(w);
    }
}

/* ---- 8-row groups, in place ---- */

/* the weights are the model's own writable memory (a GGUF read into memory), not a
 * read-only file mapping or the Hugging Face loader's buffers */
static bool weights_writable(const skv_model *m) {
    return m->gguf && ((const gguf_file *)m->gguf)->resident;
}

/* w's groups rewritten in place: to the x8 layout (to_x8) or back to stored rows; each
 * thread goes through its share of the groups with its own 8-row buffer, all allocated
 * before any group is touched. 0, or -1 (out of memory, w unchanged). */
static int regroup(skv_weight *w, bool to_x8) {
    const size_t rb = skv_row_bytes(w->type, w->cols), gb = 8 * rb;
    const int64_t groups = w->rows / 8, nb = w->cols / skv_type_block(w->type);
    const int nth = omp_get_max_threads();
    uint8_t *tmp = skv_malloc((size_t)nth * gb, "8-row regrouping buffers");
    if (!tmp) return -1;
    uint8_t *base = (uint8_t *)(uintptr_t)w->data;   /* the model's own memory (weights_writable) */
    #pragma omp parallel num_threads(nth)
    {
        uint8_t *buf = tmp + (size_t)omp_get_thread_num() * gb;
        #pragma omp for schedule(static)
        for (int64_t g = 0; g < groups; g++) {
            uint8_t *grp = base + (size_t)g * gb;
            memcpy(buf, grp, gb);
            if (to_x8) skv_x8_pack_group(w->type, buf, grp, w->cols);
            else
                for (int r = 0; r < 8; r++) skv_x8_row(w->type, buf, r, 0, nb, grp + (size_t)r * rb);
        }
    }
    free(tmp);
    w->x8 = to_x8;
    return 0;
}

/* the tied LM head shares the embedding's bytes: keep both views' layout flags equal */
static void sync_tied(skv_model *m) {
    if (m->tok_embd.data == m->output.data) m->tok_embd.x8 = m->output.x8;
}

static void make_x8(skv_model *m) {
    if (!weights_writable(m)) return;
    for (int i = 0; i < n_mats(m); i++) {
        skv_weight *w = mat_at(m, i);
        if (w->data && !w->x8 && skv_x8_supported(w->type, w->rows, w->cols) && regroup(w, true) != 0) {
            skv_clear_error();   /* out of memory: the rest keep the stored layout */
            break;
        }
    }
    sync_tied(m);
}

void skv_weight_stored_rows(const skv_weight *w, int64_t r0, int64_t n, void *dst) {
    const size_t rb = skv_row_bytes(w->type, w->cols);
    uint8_t *out = dst;
    if (!w->x8) { memcpy(out, (const uint8_t *)w->data + (size_t)r0 * rb, (size_t)n * rb); return; }
    const int64_t nb = w->cols / skv_type_block(w->type);
    for (int64_t r = r0; r < r0 + n; r++)
        skv_x8_row(w->type, (const uint8_t *)w->data + (size_t)(r / 8) * 8 * rb, (int)(r % 8), 0, nb,
                   out + (size_t)(r - r0) * rb);
}

/* ---- both ---- */

/* First the 8-row groups (in place), then the pair-packed copies of the nibble matrices left
 * in the stored layout, in one arena (m->pack_arena, m->pack_bytes) of huge-page memory
 * (common/hugemem.h), in the order of mat_at. */
int skv_model_pack(skv_model *m) {
    make_x8(m);
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
    for (int i = 0; i < n_mats(m); i++) {
        skv_weight *w = mat_at(m, i);
        w->pack = NULL;
        if (w->x8 && regroup(w, false) != 0) skv_clear_error();   /* out of memory: stays x8, still correct */
    }
    sync_tied(m);
    skv_huge_free(m->pack_arena, m->pack_bytes);
    m->pack_arena = NULL;
    m->pack_bytes = 0;
}
