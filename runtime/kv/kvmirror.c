/* kvmirror.c: replays the hot tier's slot-write log into a mirror (see kvmirror.h). */
#include "kvmirror.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

size_t skv_kvmirror_slots(const skv_kvcache *c, int layer, int region) {
    const int *cap = region ? c->cap_v : c->cap_kv;
    size_t n = 0;
    for (int j = 0; j < c->Hkv; j++) n += (size_t)cap[layer * c->Hkv + j];
    return n;
}

/* One KV slot (K, V, mult) or V-only slot (V) from the cache into the mirror. */
static int copy_slot(const skv_kvcache *c, const skv_kvmirror_sink *k, int layer, int region, size_t slot) {
    const size_t row = (size_t)c->d * c->esz;
    if (region == 0)
        return k->row(k->ctx, layer, SKV_MIRROR_K, slot, (const char *)c->hk[layer] + slot * row, row) ||
               k->row(k->ctx, layer, SKV_MIRROR_V, slot, (const char *)c->hv[layer] + slot * row, row) ||
               k->row(k->ctx, layer, SKV_MIRROR_MULT, slot, c->mult[layer] + slot, sizeof(int))
                   ? -1 : 0;
    return k->row(k->ctx, layer, SKV_MIRROR_M, slot, (const char *)c->hm[layer] + slot * row, row) ? -1 : 0;
}

/* The whole region of a layer: resize, then every used slot of every lane. */
static long take_region(const skv_kvcache *c, const skv_kvmirror_sink *k, int layer, int region) {
    if (k->resize(k->ctx, layer, region, skv_kvmirror_slots(c, layer, region))) return -1;
    const int *off = region ? c->off_v : c->off_kv, *n = region ? c->n_v : c->n_kv;
    long rows = 0;
    for (int j = 0; j < c->Hkv; j++) {
        const int ln = layer * c->Hkv + j;
        for (int s = 0; s < n[ln]; s++, rows++)
            if (copy_slot(c, k, layer, region, (size_t)off[ln] + s)) return -1;
    }
    return rows;
}

long skv_kvmirror_sync(skv_kvcache *c, const skv_kvmirror_sink *k) {
    skv_kvlog *g = c->log;
    if (!g) return skv_error("skv_kvmirror_sync: the cache has no slot-write log");
    const int L = c->L;
    /* whole[l * 2 + region]: taken whole (relaid out, or everything when the log is lost) */
    unsigned char *whole = skv_calloc((size_t)L * 2, 1, "mirror sync");
    if (!whole) return -1;
    long rows = 0;
    for (int i = 0; i < L * 2; i++) whole[i] = g->lost;
    for (int i = 0; i < g->n; i++) {
        const skv_kvop *o = &g->ops[i];
        if (o->kind == SKV_KVOP_RELAYOUT_KV) whole[o->layer * 2] = 1;
        if (o->kind == SKV_KVOP_RELAYOUT_V) whole[o->layer * 2 + 1] = 1;
    }
    for (int i = 0; i < L * 2 && rows >= 0; i++) {
        if (!whole[i]) continue;
        long r = take_region(c, k, i / 2, i % 2);
        rows = r < 0 ? -1 : rows + r;
    }
    /* single slots of regions not taken whole: their indices are in the final layout (a
     * relayout would have marked the region whole). A slot may be listed more than once
     * (copied again, the same bytes) or be free by now (copied, harmless: within capacity). */
    for (int i = 0; i < g->n && rows >= 0; i++) {
        const skv_kvop *o = &g->ops[i];
        if (o->kind != SKV_KVOP_KV && o->kind != SKV_KVOP_V) continue;
        const int region = o->kind == SKV_KVOP_V;
        if (whole[o->layer * 2 + region]) continue;
        if (o->slot < 0 || (size_t)o->slot >= skv_kvmirror_slots(c, o->layer, region)) {
            rows = skv_error("skv_kvmirror_sync: logged slot %d of layer %d is outside the arena", o->slot, o->layer);
            break;
        }
        rows = copy_slot(c, k, o->layer, region, (size_t)o->slot) ? -1 : rows + 1;
    }
    free(whole);
    if (rows < 0) {
        g->lost = true;
        g->n = 0;
        return skv_error_prefix("hot tier mirror");
    }
    g->n = 0;
    g->lost = false;
    return rows;
}
