/* hf_config.h: a Hugging Face config.json read into a skv_config (runtime/model/hf_config.c),
 * for the Hugging Face loader (model_hf.c). */
#ifndef SKV_HF_CONFIG_H
#define SKV_HF_CONFIG_H
#include "model.h"

/* Fill c from the file at path; *windowed gets a malloc'd [n_layer] array, 1 for a
 * sliding-window layer (free it). 0, or -1 + an error naming the field or the unsupported
 * feature. */
int skv_hf_parse_config(const char *path, skv_config *c, int **windowed);

#endif
