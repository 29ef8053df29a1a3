/* topk.c: quickselect top-k over candidate positions, and a position sort (see topk.h). */
#include "topk.h"
#include <stdbool.h>
#include <stdlib.h>

/* a ranks before b: higher score, then later position */
static inline bool before(const float *s, int a, int b) {
    return s[a] > s[b] || (s[a] == s[b] && a > b);
}

static inline void swp(int *a, int i, int j) { int t = a[i]; a[i] = a[j]; a[j] = t; }

int skv_topk(const float *score, int *cand, int n, int k) {
    if (k <= 0) return 0;
    if (k >= n) return n;
    /* quickselect: afterwards cand[0..k) are the k best */
    int lo = 0, hi = n - 1;
    unsigned seed = 2463534242u ^ (unsigned)n;
    while (lo < hi) {
        seed ^= seed << 13; seed ^= seed >> 17; seed ^= seed << 5;
        int piv = cand[lo + (int)(seed % (unsigned)(hi - lo + 1))];
        /* three-way partition: [lo, lt) before piv, [lt, gt] == piv, (gt, hi] after */
        int lt = lo, i = lo, gt = hi;
        while (i <= gt) {
            if (cand[i] == piv) i++;
            else if (before(score, cand[i], piv)) swp(cand, lt++, i++);
            else swp(cand, i, gt--);
        }
        /* piv sits in [lt, gt] (it is unique, so lt == gt) */
        if (k <= lt) hi = lt - 1;
        else if (k > gt + 1) lo = gt + 1;
        else break;
    }
    return k;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}
void skv_sort_ints(int *a, int n) { if (n > 1) qsort(a, (size_t)n, sizeof(int), cmp_int); }
