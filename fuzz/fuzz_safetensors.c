/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (runtime/format/safetensors.c).
 *
 * Input: a whole .safetensors file (u64 header length, JSON header, data). It is written to
 * a scratch file and opened; for a file that opens, every tensor is looked up by name and
 * its data range read (bounds checked by ASan against the map). */
#include "fuzz_common.h"
#include "runtime/format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("model.safetensors", data, size);
    skv_clear_error();
    safetensors_file *f = safetensors_open(path);
    if (!f) {
        fuzz_expect_error("safetensors_open");
        return 0;
    }
    unsigned sink = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        if (safetensors_find(f, t->name) != t) abort();
        if (t->n_dims < 0 || t->n_dims > SAFETENSORS_MAX_DIMS) abort();
        if ((const uint8_t *)t->data < (const uint8_t *)f->map ||
            (const uint8_t *)t->data + t->nbytes > (const uint8_t *)f->map + f->size) abort();
        sink += fuzz_touch(t->data, t->nbytes);
    }
    (void)safetensors_find(f, "no.such.tensor");
    (void)sink;
    safetensors_close(f);
    return 0;
}
