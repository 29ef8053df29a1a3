/* align.c: the monotone byte-offset merge of two tokenizations of one text (align.h). */
#include "align.h"
#include "common/util.h"
#include <stdint.h>
#include <string.h>

static size_t width(const skv_align_tok *t) { return t->special ? 0 : t->len; }

int skv_align(const skv_align_tok *a, int na, const skv_align_tok *b, int nb, int *a_pos, int *b_pos) {
    if (na < 0 || nb < 0 || ((na > 0 || nb > 0) && (!a_pos || !b_pos)) || (na > 0 && !a) || (nb > 0 && !b))
        return skv_error("align: bad arguments (%d and %d tokens)", na, nb);
    int i = 0, j = 0, n = 0;
    uint64_t sa = 0, sb = 0;   /* start offsets of a[i], b[j] */
    while (i < na && j < nb) {
        const skv_align_tok *x = &a[i], *y = &b[j];
        uint64_t ea = sa + width(x), eb = sb + width(y);
        bool zx = width(x) == 0, zy = width(y) == 0;
        /* a zero-length text token is never matched: it has no bytes to compare */
        bool same = sa == sb && ea == eb && x->special == y->special && x->len == y->len &&
                    (x->special || x->len > 0) && (x->len == 0 || memcmp(x->bytes, y->bytes, x->len) == 0);
        if (same) {
            a_pos[n] = i; b_pos[n] = j; n++;
            i++; j++; sa = ea; sb = eb;
        } else if (ea < eb || (ea == eb && zx && !zy)) {
            i++; sa = ea;                   /* a's token ends first: nothing later in b can match it */
        } else if (eb < ea || (ea == eb && zy && !zx)) {
            j++; sb = eb;
        } else {                            /* same end, same kind, not equal: neither can match */
            i++; j++; sa = ea; sb = eb;
        }
    }
    return n;
}
