/* fingerprint.h: a loaded model's fingerprint (skv_model_fp, calib.h) and corpus info.
 *
 * weight_hash = SHA-256 over, for every weight in a fixed order (token embedding, output
 * norm, output when untied, then per layer attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm,
 * w_gate, w_up, w_down): its type, rows and cols as little-endian int64, then either all its
 * bytes (full = true) or 16 evenly spaced 256-byte samples plus its last 256 bytes
 * (full = false: fast enough for every runtime start; any re-quantisation, different
 * checkpoint or fine-tune changes it in practice). Record which one you use: the two differ.
 * The bytes are those of the file's layout whatever layout the model holds in memory
 * (skv_weight.x8), so the hash does not depend on the decode layouts. */
#ifndef SKV_FINGERPRINT_H
#define SKV_FINGERPRINT_H
#include <stdbool.h>
#include "runtime/format/meta.h"
#include "model.h"

int skv_fp_from_model(const skv_model *m, bool full, skv_model_fp *fp);
/* Only the weight hash (64 hex digits + NUL into hex); 0, or -1 + error (out of memory). */
int skv_fp_weight_hash(const skv_model *m, bool full, char hex[65]);
/* The corpus in file `path` recorded by `name` (NULL: the file's name without its folder;
 * never a path, which only says where one machine keeps the file), the sha256 and size of
 * its bytes. -1 + error for a bad name (skv_corpus_name_ok) or an unreadable file. */
int skv_corpus_info_from_file(const char *path, const char *name, skv_corpus_info *ci);

#endif
