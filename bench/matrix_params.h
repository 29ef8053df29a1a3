/* matrix_params.h: the weights a token's matrix products multiply (every layer's q, k, v, o,
 * gate, up and down; embeddings and the LM head left out), for the benchmarks' GFLOP/s
 * (2 x this x tokens). */
#ifndef SKV_BENCH_MATRIX_PARAMS_H
#define SKV_BENCH_MATRIX_PARAMS_H
#include "runtime/model/model.h"

static inline double bench_matrix_params(const skv_model *m) {
    double p = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const skv_layer *L = &m->layers[l];
        const skv_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) p += (double)w[i]->rows * w[i]->cols;
    }
    return p;
}

#endif
